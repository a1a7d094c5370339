//! `fencelock completions SHELL` and `fencelock man`: generated from the clap definition, so
//! they cannot drift from the command line.

use std::io::Write;

use clap::CommandFactory;

use crate::cli::Cli;
use crate::exit::{self, Failure};

/// Prints the completion script for `shell`.
pub(crate) fn completions(shell: clap_complete::Shell) -> u8 {
    let mut script = Vec::new();
    // Into a buffer: the generators panic on a write error, and stdout may be a closed pipe.
    clap_complete::generate(shell, &mut Cli::command(), "fencelock", &mut script);
    write_out(&script);
    exit::OK
}

/// Prints the manual page as roff (`fencelock man | man -l -`).
///
/// # Errors
///
/// An internal [`Failure`] if the page cannot be rendered.
pub(crate) fn man() -> anyhow::Result<u8> {
    let mut page = Vec::new();
    clap_mangen::Man::new(Cli::command())
        .render(&mut page)
        .map_err(|e| Failure::internal(format!("cannot render the manual page: {e}")))?;
    write_out(&page);
    Ok(exit::OK)
}

/// Writes to stdout; a closed stdout (`fencelock man | head`) is not an error.
fn write_out(bytes: &[u8]) {
    let mut stdout = std::io::stdout().lock();
    let _ = stdout.write_all(bytes);
    let _ = stdout.flush();
}
