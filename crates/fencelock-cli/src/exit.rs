//! Exit codes and the error type that carries one.
//!
//! Every failure of fencelock itself ends as a [`Failure`]: one message and the exit code that
//! `main` returns. Library errors are mapped to codes by [`code_for`], so a shell script
//! can branch on "someone else holds it" (75) versus "the nodes are broken" (69).

use std::fmt;
use std::process::ExitCode;

/// Success. For `run`, the child's own status is returned instead.
pub(crate) const OK: u8 = 0;
/// `doctor` found at least one failing check.
pub(crate) const CHECK_FAILED: u8 = 1;
/// Bad usage (clap uses 2 too).
pub(crate) const USAGE: u8 = 2;
/// Too many nodes failed for a quorum (`EX_UNAVAILABLE`).
pub(crate) const UNAVAILABLE: u8 = 69;
/// Any other error of fencelock itself (`EX_SOFTWARE`).
pub(crate) const INTERNAL: u8 = 70;
/// The lock is held by another client (`EX_TEMPFAIL`).
pub(crate) const NOT_ACQUIRED: u8 = 75;
/// The lock was lost, or a token does not hold it.
pub(crate) const LOST: u8 = 76;
/// The nodes refuse this configuration (`EX_CONFIG`). Retrying cannot help.
pub(crate) const CONFIG: u8 = 78;
/// `run`: the command was found but could not be executed.
pub(crate) const CANNOT_EXECUTE: u8 = 126;
/// `run`: the command was not found.
pub(crate) const NOT_FOUND: u8 = 127;

/// The exit-code table, written once: `fencelock --help` shows it ([`help_table`]). Each row:
/// the code (`None`: 128+N, a signal), and its meaning in lines of the help's width.
const TABLE: &[(Option<u8>, &[&str])] = &[
    (
        Some(OK),
        &["success (run: the command's own exit status is returned instead)"],
    ),
    (Some(CHECK_FAILED), &["doctor: at least one check failed"]),
    (
        Some(USAGE),
        &[
            "usage: a bad argument, node URL or config file, no nodes configured, or the",
            "resource's key holds data that is not a lock (a list, a hash...)",
        ],
    ),
    (
        Some(UNAVAILABLE),
        &["nodes unavailable: too many nodes failed or timed out for a quorum"],
    ),
    (
        Some(INTERNAL),
        &["internal error of fencelock (I/O, an unexpected answer from a node)"],
    ),
    (
        Some(NOT_ACQUIRED),
        &[
            "not acquired: the lock is held by another client (--no-wait, or --wait ran out);",
            "run -E N exits with N instead",
        ],
    ),
    (
        Some(LOST),
        &["lock lost (run stopped the command), or extend/release with a token that does not hold the lock"],
    ),
    (
        Some(CONFIG),
        &[
            "configuration: the nodes refuse the URL's password (wrong or missing), its ACL user",
            "lacks permissions, its database does not exist, or a TLS certificate is refused (the",
            "node's, or the client's own); retrying cannot help (doctor too, for such a node)",
        ],
    ),
    (
        Some(CANNOT_EXECUTE),
        &["run: the command could not be executed"],
    ),
    (Some(NOT_FOUND), &["run: the command was not found"]),
    (
        None,
        &["run: the command was killed by signal N; demo: interrupted by signal N"],
    ),
];

/// The exit-code table shown at the end of `fencelock --help`, generated from [`TABLE`].
pub(crate) fn help_table() -> String {
    let mut out = String::from("Exit codes:");
    for (code, lines) in TABLE {
        let label = code.map_or_else(|| "128+N".to_owned(), |c| c.to_string());
        for (i, line) in lines.iter().enumerate() {
            let label = if i == 0 { label.as_str() } else { "" };
            out.push_str(&format!("\n    {label:<4} {line}"));
        }
    }
    out
}

/// A failure with the exit code it ends the process with.
#[derive(Debug)]
pub(crate) struct Failure {
    /// The exit code.
    pub(crate) code: u8,
    /// One message: which node or argument, what happened, what to try.
    pub(crate) message: String,
}

impl Failure {
    pub(crate) fn new(code: u8, message: impl Into<String>) -> Failure {
        Failure {
            code,
            message: message.into(),
        }
    }

    pub(crate) fn usage(message: impl Into<String>) -> Failure {
        Failure::new(USAGE, message)
    }

    pub(crate) fn internal(message: impl Into<String>) -> Failure {
        Failure::new(INTERNAL, message)
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Failure {}

/// The exit code for a library error.
pub(crate) fn code_for(err: &fencelock::Error) -> u8 {
    use fencelock::ErrorKind;
    if err.kind() != ErrorKind::InvalidConfig && err.needs_config_change() {
        return CONFIG;
    }
    match err.kind() {
        ErrorKind::Contention => NOT_ACQUIRED,
        ErrorKind::Unavailable | ErrorKind::TooSlow => UNAVAILABLE,
        ErrorKind::Lost => LOST,
        ErrorKind::InvalidConfig => USAGE,
        ErrorKind::Timeout => match err {
            fencelock::Error::Timeout { last, .. } => match last.kind() {
                ErrorKind::Unavailable | ErrorKind::TooSlow => UNAVAILABLE,
                _ => NOT_ACQUIRED,
            },
            _ => NOT_ACQUIRED,
        },
        _ => INTERNAL,
    }
}

/// `run -E CODE`: the failure "not acquired" ends with `code` instead of 75.
pub(crate) fn on_not_acquired(err: anyhow::Error, code: u8) -> anyhow::Error {
    match err.downcast::<Failure>() {
        Ok(failure) if failure.code == NOT_ACQUIRED => Failure::new(code, failure.message).into(),
        Ok(failure) => failure.into(),
        Err(other) => other,
    }
}

/// Turns `run`'s result into the process exit code, printing the error if there is one: with
/// `--json`, also as one JSON object on stdout (`{"error": {"code": 69, "message": "..."}}`),
/// where a program reading the command's JSON looks.
pub(crate) fn finish(result: anyhow::Result<u8>, json: bool) -> ExitCode {
    match result {
        Ok(code) => ExitCode::from(code),
        Err(err) => {
            let code = err
                .downcast_ref::<Failure>()
                .map_or(INTERNAL, |failure| failure.code);
            // `{:#}` joins the context chain on one line: "reading x: permission denied".
            let message = format!("{err:#}");
            if json {
                let value = serde_json::json!({"error": {"code": code, "message": message}});
                println!("{value}");
            }
            eprintln!("fencelock: error: {message}");
            ExitCode::from(code)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_help_table_is_generated_from_the_table_as_it_was_written_by_hand() {
        let before = "\
Exit codes:
    0    success (run: the command's own exit status is returned instead)
    1    doctor: at least one check failed
    2    usage: a bad argument, node URL or config file, no nodes configured, or the
         resource's key holds data that is not a lock (a list, a hash...)
    69   nodes unavailable: too many nodes failed or timed out for a quorum
    70   internal error of fencelock (I/O, an unexpected answer from a node)
    75   not acquired: the lock is held by another client (--no-wait, or --wait ran out);
         run -E N exits with N instead
    76   lock lost (run stopped the command), or extend/release with a token that does not hold the lock
    78   configuration: the nodes refuse the URL's password (wrong or missing), its ACL user
         lacks permissions, its database does not exist, or a TLS certificate is refused (the
         node's, or the client's own); retrying cannot help (doctor too, for such a node)
    126  run: the command could not be executed
    127  run: the command was not found
    128+N run: the command was killed by signal N; demo: interrupted by signal N";
        assert_eq!(help_table(), before);
    }
}
