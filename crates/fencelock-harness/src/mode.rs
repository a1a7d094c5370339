//! The lock modes a run compares and the fault kinds the nemesis injects.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// How the clients take the lock and write the protected record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// One Redis node, no fencing: an efficiency lock.
    Single,
    /// Redlock on 5 nodes, no fencing, no restart quarantine.
    Redlock,
    /// Redlock on 5 nodes with fencing tokens checked by the storage.
    RedlockFenced,
    /// Redlock on 5 nodes with fencing tokens and restart quarantine.
    RedlockQuarantine,
}

impl Mode {
    /// Every mode, in the order the report lists them.
    pub const ALL: [Mode; 4] = [
        Mode::Single,
        Mode::Redlock,
        Mode::RedlockFenced,
        Mode::RedlockQuarantine,
    ];

    /// How many Redis nodes the mode runs.
    pub fn nodes(self) -> usize {
        match self {
            Mode::Single => 1,
            _ => 5,
        }
    }

    /// Whether locks carry fencing tokens that the storage checks.
    pub fn fencing(self) -> bool {
        matches!(self, Mode::RedlockFenced | Mode::RedlockQuarantine)
    }

    /// Whether restart quarantine is on.
    pub fn quarantine(self) -> bool {
        matches!(self, Mode::RedlockQuarantine)
    }

    /// The name used on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Single => "single",
            Mode::Redlock => "redlock",
            Mode::RedlockFenced => "redlock-fenced",
            Mode::RedlockQuarantine => "redlock-quarantine",
        }
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Mode {
    type Err = String;

    fn from_str(s: &str) -> Result<Mode, String> {
        Mode::ALL
            .into_iter()
            .find(|m| m.name() == s)
            .ok_or_else(|| {
                format!(
                    "unknown mode {s:?}; use single, redlock, redlock-fenced or redlock-quarantine"
                )
            })
    }
}

/// A kind of fault the nemesis injects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FaultKind {
    /// kill -9 of a minority of nodes, restarted (empty unless AOF) after more than a TTL.
    Kill,
    /// While a client holds the lock, kill -9 one of its nodes and restart it at once without
    /// persistence (its keys are gone), then let the rest of the cluster reach it.
    RestartNopersist,
    /// The same with a node that persists with `appendfsync always`.
    RestartPersist,
    /// SIGSTOP of a minority of nodes, then SIGCONT.
    PauseNode,
    /// SIGSTOP of a client process for longer than the TTL (often right after its reads).
    PauseClient,
    /// While a client holds the lock, one of its nodes' clocks jumps forward past the TTL.
    ClockForward,
    /// A node's clock jumps backward.
    ClockBackward,
    /// Added delay on a minority of nodes' connections.
    Latency,
}

impl FaultKind {
    /// Every fault kind: the full mix.
    pub const ALL: [FaultKind; 8] = [
        FaultKind::Kill,
        FaultKind::RestartNopersist,
        FaultKind::RestartPersist,
        FaultKind::PauseNode,
        FaultKind::PauseClient,
        FaultKind::ClockForward,
        FaultKind::ClockBackward,
        FaultKind::Latency,
    ];

    /// The name used on the command line.
    pub fn name(self) -> &'static str {
        match self {
            FaultKind::Kill => "kill",
            FaultKind::RestartNopersist => "restart-nopersist",
            FaultKind::RestartPersist => "restart-persist",
            FaultKind::PauseNode => "pause-node",
            FaultKind::PauseClient => "pause-client",
            FaultKind::ClockForward => "clock-forward",
            FaultKind::ClockBackward => "clock-backward",
            FaultKind::Latency => "latency",
        }
    }
}

impl fmt::Display for FaultKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for FaultKind {
    type Err = String;

    fn from_str(s: &str) -> Result<FaultKind, String> {
        FaultKind::ALL
            .into_iter()
            .find(|k| k.name() == s)
            .ok_or_else(|| {
                let all: Vec<&str> = FaultKind::ALL.iter().map(|k| k.name()).collect();
                format!("unknown fault {s:?}; use any of {}", all.join(","))
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for m in Mode::ALL {
            assert_eq!(m.name().parse::<Mode>().unwrap(), m);
        }
        for k in FaultKind::ALL {
            assert_eq!(k.name().parse::<FaultKind>().unwrap(), k);
        }
        assert!("nope".parse::<Mode>().is_err());
    }
}
