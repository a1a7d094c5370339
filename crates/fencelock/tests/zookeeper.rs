//! The ZooKeeper backend against real ZooKeeper servers.
#![cfg(feature = "zookeeper")]
