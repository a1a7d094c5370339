//! A set of independent redis-server nodes, as Redlock uses them.

use std::io;
use std::ops::Index;
use std::slice;
use std::thread;

use crate::{RedisNode, RedisOptions};

/// `N` independent [`RedisNode`]s (not replicas of each other), started in
/// parallel.
///
/// Dropping the set drops every node, killing and reaping each process.
#[derive(Debug)]
pub struct RedisNodes {
    nodes: Vec<RedisNode>,
}

impl RedisNodes {
    /// Starts `n` nodes with [`RedisOptions::default`].
    ///
    /// # Errors
    ///
    /// Fails when any node fails to start (the others are stopped again).
    pub fn start(n: usize) -> io::Result<RedisNodes> {
        RedisNodes::start_with(n, RedisOptions::default())
    }

    /// Starts `n` nodes, each with a copy of `options`, one thread per
    /// node.
    ///
    /// # Errors
    ///
    /// Fails when any node fails to start (the others are stopped again).
    pub fn start_with(n: usize, options: RedisOptions) -> io::Result<RedisNodes> {
        let results: Vec<io::Result<RedisNode>> = thread::scope(|scope| {
            let handles: Vec<_> = (0..n)
                .map(|_| {
                    let options = options.clone();
                    scope.spawn(move || RedisNode::start_with(options))
                })
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join().unwrap_or_else(|_| {
                        Err(io::Error::other("thread starting a redis node panicked"))
                    })
                })
                .collect()
        });
        let nodes = results.into_iter().collect::<io::Result<Vec<_>>>()?;
        Ok(RedisNodes { nodes })
    }

    /// The nodes, in order, owned by the caller from now on.
    pub(crate) fn into_nodes(self) -> Vec<RedisNode> {
        self.nodes
    }

    /// `redis://127.0.0.1:<port>/0` of every node, in order.
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(RedisNode::url).collect()
    }

    /// The ports of every node, in order.
    pub fn ports(&self) -> Vec<u16> {
        self.nodes.iter().map(RedisNode::port).collect()
    }

    /// Node `i`.
    ///
    /// # Panics
    ///
    /// Panics when `i >= len()`, like slice indexing.
    pub fn node(&self, i: usize) -> &RedisNode {
        &self.nodes[i]
    }

    /// Node `i`, mutably. Rarely needed: every control method of
    /// [`RedisNode`] takes `&self`.
    ///
    /// # Panics
    ///
    /// Panics when `i >= len()`, like slice indexing.
    pub fn node_mut(&mut self, i: usize) -> &mut RedisNode {
        &mut self.nodes[i]
    }

    /// Number of nodes.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether the set has no nodes.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// Iterates over the nodes in order.
    pub fn iter(&self) -> slice::Iter<'_, RedisNode> {
        self.nodes.iter()
    }
}

impl Index<usize> for RedisNodes {
    type Output = RedisNode;

    fn index(&self, i: usize) -> &RedisNode {
        &self.nodes[i]
    }
}

impl<'a> IntoIterator for &'a RedisNodes {
    type Item = &'a RedisNode;
    type IntoIter = slice::Iter<'a, RedisNode>;

    fn into_iter(self) -> Self::IntoIter {
        self.nodes.iter()
    }
}
