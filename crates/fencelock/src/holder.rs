//! Who holds a lock: a short label (host, process id, an optional text of the user's) stored next
//! to the lock so that an operator can tell who holds a stuck one (`fencelock inspect`).
//!
//! On Redis it rides in the lock key's value, after the owner token and a space
//! ([`owner_value`]), so that a labelled grant is the same bare `SET NX PX` as an unlabelled one
//! and the label lives, is extended and goes with the lock at no cost (issue 33; other Redlock
//! clients compare only their own values). Older versions wrote the side key
//! [`crate::protocol::holder_key`] (`fencelock:holder:<resource>`) in the granting script; readers
//! still show one whose TTL is its lock's ([`LEGACY_HOLDER_SLACK_MS`]). On etcd it is the value of
//! the waiter's key.

use std::fmt;

/// The prefix of the holder side keys: `fencelock:holder:<resource>` (written out in the Lua
/// scripts too; a test holds them to it).
pub(crate) const HOLDER_PREFIX: &str = "fencelock:holder:";

/// The holder side key of `resource`.
pub(crate) fn holder_key(resource: &str) -> String {
    format!("{HOLDER_PREFIX}{resource}")
}

/// What separates the owner token from the holder in a lock key's value:
/// `<token> host=<host> pid=<pid>[ label=<label>]`. The token is hex, so the first space ends it.
pub(crate) const HOLDER_SEPARATOR: char = ' ';

/// The owner value a client stores in its lock keys: the bare token, or the token, a space and
/// the holder's text when the client was given a holder. The label then costs no key and no
/// command of its own: a labelled grant is the same `SET NX PX` as an unlabelled one.
pub(crate) fn owner_value(token: &str, holder: Option<&str>) -> String {
    match holder {
        Some(holder) => format!("{token}{HOLDER_SEPARATOR}{holder}"),
        None => token.to_string(),
    }
}

/// The holder carried in an owner value ([`owner_value`]); `None` for a bare token or another
/// client's value.
pub(crate) fn owner_holder(value: &str) -> Option<Holder> {
    let (_, text) = value.split_once(HOLDER_SEPARATOR)?;
    Holder::parse(text)
}

/// Whether `value` is an owner value a fencelock client stores: 32 lowercase hex digits (the
/// token), alone or followed by a space and a holder ([`owner_value`]).
pub(crate) fn is_owner_value(value: &str) -> bool {
    let (token, holder) = match value.split_once(HOLDER_SEPARATOR) {
        Some((token, rest)) => (token, Some(rest)),
        None => (value, None),
    };
    token.len() == 32
        && token
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        && holder.is_none_or(|h| Holder::parse(h).is_some())
}

/// How far apart (ms) an older client's side key's TTL and its lock key's may be for the side
/// key to be read as the lock's label: that client's scripts set and extend both in one call,
/// with one TTL, so they are equal but for the read's own time. A side key left behind by a lock
/// key lost without it (an eviction, a `DEL` by hand) has some other TTL.
pub(crate) const LEGACY_HOLDER_SLACK_MS: i64 = 10;

/// The longest user label accepted, in bytes.
pub const MAX_LABEL_LEN: usize = 200;

/// Who holds a lock: host, process id and an optional label of the user's. Stored as text,
/// `host=<host> pid=<pid>[ label=<label>]` (see [`Holder::parse`]).
///
/// ```
/// use fencelock::Holder;
///
/// let holder = Holder::this_process().with_label("nightly report");
/// let text = holder.to_string();
/// assert!(text.contains("label=nightly report"));
/// assert_eq!(Holder::parse(&text), Some(holder));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holder {
    host: String,
    pid: u32,
    label: Option<String>,
}

impl Holder {
    /// This process: the host name and the process id, no label.
    pub fn this_process() -> Holder {
        Holder {
            host: host_name(),
            pid: std::process::id(),
            label: None,
        }
    }

    /// The same holder with a label of the user's (a job name, a request id). Checked by
    /// [`crate::Client::new`]: at most [`MAX_LABEL_LEN`] bytes, no control characters.
    pub fn with_label(mut self, label: impl Into<String>) -> Holder {
        self.label = Some(label.into());
        self
    }

    /// The host name.
    pub fn host(&self) -> &str {
        &self.host
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The user's label, if any.
    pub fn label(&self) -> Option<&str> {
        self.label.as_deref()
    }

    /// Reads the stored text back; `None` for text fencelock did not write.
    pub fn parse(text: &str) -> Option<Holder> {
        let rest = text.strip_prefix("host=")?;
        let (host, rest) = rest.split_once(" pid=")?;
        let (pid, label) = match rest.split_once(" label=") {
            Some((pid, label)) => (pid, Some(label.to_string())),
            None => (rest, None),
        };
        Some(Holder {
            host: host.to_string(),
            pid: pid.parse().ok()?,
            label,
        })
    }

    /// Why the label cannot be stored, if it cannot.
    pub(crate) fn check(&self) -> Result<(), String> {
        let Some(label) = &self.label else {
            return Ok(());
        };
        if label.len() > MAX_LABEL_LEN {
            return Err(format!(
                "the holder label is {} bytes; at most {MAX_LABEL_LEN} are stored: shorten it",
                label.len()
            ));
        }
        if label.chars().any(char::is_control) {
            return Err(
                "the holder label holds a control character (a newline?); use plain text".into(),
            );
        }
        // The label ends the owner value, and the value `fencelock acquire` prints ends in
        // `.ttl<ms>ms`: a label ending so would be read as that suffix.
        if let Some((_, tail)) = label.rsplit_once(".ttl") {
            if tail
                .strip_suffix("ms")
                .is_some_and(|ms| !ms.is_empty() && ms.bytes().all(|b| b.is_ascii_digit()))
            {
                return Err(format!(
                    "the holder label ends in {:?}, which reads as the TTL suffix of an owner value; end it otherwise",
                    format!(".ttl{tail}")
                ));
            }
        }
        Ok(())
    }
}

impl fmt::Display for Holder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "host={} pid={}", self.host, self.pid)?;
        if let Some(label) = &self.label {
            write!(f, " label={label}")?;
        }
        Ok(())
    }
}

/// The host name, without spaces (`unknown` when the system does not say).
fn host_name() -> String {
    let name = system_host_name()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .or_else(|| std::env::var("COMPUTERNAME").ok())
        .unwrap_or_default();
    let name: String = name
        .trim()
        .chars()
        .filter(|c| !c.is_whitespace() && !c.is_control())
        .collect();
    if name.is_empty() {
        "unknown".to_string()
    } else {
        name
    }
}

#[cfg(unix)]
fn system_host_name() -> Option<String> {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is writable for its whole length, which is what we pass.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return None;
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8(buf[..end].to_vec()).ok()
}

#[cfg(not(unix))]
fn system_host_name() -> Option<String> {
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_text_reads_back() {
        let h = Holder {
            host: "web-3".into(),
            pid: 4121,
            label: None,
        };
        assert_eq!(h.to_string(), "host=web-3 pid=4121");
        assert_eq!(Holder::parse("host=web-3 pid=4121"), Some(h.clone()));
        let l = h.with_label("job pid=7 label=x");
        assert_eq!(Holder::parse(&l.to_string()), Some(l));
        assert_eq!(Holder::parse("a random token"), None);
        assert_eq!(Holder::parse("host=x pid=notanumber"), None);
    }

    #[test]
    fn owner_values_are_told_from_other_programs_values() {
        let token = "0123456789abcdef0123456789abcdef";
        let labelled = owner_value(token, Some(&Holder::this_process().to_string()));
        assert!(is_owner_value(token));
        assert!(is_owner_value(&labelled));
        assert!(!is_owner_value("0123456789ABCDEF0123456789ABCDEF"));
        assert!(!is_owner_value("redsync value"));
        assert!(!is_owner_value(&format!("{token} not a holder")));
        assert!(!is_owner_value(&token[1..]));
    }

    #[test]
    fn a_label_that_ends_like_the_ttl_suffix_is_refused() {
        let h = Holder::this_process();
        assert!(h.clone().with_label("backup.ttl5000ms").check().is_err());
        assert!(h.clone().with_label("backup.ttl").check().is_ok());
        assert!(h.clone().with_label("a.ttl5000ms later").check().is_ok());
        assert!(h.with_label("backup.ttlms").check().is_ok());
    }

    #[test]
    fn an_owner_value_carries_its_holder_after_the_token() {
        let h = Holder::this_process().with_label("nightly report");
        let text = h.to_string();
        let token = "0123456789abcdef0123456789abcdef";
        let value = owner_value(token, Some(&text));
        assert_eq!(value, format!("{token} {text}"));
        assert_eq!(owner_holder(&value), Some(h));
        assert_eq!(owner_value(token, None), token);
        assert_eq!(owner_holder(token), None);
        // Another client's value with a space in it is not a holder.
        assert_eq!(owner_holder("redsync value"), None);
    }

    #[test]
    fn this_process_has_a_host_and_our_pid() {
        let h = Holder::this_process();
        assert!(!h.host().is_empty() && !h.host().contains(' '));
        assert_eq!(h.pid(), std::process::id());
    }

    #[test]
    fn long_or_multiline_labels_are_refused() {
        let h = Holder::this_process();
        assert!(h
            .clone()
            .with_label("x".repeat(MAX_LABEL_LEN))
            .check()
            .is_ok());
        assert!(h
            .clone()
            .with_label("x".repeat(MAX_LABEL_LEN + 1))
            .check()
            .is_err());
        assert!(h.with_label("a\nb").check().is_err());
    }
}
