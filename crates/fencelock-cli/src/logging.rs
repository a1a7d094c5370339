//! The tracing subscriber behind `-v` and `RUST_LOG`: the library's events on stderr.

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

/// The filter for `-v` counted `verbose` times: warnings from everything, and more of
/// fencelock's own events with each `-v` (the target `fencelock` covers `fencelock_cli`).
fn filter_for(verbose: u8) -> &'static str {
    match verbose {
        0 => "warn",
        // The acquisitions and releases are the library's debug records of these modules: -v
        // shows them, without the rest of the debug log (-vv).
        1 => "warn,fencelock=info,fencelock::redis::redlock=debug,fencelock::etcd=debug",
        2 => "warn,fencelock=debug",
        _ => "warn,fencelock=trace",
    }
}

/// Installs the subscriber: `-v` if given, else `RUST_LOG` if set, else warnings only. Colour
/// only on a terminal (and not with `NO_COLOR`).
pub(crate) fn install(verbose: u8) {
    let from_env = std::env::var("RUST_LOG")
        .ok()
        .filter(|spec| verbose == 0 && !spec.trim().is_empty());
    let filter = match from_env {
        Some(spec) => EnvFilter::try_new(&spec).unwrap_or_else(|e| {
            eprintln!("fencelock: warning: RUST_LOG={spec:?} is not a valid filter ({e}); showing warnings only. Example: RUST_LOG=fencelock=debug");
            EnvFilter::new(filter_for(0))
        }),
        None => EnvFilter::new(filter_for(verbose)),
    };
    let stderr = std::io::stderr();
    let ansi = stderr.is_terminal() && std::env::var_os("NO_COLOR").is_none();
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(ansi)
        // Its own report of a failed write goes to stderr with eprintln!, which panics on a
        // closed stderr: a log line that cannot be written is simply lost.
        .log_internal_errors(false);
    // Without -v, a warning is a line for a person, not a log record: no time, no module.
    let installed = if verbose == 0 {
        builder.without_time().with_target(false).try_init()
    } else {
        builder.try_init()
    };
    if let Err(e) = installed {
        eprintln!("fencelock: warning: cannot install the log subscriber: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_v_shows_more_of_fencelock() {
        for v in 0..5 {
            assert!(EnvFilter::try_new(filter_for(v)).is_ok(), "{v}");
        }
        assert_eq!(filter_for(0), "warn");
        assert!(filter_for(2).contains("fencelock=debug"));
    }
}
