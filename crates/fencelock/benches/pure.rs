//! The pure parts: the quorum decision, validity arithmetic, token derivation.

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion};
use fencelock::{fencing, quorum};

fn pure(c: &mut Criterion) {
    c.bench_function("quorum::Tally decides a 5-node round", |b| {
        b.iter(|| {
            let mut t = quorum::Tally::new(5, quorum::quorum(5));
            for granted in black_box([true, false, true, true, true]) {
                if t.record(granted) != quorum::Decision::Pending {
                    break;
                }
            }
            t.decision()
        })
    });
    c.bench_function("fencing::next_token over 5 counters", |b| {
        let counters = [41u64, 97, 96, 12, 97];
        b.iter(|| fencing::next_token(black_box(counters)))
    });
    c.bench_function("fencing::counter_key", |b| {
        b.iter(|| fencelock::protocol::counter_key(black_box("lock:sku:42")))
    });
    c.bench_function("Config::drift", |b| {
        let config =
            fencelock::Config::new(["redis://127.0.0.1:1/0"]).with_ttl(Duration::from_secs(10));
        b.iter(|| black_box(&config).drift())
    });
}

criterion_group!(benches, pure);
criterion_main!(benches);
