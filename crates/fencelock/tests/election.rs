//! Leader election on real nodes: one leader at a time, observers see every change in order,
//! and a leader that dies (its process gone: no release, no extension) is succeeded after its
//! TTL by a leader with a larger term.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fencelock::{Client, Config, Leader, RetryPolicy};
use fencelock_testkit::RedisNodes;

fn config(nodes: &RedisNodes, ttl: Duration) -> Config {
    Config::new(nodes.urls())
        .with_ttl(ttl)
        .with_node_timeout(Duration::from_millis(500))
        .with_quarantine(false)
        .with_fencing(true)
        .with_retry(RetryPolicy::new().with_wait(Duration::from_secs(120)))
}

const CANDIDATES: usize = 4;
const TERMS_EACH: usize = 3;

/// Collects `n` leaders from a fresh observer.
fn observe(client: &Client, name: &str, n: usize) -> tokio::task::JoinHandle<Vec<Leader>> {
    let mut observer = client.election(name).unwrap().observe();
    tokio::spawn(async move {
        let mut seen = Vec::new();
        while seen.len() < n {
            seen.push(observer.next().await);
        }
        seen
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_leader_at_a_time_and_observers_see_every_change_in_order() {
    let nodes = RedisNodes::start(3).unwrap();
    let watcher = Client::new(config(&nodes, Duration::from_secs(10))).unwrap();
    let observers = [
        observe(&watcher, "e:jobs", CANDIDATES * TERMS_EACH),
        observe(
            &Client::new(config(&nodes, Duration::from_secs(10))).unwrap(),
            "e:jobs",
            CANDIDATES * TERMS_EACH,
        ),
    ];
    // Let the observers make their first read of the empty log.
    tokio::time::sleep(Duration::from_millis(300)).await;

    let current: Arc<Mutex<Option<u64>>> = Arc::default();
    let elected: Arc<Mutex<Vec<(u64, String)>>> = Arc::default();
    let mut tasks = Vec::new();
    for i in 0..CANDIDATES {
        let client = Client::new(config(&nodes, Duration::from_secs(10))).unwrap();
        let (current, elected) = (current.clone(), elected.clone());
        tasks.push(tokio::spawn(async move {
            let election = client.election("e:jobs").unwrap();
            for k in 0..TERMS_EACH {
                let value = format!("candidate-{i}-{k}");
                let leadership = election.campaign(&value).await.unwrap();
                {
                    let mut cur = current.lock().unwrap();
                    assert!(
                        cur.is_none(),
                        "two leaders at once: {cur:?} and {}",
                        leadership.term()
                    );
                    *cur = Some(leadership.term());
                }
                elected.lock().unwrap().push((leadership.term(), value));
                assert_eq!(
                    leadership.context().fencing_token().map(|t| t.value()),
                    Some(leadership.term())
                );
                tokio::time::sleep(Duration::from_millis(fastrand::u64(20..80))).await;
                *current.lock().unwrap() = None;
                leadership.resign().await.unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let elected = elected.lock().unwrap().clone();
    // The terms grow in the order the leaders were elected.
    assert!(elected.windows(2).all(|w| w[0].0 < w[1].0), "{elected:?}");
    for o in observers {
        let seen = tokio::time::timeout(Duration::from_secs(60), o)
            .await
            .expect("the observer reports every leader")
            .unwrap();
        let seen: Vec<(u64, String)> = seen
            .iter()
            .map(|l| (l.term(), l.value().to_string()))
            .collect();
        assert_eq!(seen, elected, "every change, in order");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_leaders_successor_takes_over_after_the_ttl_with_a_larger_term() {
    let nodes = RedisNodes::start(3).unwrap();
    let ttl = Duration::from_secs(2);
    let urls = config(&nodes, ttl);
    // The first leader lives in a runtime of its own, which then stops: its extensions stop
    // and nothing releases its lock, as when its process is killed.
    let (first, died_at) = std::thread::spawn(move || {
        let rt = tokio::runtime::Runtime::new().unwrap();
        let term = rt.block_on(async {
            let client = Client::new(urls).unwrap();
            let leadership = client
                .election("e:dead")
                .unwrap()
                .campaign("first")
                .await
                .unwrap();
            let term = leadership.term();
            std::mem::forget(leadership);
            term
        });
        drop(rt);
        (term, Instant::now())
    })
    .join()
    .unwrap();

    let client = Client::new(config(&nodes, ttl)).unwrap();
    let mut observer = client.election("e:dead").unwrap().observe();
    let seen_first = tokio::time::timeout(Duration::from_secs(30), observer.next())
        .await
        .unwrap();
    assert_eq!((seen_first.term(), seen_first.value()), (first, "first"));
    let second = client
        .election("e:dead")
        .unwrap()
        .campaign("second")
        .await
        .unwrap();
    let took = died_at.elapsed();
    assert!(second.term() > first, "{} after {first}", second.term());
    let seen_second = tokio::time::timeout(Duration::from_secs(30), observer.next())
        .await
        .unwrap();
    assert_eq!(
        (seen_second.term(), seen_second.value()),
        (second.term(), "second")
    );
    println!(
        "successor after {took:?} (TTL {ttl:?}), term {} > {first}",
        second.term()
    );
    second.resign().await.unwrap();
}
