//! `fencelock completions SHELL` and `fencelock man`: generated from the clap definition, so
//! they cannot drift from the command line.

use std::io::Write;

use crate::exit::{self, Failure};

/// Prints the completion script for `shell`.
pub(crate) fn completions(shell: clap_complete::Shell) -> u8 {
    let mut script = Vec::new();
    // Into a buffer: the generators panic on a write error, and stdout may be a closed pipe.
    clap_complete::generate(shell, &mut crate::cli::command(), "fencelock", &mut script);
    write_out(&script);
    exit::OK
}

/// Prints the manual page as roff (`fencelock man | man -l -`): fencelock(1), or with a
/// command's name its own page, fencelock-run(1).
///
/// # Errors
///
/// A usage [`Failure`] for an unknown command; an internal one if the page cannot be rendered.
pub(crate) fn man(command: Option<&str>) -> anyhow::Result<u8> {
    // Built: names the subcommands fencelock-run etc. and hands them the global options, less
    // those a command does not take.
    let cli = crate::cli::command();
    let page = match command {
        None => cli,
        Some(name) => cli.find_subcommand(name).cloned().ok_or_else(|| {
            let names: Vec<&str> = cli.get_subcommands().map(|c| c.get_name()).collect();
            Failure::usage(format!(
                "no command {name:?}; the pages are: fencelock man, or fencelock man COMMAND for one of {}",
                names.join(", ")
            ))
        })?,
    };
    let mut roff = Vec::new();
    clap_mangen::Man::new(page)
        .render(&mut roff)
        .map_err(|e| Failure::internal(format!("cannot render the manual page: {e}")))?;
    write_out(&roff);
    Ok(exit::OK)
}

/// Writes to stdout; a closed stdout (`fencelock man | head`) is not an error.
fn write_out(bytes: &[u8]) {
    let mut stdout = std::io::stdout().lock();
    let _ = stdout.write_all(bytes);
    let _ = stdout.flush();
}
