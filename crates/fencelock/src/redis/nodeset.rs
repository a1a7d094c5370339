//! The node set's record on the nodes, read and written when a connection is set up (the rule
//! and its argument are in `pure/nodeset.rs`). One `NodeSet` per client, shared by its nodes'
//! connections.
//!
//! The first connection attempts of a client wait for each other, for at most half the node
//! timeout (and the connect timeout): no node is handed to a round before the records of every
//! node that answered by then were compared, so a client whose list overlaps another's counts
//! nothing, instead of counting its own nodes before a shared one answers. The bound keeps the
//! first round of a client with a hung node within its node timeout; a shared node slower than
//! that is compared when it answers, which is the limit of a node not reached at connect time.

use std::sync::Mutex;
use std::time::Duration;

use super::tagged::NodeConnection;
use redis::RedisError;

use crate::pure::nodeset::{self, Member, RECORD_KEY};

/// What a client knows of its node set and of the records on its nodes.
#[derive(Debug)]
pub(crate) struct NodeSet {
    enabled: bool,
    /// How long the first connections wait for each other.
    wait: Duration,
    state: Mutex<State>,
    settled: tokio::sync::watch::Sender<bool>,
}

#[derive(Debug)]
struct State {
    /// Each node: its host:port, and its identity once connected.
    own: Vec<Member>,
    /// Each node's record, as last read.
    records: Vec<Option<Vec<Member>>>,
    /// Whether each node's first connection attempt has finished.
    done: Vec<bool>,
    settled: bool,
    /// The configuration error found, once found: every connection set up later fails with it.
    conflict: Option<String>,
}

impl NodeSet {
    /// The set of the nodes at `addrs` (host:port), in the client's order. With `enabled` false
    /// nothing is read, written or awaited (`Config::with_node_set_check`).
    pub(crate) fn new(addrs: Vec<String>, enabled: bool, wait: Duration) -> NodeSet {
        let n = addrs.len();
        NodeSet {
            enabled,
            wait,
            state: Mutex::new(State {
                own: addrs
                    .into_iter()
                    .map(|addr| Member { id: None, addr })
                    .collect(),
                records: vec![None; n],
                done: vec![false; n],
                settled: false,
                conflict: None,
            }),
            settled: tokio::sync::watch::Sender::new(false),
        }
    }

    /// A connection attempt to node `i` failed before its record was read: the other nodes'
    /// first connections need not wait for it.
    pub(crate) fn failed(&self, i: usize) {
        if self.enabled {
            let mut state = self.state.lock().expect("node set mutex poisoned");
            state.done[i] = true;
            self.settle_if_all_done(&mut state);
        }
    }

    /// Reads node `i`'s record on its new connection, writing ours where it has none.
    /// `marker` is the node's marker after the set-up (its identity).
    ///
    /// # Errors
    ///
    /// The node's error.
    pub(crate) async fn read(
        &self,
        i: usize,
        conn: &mut NodeConnection,
        marker: Option<&str>,
    ) -> Result<(), RedisError> {
        if !self.enabled {
            return Ok(());
        }
        let id = marker.and_then(nodeset::identity).map(str::to_owned);
        let found: Option<String> = redis::cmd("GET").arg(RECORD_KEY).query_async(conn).await?;
        let text = match found {
            Some(text) => text,
            None => {
                // A new node, or one that lost its data: it gets this client's view, unless
                // another client's came first (then that one is read back and compared).
                let mine = {
                    let mut state = self.state.lock().expect("node set mutex poisoned");
                    state.own[i].id.clone_from(&id);
                    nodeset::encode(&state.own)
                };
                let (text,): (Option<String>,) = redis::pipe()
                    .cmd("SET")
                    .arg(RECORD_KEY)
                    .arg(&mine)
                    .arg("NX")
                    .ignore()
                    .cmd("GET")
                    .arg(RECORD_KEY)
                    .query_async(conn)
                    .await?;
                text.unwrap_or(mine)
            }
        };
        // A text that is not a record counts as another set (of no nodes).
        let record = nodeset::decode(&text).unwrap_or_default();
        {
            let mut state = self.state.lock().expect("node set mutex poisoned");
            state.own[i].id = id;
            state.records[i] = Some(record);
            state.done[i] = true;
            if state.settled {
                // A node that answers after the set was settled is compared on its own.
                if state.conflict.is_none() {
                    state.conflict = compare(&state).err();
                }
            } else {
                self.settle_if_all_done(&mut state);
            }
        }
        Ok(())
    }

    /// Whether a new connection (its record read) may be used: not before every node's first
    /// attempt finished or the wait passed, and never once a record describes another set.
    ///
    /// # Errors
    ///
    /// The configuration error ([`nodeset::CONFLICT`]) naming both sets.
    pub(crate) async fn admit(&self) -> Result<(), RedisError> {
        if !self.enabled {
            return Ok(());
        }
        let mut settled = self.settled.subscribe();
        let timed_out = tokio::time::timeout(self.wait, settled.wait_for(|s| *s))
            .await
            .is_err();
        if timed_out {
            // A node that has not answered by then is compared when it does.
            let mut state = self.state.lock().expect("node set mutex poisoned");
            self.settle(&mut state);
        }
        let state = self.state.lock().expect("node set mutex poisoned");
        match &state.conflict {
            None => Ok(()),
            Some(why) => Err(RedisError::from((
                redis::ErrorKind::Client,
                nodeset::CONFLICT,
                why.clone(),
            ))),
        }
    }

    fn settle_if_all_done(&self, state: &mut State) {
        if !state.settled && state.done.iter().all(|d| *d) {
            self.settle(state);
        }
    }

    fn settle(&self, state: &mut State) {
        if state.settled {
            return;
        }
        state.conflict = compare(state).err();
        state.settled = true;
        self.settled.send_replace(true);
    }
}

/// Every record read so far against the client's own set.
fn compare(state: &State) -> Result<(), String> {
    let records: Vec<(String, Vec<Member>)> = state
        .own
        .iter()
        .zip(&state.records)
        .filter_map(|(node, record)| Some((node.addr.clone(), record.clone()?)))
        .collect();
    nodeset::check(&state.own, &records)
}
