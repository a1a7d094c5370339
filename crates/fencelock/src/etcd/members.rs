//! The members of one etcd cluster, each reached through its own client, and the one that
//! requests go to.
//!
//! A single client balanced over all members keeps routing part of the requests to a member
//! that is down or stopped (etcd-client's balanced channel has no health check). Here, requests
//! go to one member, the current one; a request that member fails (a transport error, a
//! timeout, etcd's "no leader") moves the cluster on to the next member, so the next request
//! (and the retry of an acquisition's policy) goes elsewhere. A request is never re-sent inside
//! one call: a lease grant or a create transaction whose answer was lost may have been applied.

use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use etcd_client::{Client as EtcdClient, ConnectOptions};
use tokio::sync::OnceCell;

use super::endpoints::Endpoints;
use super::{describe, Fail};
use crate::pure::vote::VoteOutcome;
use crate::telemetry;

/// A client of one member: the member's index with it, so that its failure moves the cluster
/// on from that member (and not from one another request already moved to).
#[derive(Clone)]
pub(crate) struct Member {
    pub(super) index: usize,
    client: EtcdClient,
}

impl std::ops::Deref for Member {
    type Target = EtcdClient;

    fn deref(&self) -> &EtcdClient {
        &self.client
    }
}

/// The clients of the members (each connected on first use) and the current member.
pub(crate) struct Members {
    endpoints: Endpoints,
    /// The redacted URL of each member, for the warnings.
    names: Vec<String>,
    /// The redacted member list: the cluster's name in votes and warnings.
    label: String,
    clients: Vec<OnceCell<EtcdClient>>,
    current: AtomicUsize,
    /// Member failures since the last answer: one per member in a row is the cluster not
    /// answering.
    failing: AtomicUsize,
    connect_timeout: std::time::Duration,
    /// The longest wait for a connection.
    connect_limit: std::time::Duration,
    pub(super) tls: Option<crate::tls::TlsMaterial>,
    /// Whether the cluster answers, for the warning when it stops (`telemetry.rs`).
    health: telemetry::NodeHealth,
    /// Lease revokes handed to background tasks (calls cut short) and not finished: what
    /// `Client::close` and the drop of the last handle wait for, as for Redis's releases.
    revokes: tokio::sync::watch::Sender<usize>,
}

impl fmt::Debug for Members {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let connected: Vec<bool> = self.clients.iter().map(OnceCell::initialized).collect();
        f.debug_struct("Members")
            .field("members", &self.names)
            .field("current", &self.current.load(Ordering::Relaxed))
            .field("connected", &connected)
            .finish_non_exhaustive()
    }
}

impl Members {
    pub(super) fn new(
        endpoints: Endpoints,
        names: Vec<String>,
        connect_timeout: std::time::Duration,
        connect_limit: std::time::Duration,
        tls: Option<crate::tls::TlsMaterial>,
    ) -> Members {
        Members {
            clients: names.iter().map(|_| OnceCell::new()).collect(),
            label: names.join(","),
            names,
            endpoints,
            current: AtomicUsize::new(0),
            failing: AtomicUsize::new(0),
            connect_timeout,
            connect_limit,
            tls,
            health: telemetry::NodeHealth::new(1, 1, true),
            revokes: tokio::sync::watch::Sender::new(0),
        }
    }

    /// Revokes `lease` from a task spawned on `runtime`, through `client`, within `timeout`,
    /// counted until the task ends (or is dropped with its runtime).
    pub(super) fn revoke_in_background(
        self: &Arc<Members>,
        runtime: &tokio::runtime::Handle,
        client: EtcdClient,
        lease: i64,
        timeout: std::time::Duration,
    ) {
        struct Counted(Arc<Members>);
        impl Drop for Counted {
            fn drop(&mut self) {
                self.0.revokes.send_modify(|n| *n = n.saturating_sub(1));
            }
        }
        self.revokes.send_modify(|n| *n += 1);
        let counted = Counted(Arc::clone(self));
        runtime.spawn(async move {
            let _counted = counted;
            let _ = tokio::time::timeout(timeout, client.lease_client().revoke(lease)).await;
        });
    }

    /// Background revokes not finished.
    pub(super) fn background_revokes(&self) -> usize {
        *self.revokes.borrow()
    }

    /// Waits at most `bound` for the background revokes; whether none is left.
    pub(super) async fn settle_revokes(&self, bound: std::time::Duration) -> bool {
        let mut pending = self.revokes.subscribe();
        let settled = tokio::time::timeout(bound, pending.wait_for(|n| *n == 0))
            .await
            .is_ok();
        settled
    }

    /// The redacted member list.
    pub(super) fn label(&self) -> &str {
        &self.label
    }

    /// The client of the current member, connecting on first use. A failed connection moves
    /// the cluster on to the next member.
    pub(super) async fn current(&self) -> Result<Member, Fail> {
        let index = self.current.load(Ordering::Relaxed);
        match self.connect(index).await {
            Ok(client) => Ok(Member { index, client }),
            Err(fail) => {
                self.observe(index, false, &fail.outcome);
                Err(fail)
            }
        }
    }

    async fn connect(&self, index: usize) -> Result<EtcdClient, Fail> {
        let client = self.clients[index]
            .get_or_try_init(|| async {
                let mut options = ConnectOptions::new()
                    .with_connect_timeout(self.connect_timeout)
                    .with_require_leader(true);
                if let Some(c) = &self.endpoints.credentials {
                    options = options
                        .with_user(c.user.clone(), c.password.clone())
                        .with_auto_token_refresh(true);
                }
                #[cfg(feature = "tls")]
                if let Some(tls) = &self.tls {
                    options = options.with_tls(super::tls::options(tls));
                }
                let url = [self.endpoints.urls[index].as_str()];
                let connect = EtcdClient::connect(url, Some(options));
                match tokio::time::timeout(self.connect_limit, connect).await {
                    Ok(Ok(client)) => Ok(client),
                    Ok(Err(e)) => Err(Fail::failed(format!("connect: {}", describe(&e)))),
                    Err(_) => Err(Fail {
                        outcome: VoteOutcome::TimedOut,
                        lease_gone: false,
                    }),
                }
            })
            .await?;
        Ok(client.clone())
    }

    /// Member `index` answered (`true`: the cluster answers) or not (`false`, with `why`: the
    /// cluster moves on to the next member, with one warning naming both; once every member
    /// failed in a row, the warning that the cluster stopped answering).
    pub(super) fn observe(&self, index: usize, answered: bool, why: &dyn fmt::Display) {
        if answered {
            self.failing.store(0, Ordering::Relaxed);
            self.health.observe(0, &self.label, Some(true), &"");
            return;
        }
        let n = self.names.len();
        let next = (index + 1) % n;
        let moved = n > 1
            && self
                .current
                .compare_exchange(index, next, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok();
        // Failures on a member another request already moved away from count once.
        let failing = if moved || n == 1 {
            self.failing.fetch_add(1, Ordering::Relaxed) + 1
        } else {
            self.failing.load(Ordering::Relaxed)
        };
        if failing >= n {
            self.health.observe(0, &self.label, Some(false), why);
        } else if moved {
            tracing::warn!(
                node = %self.names[index],
                next = %self.names[next],
                "etcd member {} did not answer ({why}); using {} (cluster {}): restart or replace the member if it stays down",
                self.names[index],
                self.names[next],
                self.label
            );
        }
    }

    /// A connected client for a background revoke: the current member's, else any member's.
    pub(super) fn any_connected(&self) -> Option<EtcdClient> {
        let current = self.current.load(Ordering::Relaxed);
        self.clients[current]
            .get()
            .or_else(|| self.clients.iter().find_map(OnceCell::get))
            .cloned()
    }
}
