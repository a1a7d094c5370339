//! A node that refuses us says why, in words a person can act on: a wrong or missing password,
//! an ACL user without permissions, a replica, a node out of memory. Each case is provoked on a
//! real redis-server; passwords never appear in a message.

use std::time::{Duration, Instant};

use fencelock::{Client, Config, Error, ErrorKind, FailureCause, RetryPolicy, VoteOutcome};
use fencelock_testkit::{RedisNode, RedisNodes, RedisOptions};

/// Loose enough for a loaded 2-core machine: these tests are not about slowness.
const NODE_TIMEOUT: Duration = Duration::from_millis(500);
const PASSWORD: &str = "s3cret-pw-4711";
const WRONG: &str = "wrong-pw-0815";

fn client(urls: Vec<String>) -> Client {
    Client::new(
        Config::new(urls)
            .with_quarantine(false)
            .with_node_timeout(NODE_TIMEOUT),
    )
    .unwrap()
}

fn url(node: &RedisNode, auth: &str) -> String {
    format!("redis://{auth}127.0.0.1:{}/0", node.port())
}

/// Makes `node` require [`PASSWORD`] (set after the start: the testkit's readiness check
/// speaks no AUTH).
fn require_password(node: &RedisNode) {
    node.cli(&["CONFIG", "SET", "requirepass", PASSWORD])
        .unwrap();
}

/// The causes of the failed votes of an error.
fn causes(err: &Error) -> Vec<FailureCause> {
    err.votes()
        .unwrap()
        .iter()
        .filter_map(|v| match &v.outcome {
            VoteOutcome::Failed(e) => Some(e.cause()),
            _ => None,
        })
        .collect()
}

/// Acquires with a long wait: a refusal that no retry can fix must come back at once.
async fn refused_at_once(client: &Client) -> Error {
    let started = Instant::now();
    let err = client
        .acquire_with(
            "job",
            &RetryPolicy::new().with_wait(Duration::from_secs(60)),
        )
        .await
        .unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "retried a refusal for {:?}: {err}",
        started.elapsed()
    );
    err
}

#[tokio::test]
async fn a_wrong_or_missing_password_is_named_and_not_retried() {
    let node = RedisNode::start().unwrap();
    require_password(&node);
    for (auth, shown) in [
        ("", String::new()),
        (&*format!(":{WRONG}@"), ":***@".to_owned()),
    ] {
        let err = refused_at_once(&client(vec![url(&node, auth)])).await;
        let text = err.to_string();
        assert_eq!(err.kind(), ErrorKind::Unavailable, "{text}");
        assert_eq!(causes(&err), [FailureCause::Auth], "{text}");
        assert!(err.needs_config_change() && !err.is_retryable(), "{text}");
        let expected = format!(
            "authentication failed (wrong or missing password) on redis://{shown}127.0.0.1:{}/0; put the node's password in its URL",
            node.port()
        );
        assert!(text.contains(&expected), "{text}");
        assert!(!text.contains("reachable"), "{text}");
        assert!(!text.contains(WRONG) && !text.contains(PASSWORD), "{text}");
    }
    // The same node with the right password: the failures above were the password's.
    let lock = client(vec![url(&node, &format!(":{PASSWORD}@"))])
        .try_acquire("job")
        .await
        .unwrap();
    lock.release().await.unwrap();
}

#[tokio::test]
async fn the_same_failure_on_every_node_is_said_once() {
    let nodes = RedisNodes::start(3).unwrap();
    nodes.iter().for_each(require_password);
    let err = refused_at_once(&client(nodes.urls())).await;
    let text = err.to_string();
    assert!(
        text.contains("authentication failed (wrong or missing password) on all 3 nodes; "),
        "{text}"
    );
    assert_eq!(text.matches("authentication failed").count(), 1, "{text}");
}

#[tokio::test]
async fn refusals_that_block_a_quorum_are_not_retried_others_are() {
    let nodes = RedisNodes::start(3).unwrap();
    nodes.iter().for_each(require_password);
    let right = |i: usize| url(nodes.node(i), &format!(":{PASSWORD}@"));
    let dead = {
        let listener = std::net::TcpListener::bind(("127.0.0.1", 0)).unwrap();
        format!(
            "redis://127.0.0.1:{}/0",
            listener.local_addr().unwrap().port()
        )
    };
    // Two of three refuse the password: no quorum until the URLs change.
    let err = refused_at_once(&client(vec![
        right(0),
        url(nodes.node(1), ""),
        url(nodes.node(2), ""),
    ]))
    .await;
    assert!(err.needs_config_change() && !err.is_retryable(), "{err}");
    assert!(err.to_string().contains("2 of 3 node(s) failed"), "{err}");
    // One refuses the password and one is down: the down node may come back, so waiting may
    // help; the advice names both.
    let err = client(vec![right(0), url(nodes.node(1), ""), dead])
        .try_acquire("job")
        .await
        .unwrap_err();
    let text = err.to_string();
    assert!(!err.needs_config_change() && err.is_retryable(), "{text}");
    assert!(
        text.contains("password in its URL") && text.contains("reachable"),
        "{text}"
    );
}

#[tokio::test]
async fn an_acl_user_without_permissions_is_named_and_the_hint_fixes_it() {
    let node = RedisNode::start().unwrap();
    node.cli(&[
        "ACL",
        "SETUSER",
        "locker",
        "on",
        ">locker-pw",
        "~*",
        "&*",
        "+ping",
        "+info",
    ])
    .unwrap();
    let locker = url(&node, "locker:locker-pw@");
    let err = refused_at_once(&client(vec![locker.clone()])).await;
    let text = err.to_string();
    assert_eq!(causes(&err), [FailureCause::NoPermission], "{text}");
    assert!(
        text.contains("refused by the node's ACL (NOPERM "),
        "{text}"
    );
    assert!(text.contains("on redis://locker:***@127.0.0.1:"), "{text}");
    assert!(!text.contains("locker-pw"), "{text}");
    // The hint's ACL, as written, is enough for every lock operation.
    node.cli(&[
        "ACL",
        "SETUSER",
        "locker",
        "+@scripting",
        "+@read",
        "+@write",
        "+info",
        "+time",
        "+@pubsub",
    ])
    .unwrap();
    let c = client(vec![locker]);
    let mut lock = c.try_acquire("job").await.unwrap();
    lock.extend().await.unwrap();
    lock.release().await.unwrap();
}

#[tokio::test]
async fn a_replica_is_named() {
    let primary = RedisNode::start().unwrap();
    let replica = RedisNode::start_with(RedisOptions::new().replica_of(primary.port())).unwrap();
    let err = client(vec![replica.url()])
        .try_acquire("job")
        .await
        .unwrap_err();
    let text = err.to_string();
    assert_eq!(causes(&err), [FailureCause::ReadOnly], "{text}");
    assert!(
        text.contains("the node is a read-only replica (READONLY) on redis://127.0.0.1:"),
        "{text}"
    );
    assert!(text.contains("list primaries, not replicas"), "{text}");
    // A node in the wrong role may be promoted: retrying is not pointless.
    assert!(err.is_retryable(), "{text}");
}

#[tokio::test]
async fn a_node_out_of_memory_is_named() {
    let node = RedisNode::start_with(
        RedisOptions::new()
            .maxmemory(Some(1))
            .maxmemory_policy(Some("noeviction".into())),
    )
    .unwrap();
    let err = client(vec![node.url()])
        .try_acquire("job")
        .await
        .unwrap_err();
    let text = err.to_string();
    assert_eq!(causes(&err), [FailureCause::OutOfMemory], "{text}");
    assert!(
        text.contains("out of memory") && text.contains("maxmemory"),
        "{text}"
    );
    assert_eq!(node.cli(&["EXISTS", "job"]).unwrap(), "0");
}

#[tokio::test]
async fn a_node_still_loading_its_data_is_named_and_retryable() {
    // A dataset to load: 100,000 keys saved by one node...
    let source = RedisNode::start().unwrap();
    source.cli(&["DEBUG", "POPULATE", "100000"]).unwrap();
    source.cli(&["SAVE"]).unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(source.dir().join("dump.rdb"), dir.path().join("dump.rdb")).unwrap();
    // ...loaded by another at 100 µs a key (about 10 s), answering clients every KiB.
    let dir_arg = dir.path().to_str().unwrap().to_owned();
    let node = RedisNode::start_with(RedisOptions::new().ready_while_loading(true).extra_args(
        vec![
            "--dir".into(),
            dir_arg,
            "--key-load-delay".into(),
            "100".into(),
            "--loading-process-events-interval-bytes".into(),
            "1024".into(),
        ],
    ))
    .unwrap();
    let err = client(vec![node.url()])
        .try_acquire("job")
        .await
        .unwrap_err();
    let text = err.to_string();
    assert_eq!(causes(&err), [FailureCause::Loading], "{text}");
    assert!(text.contains("still loading its dataset"), "{text}");
    assert!(err.is_retryable(), "{text}");
}

#[tokio::test]
async fn a_key_of_another_type_is_named() {
    let node = RedisNode::start().unwrap();
    node.cli(&["RPUSH", "job", "not-a-lock"]).unwrap();
    // A script that reads the key meets the list (a plain SET NX only finds the name taken):
    // the release of a token, as `fencelock release` sends it.
    let err = client(vec![node.url()])
        .release_by_owner("job", "0123456789abcdef0123456789abcdef")
        .await
        .unwrap_err();
    let text = err.to_string();
    assert_eq!(causes(&err), [FailureCause::WrongType], "{text}");
    assert!(
        text.contains("the key holds data of another type, not a lock (WRONGTYPE)")
            && text.contains("choose another resource name"),
        "{text}"
    );
    assert!(!text.contains("reachable"), "{text}");
}

#[tokio::test]
async fn a_node_whose_snapshot_failed_is_named() {
    let node = RedisNode::start_with(
        RedisOptions::new().extra_args(vec!["--enable-protected-configs".into(), "yes".into()]),
    )
    .unwrap();
    // A snapshot into a directory that is gone fails, and a node with save points then stops
    // taking writes (stop-writes-on-bgsave-error, on by default).
    let gone = tempfile::tempdir().unwrap();
    node.cli(&["CONFIG", "SET", "dir", gone.path().to_str().unwrap()])
        .unwrap();
    node.cli(&["CONFIG", "SET", "save", "3600 1"]).unwrap();
    drop(gone);
    node.cli(&["BGSAVE"]).unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !node
        .cli(&["INFO", "persistence"])
        .unwrap()
        .contains("rdb_last_bgsave_status:err")
    {
        assert!(Instant::now() < deadline, "the snapshot did not fail");
        std::thread::sleep(Duration::from_millis(50));
    }
    let err = client(vec![node.url()])
        .try_acquire("job")
        .await
        .unwrap_err();
    let text = err.to_string();
    assert_eq!(causes(&err), [FailureCause::WritesStopped], "{text}");
    assert!(
        text.contains("refuses writes because its last snapshot failed (MISCONF)")
            && text.contains("stop-writes-on-bgsave-error"),
        "{text}"
    );
}

#[tokio::test]
async fn a_database_the_node_lacks_is_a_configuration_error_not_retried() {
    let node = RedisNode::start().unwrap();
    let url = format!("redis://127.0.0.1:{}/99", node.port());
    let err = refused_at_once(&client(vec![url])).await;
    let text = err.to_string();
    assert_eq!(causes(&err), [FailureCause::NoDatabase], "{text}");
    assert!(err.needs_config_change() && !err.is_retryable(), "{text}");
    assert!(
        text.contains("the URL's database does not exist on the node")
            && text.contains("redis://host:port/0"),
        "{text}"
    );
}

#[test]
fn an_http_url_is_not_taken_for_etcd() {
    for (url, want) in [
        ("http://127.0.0.1:2379", "etcd://host:port"),
        ("https://127.0.0.1:2379", "etcds://host:port"),
    ] {
        let err = Client::new(Config::new([url])).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{err}");
        assert!(err.to_string().contains(want), "{err}");
    }
}
