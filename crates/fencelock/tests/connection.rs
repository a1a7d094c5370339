//! Connection settings a deployment needs, on a real redis-server: an ACL user and password in
//! the URL, allowed only the keys and channels `fencelock::protocol` documents (which proves the
//! documented set complete: every operation below would fail with NOPERM on an undocumented
//! key), a database number, and a wrong password that is named without being printed.

use std::time::Duration;

use fencelock::protocol::RESERVED_PREFIX;
use fencelock::{AutoExtend, Client, Config, ErrorKind, FailureCause, RetryPolicy, VoteOutcome};
use fencelock_testkit::RedisNode;

const NODE_TIMEOUT: Duration = Duration::from_millis(1000);
const PASSWORD: &str = "acl-pw-31337";
/// The lock keys of this test: the application's own key space, one pattern.
const RESOURCES: &str = "app:lock:*";

fn config(url: String) -> Config {
    // With a holder label (in the lock value; older versions wrote a side key, one of the
    // documented keys the ACL allows).
    Config::new([url])
        .with_holder(fencelock::Holder::this_process().with_label("acl test"))
        .with_quarantine(false)
        .with_node_timeout(NODE_TIMEOUT)
        .with_connect_timeout(Duration::from_secs(5))
}

/// A user that may run what fencelock's hint says (scripts, reads, writes, INFO, TIME, pub/sub)
/// but only on the lock keys' pattern and on fencelock's documented prefix, keys and channels.
fn restricted_user(node: &RedisNode, name: &str, keys: &[String]) {
    let mut args: Vec<String> = [
        "ACL",
        "SETUSER",
        name,
        "reset",
        "on",
        &format!(">{PASSWORD}"),
        "+@scripting",
        "+@read",
        "+@write",
        "+info",
        "+time",
        "+@pubsub",
        "+ping",
        &format!("&{RESERVED_PREFIX}*"),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    args.extend(keys.iter().map(|k| format!("~{k}")));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    assert_eq!(node.cli(&args).unwrap(), "OK");
}

fn url(node: &RedisNode, user: &str, password: &str, db: u32) -> String {
    format!("redis://{user}:{password}@127.0.0.1:{}/{db}", node.port())
}

#[tokio::test]
async fn an_acl_user_limited_to_the_documented_keys_can_do_everything() {
    let node = RedisNode::start().unwrap();
    let documented = format!("{RESERVED_PREFIX}*");
    restricted_user(&node, "locker", &[RESOURCES.to_string(), documented]);
    let url = url(&node, "locker", PASSWORD, 0);
    // Fencing on: the counter key too. Two clients: the waiting line's keys and channels too.
    let a = Client::new(config(url.clone()).with_fencing(true)).unwrap();
    let b = Client::new(config(url.clone()).with_fencing(true)).unwrap();
    let mut first = a.try_acquire("app:lock:report").await.unwrap();
    first.extend().await.unwrap();
    let waiter = tokio::spawn(async move {
        let policy = RetryPolicy::new().with_wait(Duration::from_secs(30));
        let lock = b.acquire_with("app:lock:report", &policy).await.unwrap();
        let token = lock.fencing_token().unwrap().value();
        lock.release().await.unwrap();
        token
    });
    // Let the waiter join the line before the hand-over.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let first_token = first.fencing_token().unwrap().value();
    first.release().await.unwrap();
    assert!(waiter.await.unwrap() > first_token);
    // Auto-extension and scoped work.
    let guard = a
        .try_acquire("app:lock:other")
        .await
        .unwrap()
        .auto_extend(AutoExtend::new());
    guard.release().await.unwrap();
    let answer = a.with_lock("app:lock:scoped", async |_| 42).await.unwrap();
    assert_eq!(answer, 42);
    // The read-write lock: readers' set, the writer record, a reader waiting in line behind a
    // writer, extension and release.
    let rw = a.rwlock("app:lock:doc").unwrap();
    let write = rw.try_write().await.unwrap();
    let c = Client::new(config(url.clone()).with_fencing(true)).unwrap();
    let reader = tokio::spawn(async move {
        let mut read = c.rwlock("app:lock:doc").unwrap().read().await.unwrap();
        read.extend().await.unwrap();
        let last = read.last_writer_token();
        read.release().await.unwrap();
        last
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let written = write.fencing_token().map(|t| t.value());
    write.release().await.unwrap();
    assert_eq!(reader.await.unwrap(), written);
    a.close().await;
    // No key or channel was refused; the one command refused is CONFIG GET, which the
    // connection set-up tries and does without (managed Redis forbids it too).
    let log = node.cli(&["ACL", "LOG"]).unwrap();
    let words: Vec<&str> = log.split_whitespace().collect();
    let field = |name: &str| -> Vec<&str> {
        words
            .windows(2)
            .filter(|w| w[0] == name)
            .map(|w| w[1])
            .collect()
    };
    assert!(
        field("reason").iter().all(|r| *r == "command"),
        "keys or channels refused: {}",
        words.join(" ")
    );
    assert!(
        field("object").iter().all(|o| *o == "config|get"),
        "commands refused: {}",
        words.join(" ")
    );
}

#[tokio::test]
async fn the_same_user_without_the_documented_prefix_is_refused() {
    // The check above can fail: without fencelock's keys the same user is refused, by name.
    let node = RedisNode::start().unwrap();
    restricted_user(&node, "locker", &[RESOURCES.to_string()]);
    let client = Client::new(config(url(&node, "locker", PASSWORD, 0))).unwrap();
    let err = client.try_acquire("app:lock:report").await.unwrap_err();
    let text = err.to_string();
    assert!(text.contains("NOPERM"), "{text}");
    assert!(text.contains("redis://locker:***@127.0.0.1:"), "{text}");
    assert!(!text.contains(PASSWORD), "{text}");
}

#[tokio::test]
async fn a_wrong_password_for_an_acl_user_is_named_and_not_printed() {
    let node = RedisNode::start().unwrap();
    restricted_user(&node, "locker", &["*".to_string()]);
    let wrong = "not-the-pw-2718";
    let client = Client::new(config(url(&node, "locker", wrong, 0))).unwrap();
    let err = client.try_acquire("app:lock:report").await.unwrap_err();
    let text = err.to_string();
    assert_eq!(err.kind(), ErrorKind::Unavailable, "{text}");
    let causes: Vec<FailureCause> = err
        .votes()
        .unwrap()
        .iter()
        .filter_map(|v| match &v.outcome {
            VoteOutcome::Failed(e) => Some(e.cause()),
            _ => None,
        })
        .collect();
    assert_eq!(causes, [FailureCause::Auth], "{text}");
    assert!(text.contains("redis://locker:***@127.0.0.1:"), "{text}");
    assert!(!text.contains(wrong) && !text.contains(PASSWORD), "{text}");
    assert!(!format!("{err:?}").contains(wrong));
}

#[tokio::test]
async fn the_database_number_in_the_url_is_where_the_keys_go() {
    let node = RedisNode::start().unwrap();
    let client = Client::new(config(format!("redis://127.0.0.1:{}/2", node.port()))).unwrap();
    let lock = client.try_acquire("app:lock:db").await.unwrap();
    let keyspace = node.cli(&["INFO", "keyspace"]).unwrap();
    assert!(keyspace.contains("db2:keys="), "{keyspace}");
    assert!(!keyspace.contains("db0:"), "{keyspace}");
    lock.release().await.unwrap();
}

/// Takes TCP connections and never answers (a half-dead host, a wrong port behind a
/// firewall that accepts): what only the connect timeout can bound.
fn silent_listener() -> (std::net::TcpListener, u16) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    (listener, port)
}

/// A try on `url` with a 300 ms connect timeout and a node timeout far longer: it must end
/// within about the connect timeout, naming the node.
async fn times_out_connecting(url: &str) {
    let config = Config::new([url])
        .with_connect_timeout(Duration::from_millis(300))
        .with_node_timeout(Duration::from_secs(20))
        .with_ttl(Duration::from_secs(60))
        .with_quarantine(false);
    let client = Client::new(config).unwrap();
    let started = std::time::Instant::now();
    let err = client.try_acquire("connect:timeout").await.unwrap_err();
    let took = started.elapsed();
    assert!(took >= Duration::from_millis(250), "{took:?}: {err}");
    assert!(took < Duration::from_secs(3), "{took:?}: {err}");
    assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
    let text = err.to_string();
    let name = client.nodes()[0].redacted();
    assert!(text.contains(&name), "{text} names {name}");
    assert!(text.contains("connect timeout"), "{text}");
}

#[tokio::test]
async fn the_connect_timeout_bounds_a_listener_that_never_answers() {
    let (_listener, port) = silent_listener();
    times_out_connecting(&format!("redis://127.0.0.1:{port}")).await;
}

#[tokio::test]
async fn the_connect_timeout_bounds_a_paused_node() {
    let node = RedisNode::start().unwrap();
    node.pause().unwrap();
    times_out_connecting(&node.url()).await;
    node.resume().unwrap();
}
