//! Compile-time checks: handles can be shared with the threads of a test
//! (a fault thread pausing a node while clients run).

use fencelock_testkit::{
    ClockOffset, Etcd, EtcdCluster, EtcdMember, Persistence, Postgres, RedisNode, RedisNodes,
    RedisOptions,
};

fn send_sync<T: Send + Sync>() {}

#[test]
fn handles_are_send_and_sync() {
    send_sync::<RedisNode>();
    send_sync::<RedisNodes>();
    send_sync::<fencelock_testkit::MariaDb>();
    send_sync::<RedisOptions>();
    send_sync::<Persistence>();
    send_sync::<Postgres>();
    send_sync::<Etcd>();
    send_sync::<EtcdCluster>();
    send_sync::<EtcdMember>();
    send_sync::<ClockOffset>();
}
