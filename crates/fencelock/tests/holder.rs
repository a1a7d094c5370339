//! Who holds what: the holder label a client stores with its locks, on real nodes. On Redis it
//! rides in the lock key's value after the token (`<token> host=.. pid=..[ label=..]`, issue
//! 33), so it lives, is extended and goes with the lock and costs no command of its own; no side
//! key is written (older versions wrote `fencelock:holder:<resource>`). On etcd it is the value
//! of the lock's key.

use std::time::Duration;

use fencelock::protocol::{holder_key, owner_holder};
use fencelock::{Client, Config, Holder, RetryPolicy};
use fencelock_testkit::{RedisNode, RedisNodes};

const TTL: Duration = Duration::from_secs(10);

fn labelled(urls: Vec<String>) -> (Config, Holder) {
    let holder = Holder::this_process().with_label("holder test");
    let config = Config::new(urls)
        .with_ttl(TTL)
        .with_node_timeout(Duration::from_millis(500))
        .with_quarantine(false)
        .with_holder(holder.clone());
    (config, holder)
}

fn get(node: &RedisNode, key: &str) -> String {
    node.cli(&["GET", key]).unwrap().trim().to_string()
}

fn pttl(node: &RedisNode, key: &str) -> i64 {
    node.cli(&["PTTL", key]).unwrap().trim().parse().unwrap()
}

/// On every node: the lock key holds the owner value, which carries the holder, and no side key
/// is left beside it.
async fn assert_held_with_label(
    nodes: &[&RedisNode],
    resource: &str,
    owner: &str,
    holder: &Holder,
) {
    // A grant returns at a quorum: the last node's request may still be on its way.
    tokio::time::sleep(Duration::from_millis(100)).await;
    for node in nodes {
        let value = get(node, resource);
        assert_eq!(value, owner, "the lock key keeps the owner value");
        assert_eq!(owner_holder(&value).as_ref(), Some(holder), "{value}");
        assert_eq!(pttl(node, &holder_key(resource)), -2, "no side key");
    }
}

#[tokio::test]
async fn the_label_rides_in_the_lock_value_and_goes_with_it() {
    let nodes = RedisNodes::start(3).unwrap();
    let all: Vec<&RedisNode> = nodes.iter().collect();
    let (config, holder) = labelled(nodes.urls());
    for fencing in [false, true] {
        let client = Client::new(config.clone().with_fencing(fencing)).unwrap();
        let resource = format!("holder:one:{fencing}");
        let mut lock = client.try_acquire(&resource).await.unwrap();
        assert_held_with_label(&all, &resource, lock.owner(), &holder).await;
        // Let the TTL run down a little, then extend: the label comes back up with the lock.
        tokio::time::sleep(Duration::from_millis(1200)).await;
        lock.extend().await.unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(pttl(all[0], &resource) > 9_000);
        assert_held_with_label(&all, &resource, lock.owner(), &holder).await;
        lock.release().await.unwrap();
        client.close().await;
        for node in &all {
            assert_eq!(pttl(node, &resource), -2, "the label went with the lock");
        }
    }
    // Several resources at once: one side key each.
    let client = Client::new(config.clone()).unwrap();
    let lock = client
        .try_acquire_many(&["holder:a", "holder:b"])
        .await
        .unwrap();
    for r in ["holder:a", "holder:b"] {
        assert_held_with_label(&all, r, lock.owner(), &holder).await;
    }
    lock.release().await.unwrap();
    client.close().await;
    // A lock taken in line (the queued script) after waiting for another holder, plain and
    // fenced (the fenced call carries the proposed token before the label).
    for fencing in [false, true] {
        let config = config.clone().with_fencing(fencing);
        let resource = format!("holder:line:{fencing}");
        let other = Client::new(config.clone()).unwrap();
        let first = other.try_acquire(&resource).await.unwrap();
        let retry = RetryPolicy::new().with_wait(Duration::from_secs(10));
        let waiter = Client::new(config.with_retry(retry)).unwrap();
        let name = resource.clone();
        let wait = tokio::spawn(async move {
            let lock = waiter.acquire(&name).await.unwrap();
            (waiter, lock)
        });
        tokio::time::sleep(Duration::from_millis(200)).await;
        first.release().await.unwrap();
        let (waiter, lock) = wait.await.unwrap();
        assert_held_with_label(&all, &resource, lock.owner(), &holder).await;
        lock.release().await.unwrap();
        waiter.close().await;
        other.close().await;
    }
}

#[tokio::test]
async fn one_node_stores_the_label_and_a_client_without_one_stores_nothing() {
    let node = RedisNode::start().unwrap();
    let (config, holder) = labelled(vec![node.url()]);
    let client = Client::new(config).unwrap();
    let lock = client.try_acquire("holder:single").await.unwrap();
    assert_held_with_label(&[&node], "holder:single", lock.owner(), &holder).await;
    lock.release().await.unwrap();

    let plain = Client::new(Config::new([node.url()]).with_quarantine(false)).unwrap();
    let lock = plain.try_acquire("holder:none").await.unwrap();
    assert_eq!(pttl(&node, &holder_key("holder:none")), -2);
    let value = get(&node, "holder:none");
    assert_eq!(value, lock.owner());
    assert_eq!(owner_holder(&value), None, "the bare token: {value}");
    lock.release().await.unwrap();
}

#[test]
fn a_label_that_cannot_be_stored_is_refused_before_any_io() {
    let holder = Holder::this_process().with_label("line one\nline two");
    let err = Client::new(Config::new(["redis://127.0.0.1:1"]).with_holder(holder)).unwrap_err();
    assert!(err.to_string().contains("holder"), "{err}");
}

#[cfg(feature = "etcd")]
#[tokio::test]
async fn on_etcd_the_label_is_the_value_of_the_lock_key() {
    let etcd = fencelock_testkit::Etcd::start().unwrap();
    let url = etcd.endpoint().replacen("http://", "etcd://", 1);
    let holder = Holder::this_process().with_label("etcd holder");
    let client = Client::new(Config::new([url]).with_holder(holder.clone())).unwrap();
    let lock = client.try_acquire("holder:etcd").await.unwrap();
    let mut raw = etcd_client::Client::connect([etcd.endpoint()], None)
        .await
        .unwrap();
    let resp = raw
        .get(
            "fencelock/holder:etcd/",
            Some(etcd_client::GetOptions::new().with_prefix()),
        )
        .await
        .unwrap();
    let kv = &resp.kvs()[0];
    assert_eq!(kv.key_str().unwrap(), lock.owner());
    assert_eq!(Holder::parse(kv.value_str().unwrap()), Some(holder));
    lock.release().await.unwrap();
}
