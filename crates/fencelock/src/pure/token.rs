//! The random value that identifies a lock's owner.

use std::fmt;

/// The random value stored in the lock key: 128 bits from the operating system's RNG, as 32
/// lowercase hex digits, followed by the holder's text when the client has one
/// ([`OwnerToken::carrying`]). Only the owner knows it, so only the owner can release or extend.
#[derive(Clone, PartialEq, Eq, Hash)]
pub(crate) struct OwnerToken(String);

impl OwnerToken {
    /// Draws a fresh token from the OS RNG.
    ///
    /// # Errors
    ///
    /// Fails only if the OS RNG fails, which it does not on any supported system; the message
    /// says so.
    pub(crate) fn generate() -> Result<OwnerToken, getrandom::Error> {
        let mut bytes = [0u8; 16];
        getrandom::fill(&mut bytes)?;
        Ok(OwnerToken(hex(&bytes)))
    }

    /// The owner value of a labelled client: this token, a space and the holder's text
    /// (`holder.rs`); the bare token without a holder.
    pub(crate) fn carrying(self, holder: Option<&str>) -> OwnerToken {
        match holder {
            Some(holder) => OwnerToken(crate::holder::owner_value(&self.0, Some(holder))),
            None => self,
        }
    }

    #[cfg(test)]
    pub(crate) fn from_string(s: String) -> OwnerToken {
        OwnerToken(s)
    }

    pub(crate) fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for OwnerToken {
    // The token is a capability (whoever knows it can release the lock); print only a prefix.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let shown: String = self.0.chars().take(8).collect();
        write!(f, "OwnerToken({shown}…)")
    }
}

fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(DIGITS[usize::from(b >> 4)] as char);
        s.push(DIGITS[usize::from(b & 0xf)] as char);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn tokens_are_128_bit_hex_and_distinct() {
        let mut seen = HashSet::new();
        for _ in 0..1000 {
            let t = OwnerToken::generate().unwrap();
            assert_eq!(t.as_str().len(), 32);
            assert!(t.as_str().bytes().all(|b| b.is_ascii_hexdigit()));
            assert!(seen.insert(t));
        }
    }

    #[test]
    fn debug_hides_most_of_the_token() {
        let t = OwnerToken::from_string("0123456789abcdef0123456789abcdef".into());
        assert_eq!(format!("{t:?}"), "OwnerToken(01234567…)");
    }

    #[test]
    fn hex_encodes_bytes() {
        assert_eq!(hex(&[0x00, 0xff, 0x1a]), "00ff1a");
    }
}
