//! Acquire + release over real local redis-server nodes, beside a raw redis-rs baseline that
//! sends the same commands with no library around it.
//!
//! Run with `cargo bench -p fencelock --bench lock`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion};
use fencelock::{Client, Config};
use fencelock_testkit::RedisNodes;
use redis::aio::MultiplexedConnection;

static KEY: AtomicU64 = AtomicU64::new(0);

fn next_key() -> String {
    format!("bench:{}", KEY.fetch_add(1, Ordering::Relaxed))
}

const RELEASE: &str = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end";

/// The baseline: SET NX PX on every node in parallel, then EVALSHA compare-and-delete on
/// every node in parallel, waiting for all answers each time.
async fn raw_cycle(conns: &[MultiplexedConnection], sha: &str) {
    let key = next_key();
    let token = "0123456789abcdef0123456789abcdef";
    let sets = conns.iter().map(|c| {
        let mut c = c.clone();
        let key = key.clone();
        async move {
            let _: Option<String> = redis::cmd("SET")
                .arg(&key)
                .arg(token)
                .arg("NX")
                .arg("PX")
                .arg(10_000)
                .query_async(&mut c)
                .await
                .unwrap();
        }
    });
    futures_util::future::join_all(sets).await;
    let dels = conns.iter().map(|c| {
        let mut c = c.clone();
        let key = key.clone();
        async move {
            let _: i64 = redis::cmd("EVALSHA")
                .arg(sha)
                .arg(1)
                .arg(&key)
                .arg(token)
                .query_async(&mut c)
                .await
                .unwrap();
        }
    });
    futures_util::future::join_all(dels).await;
}

fn lock(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let nodes = RedisNodes::start(5).unwrap();
    let urls = nodes.urls();
    let client = |urls: &[String], fencing: bool| {
        Client::new(
            Config::new(urls)
                .with_ttl(Duration::from_secs(10))
                .with_fencing(fencing)
                .with_quarantine(false),
        )
        .unwrap()
    };
    let (raw1, raw5, sha) = rt.block_on(async {
        let mut conns = Vec::new();
        for u in &urls {
            conns.push(
                redis::Client::open(u.as_str())
                    .unwrap()
                    .get_multiplexed_async_connection()
                    .await
                    .unwrap(),
            );
        }
        let sha: String = redis::cmd("SCRIPT")
            .arg("LOAD")
            .arg(RELEASE)
            .query_async(&mut conns[0].clone())
            .await
            .unwrap();
        for c in &mut conns[1..] {
            let _: String = redis::cmd("SCRIPT")
                .arg("LOAD")
                .arg(RELEASE)
                .query_async(c)
                .await
                .unwrap();
        }
        (vec![conns[0].clone()], conns, sha)
    });

    let mut g = c.benchmark_group("acquire+release");
    g.measurement_time(Duration::from_secs(4));
    g.bench_function("raw SET NX + EVALSHA, 1 node", |b| {
        b.to_async(&rt).iter(|| raw_cycle(&raw1, &sha))
    });
    let one = client(&urls[..1], false);
    g.bench_function("efficiency lock, 1 node", |b| {
        b.to_async(&rt).iter(|| async {
            one.try_acquire(&next_key())
                .await
                .unwrap()
                .release()
                .await
                .unwrap()
        })
    });
    g.bench_function("raw parallel fan-out, 5 nodes", |b| {
        b.to_async(&rt).iter(|| raw_cycle(&raw5, &sha))
    });
    let five = client(&urls, false);
    g.bench_function("redlock, 5 nodes", |b| {
        b.to_async(&rt).iter(|| async {
            five.try_acquire(&next_key())
                .await
                .unwrap()
                .release()
                .await
                .unwrap()
        })
    });
    let fenced = client(&urls, true);
    g.bench_function("redlock with fencing, 5 nodes", |b| {
        b.to_async(&rt).iter(|| async {
            fenced
                .try_acquire(&next_key())
                .await
                .unwrap()
                .release()
                .await
                .unwrap()
        })
    });
    g.finish();
}

criterion_group!(benches, lock);
criterion_main!(benches);
