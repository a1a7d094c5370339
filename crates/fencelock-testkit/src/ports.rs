//! Free loopback ports for the servers the kit starts.

use std::collections::HashSet;
use std::io;
use std::net::{Ipv4Addr, TcpListener};
use std::sync::{Mutex, OnceLock};

/// Ports this process has already handed out. Never released: the kernel's
/// ephemeral range is large, and a port given to one server (which may be
/// restarted on it later) must never be handed to another server of this
/// process.
fn handed_out() -> &'static Mutex<HashSet<u16>> {
    static PORTS: OnceLock<Mutex<HashSet<u16>>> = OnceLock::new();
    PORTS.get_or_init(|| Mutex::new(HashSet::new()))
}

/// A loopback TCP port that was free a moment ago and that no other caller in
/// this process has received.
///
/// Another process can still take it before the server binds it, so callers
/// retry their start on "address in use".
pub(crate) fn free_port() -> io::Result<u16> {
    for _ in 0..64 {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
        let port = listener.local_addr()?.port();
        drop(listener);
        let mut ports = handed_out().lock().unwrap_or_else(|e| e.into_inner());
        if ports.insert(port) {
            return Ok(port);
        }
    }
    Err(io::Error::new(
        io::ErrorKind::AddrNotAvailable,
        "could not find a free loopback port after 64 tries",
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_are_never_handed_out_twice() {
        let mut seen = HashSet::new();
        for _ in 0..200 {
            assert!(seen.insert(free_port().unwrap()));
        }
    }
}
