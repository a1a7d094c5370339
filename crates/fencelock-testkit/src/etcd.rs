//! A single-member etcd server.

use std::io;

use crate::{EtcdCluster, EtcdMember};

/// One `etcd` process forming a one-member cluster on loopback ports.
///
/// A thin wrapper over an [`EtcdCluster`] of one member; dropping it kills
/// and reaps the process and removes its data directory.
#[derive(Debug)]
pub struct Etcd {
    cluster: EtcdCluster,
}

impl Etcd {
    /// Starts the server and waits until it is healthy.
    ///
    /// # Errors
    ///
    /// Fails when `etcd` is not installed or it is not healthy within 30 s.
    pub fn start() -> io::Result<Etcd> {
        Ok(Etcd {
            cluster: EtcdCluster::start(1)?,
        })
    }

    /// `http://127.0.0.1:<client port>`.
    pub fn endpoint(&self) -> String {
        self.member().endpoint()
    }

    /// [`endpoint`](Self::endpoint) as a one-element list, the shape etcd
    /// clients take.
    pub fn endpoints(&self) -> Vec<String> {
        self.cluster.endpoints()
    }

    /// The client port.
    pub fn port(&self) -> u16 {
        self.member().client_port()
    }

    /// The only member, for everything not repeated here.
    pub fn member(&self) -> &EtcdMember {
        self.cluster.member(0)
    }

    /// The underlying one-member cluster.
    pub fn cluster(&self) -> &EtcdCluster {
        &self.cluster
    }

    /// The pid while a process exists.
    pub fn pid(&self) -> Option<u32> {
        self.member().pid()
    }

    /// Whether a process exists (a paused one counts).
    pub fn is_running(&self) -> bool {
        self.member().is_running()
    }

    /// See [`EtcdMember::stop`].
    ///
    /// # Errors
    ///
    /// As [`EtcdMember::stop`].
    pub fn stop(&self) -> io::Result<()> {
        self.member().stop()
    }

    /// See [`EtcdMember::kill`].
    ///
    /// # Errors
    ///
    /// As [`EtcdMember::kill`].
    pub fn kill(&self) -> io::Result<()> {
        self.member().kill()
    }

    /// See [`EtcdMember::restart`]; data survives.
    ///
    /// # Errors
    ///
    /// As [`EtcdMember::restart`].
    pub fn restart(&self) -> io::Result<()> {
        self.member().restart()
    }

    /// See [`EtcdMember::pause`].
    ///
    /// # Errors
    ///
    /// As [`EtcdMember::pause`].
    pub fn pause(&self) -> io::Result<()> {
        self.member().pause()
    }

    /// See [`EtcdMember::resume`].
    ///
    /// # Errors
    ///
    /// As [`EtcdMember::resume`].
    pub fn resume(&self) -> io::Result<()> {
        self.member().resume()
    }

    /// The server's log so far.
    pub fn log(&self) -> String {
        self.member().log()
    }
}
