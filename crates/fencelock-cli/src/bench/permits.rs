//! `permits`: C workers (each its own client, on a thread and runtime of its own, as separate
//! processes would be) share a semaphore of N permits; N critical sections in total, each a hold
//! of `--hold` inside a cross-thread count of the holders. Then the same workers, the same
//! sections, on the mutex: the ratio of the two is what N permits buy over one lock (at most N
//! when the hold dominates a cycle). Reports the most holders seen at once; more than N (more
//! than one for the mutex) is a safety failure.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::{on_threads, series, Plan, Run, Series, CONTENDED_WAIT};
use crate::settings::Settings;

/// The hold of one section when `--hold` is not given.
pub(super) const DEFAULT_HOLD: Duration = Duration::from_millis(5);

/// The holders inside, and the most seen at once.
#[derive(Debug, Default)]
struct Inside {
    taken: AtomicUsize,
    now: AtomicUsize,
    most: AtomicUsize,
    over: AtomicUsize,
}

/// The permits series, then the mutex series.
pub(super) async fn run_permits(
    plan: &Plan,
    settings: &Settings,
    permits: u32,
    hold: Duration,
) -> anyhow::Result<Vec<Series>> {
    let mut out = Vec::new();
    for (name, n) in [("fencelock", Some(permits)), ("mutex", None)] {
        out.push(one(name, plan, settings, n, hold).await?);
    }
    Ok(out)
}

async fn one(
    name: &'static str,
    plan: &Plan,
    settings: &Settings,
    permits: Option<u32>,
    hold: Duration,
) -> anyhow::Result<Series> {
    let inside = Arc::new(Inside::default());
    let (cycles, limit) = (plan.cycles, permits.unwrap_or(1) as usize);
    let resource = Arc::new(format!("{}:permits:{name}", plan.prefix));
    let config = settings
        .lock_config(plan.fencing)
        .with_retry(fencelock::RetryPolicy::new().with_wait(CONTENDED_WAIT));
    let shared = inside.clone();
    let (runs, (elapsed, cpu)) = on_threads(plan.concurrency, move |_, start| {
        let (inside, resource, config) = (shared.clone(), resource.clone(), config.clone());
        async move {
            let setup = async {
                let client = fencelock::Client::new(config)?;
                client.connect().await;
                let sem = permits
                    .map(|n| client.semaphore(&resource, n))
                    .transpose()?;
                anyhow::Ok((client, sem))
            }
            .await;
            start.wait();
            let (client, sem) = setup?;
            let (mut samples, mut errors, mut mine) = (Vec::new(), 0usize, 0usize);
            while inside.taken.fetch_add(1, Ordering::AcqRel) < cycles {
                let t = Instant::now();
                let lock = match &sem {
                    Some(sem) => sem.acquire().await,
                    None => client.acquire(&resource).await,
                };
                let Ok(lock) = lock else {
                    errors += 1;
                    continue;
                };
                samples.push(t.elapsed());
                let now = inside.now.fetch_add(1, Ordering::AcqRel) + 1;
                inside.most.fetch_max(now, Ordering::AcqRel);
                if now > limit {
                    inside.over.fetch_add(1, Ordering::AcqRel);
                }
                tokio::time::sleep(hold).await;
                inside.now.fetch_sub(1, Ordering::AcqRel);
                if lock.release().await.is_err() {
                    errors += 1;
                }
                mine += 1;
            }
            client.close().await;
            anyhow::Ok((samples, errors, mine))
        }
    })
    .await?;
    let mut run = Run {
        elapsed,
        cpu,
        ..Run::default()
    };
    for (samples, errors, _) in runs {
        run.samples.extend(samples);
        run.errors += errors;
    }
    let mut s = series(name, run);
    s.extra.insert("permits".into(), limit.into());
    s.extra.insert("hold_us".into(), super::micros(hold).into());
    s.extra.insert(
        "most_holders".into(),
        inside.most.load(Ordering::Acquire).into(),
    );
    s.extra.insert(
        "overlaps".into(),
        Value::from(inside.over.load(Ordering::Acquire)),
    );
    Ok(s)
}
