//! `./dev sim`: runs seeds of the simulation and reports the failing ones with their traces.
//!
//! fencelock-sim [--seeds N | --seed S] [--first S] [--duration D (virtual, per run; e.g. 6s)]
//!               [--for D (wall clock: keep running seeds this long)] [--faults none|claimed|amnesia|all]
//!               [--nodes N] [--clients N] [--verbose] [--stop (at the first failing seed)]
//!               [--ttl-roles (issue 27 item 1: a 4 s plain-lock client beside a 1 s / 980 ms one)]
//!               [--scenario mixed|short-ttl|held-extension|flush|slow-reply|counter-restart|counter-order|passing-failure|line-order|reader-to-the-end|refusals|node-set-first|many-locks|range-end|untrusted-read|terms-past-1e18|deleted-between-rounds|
//!                counter-lost|records-expire|cut-short|leaders-restart|failover|labels|evicting|cluster (a script aimed at one interleaving;
//!                each has its own length and faults)]

use std::time::{Duration, Instant};

use fencelock_sim::run::{report, run, Faults, Options, Scenario};

fencelock_sim::virtual_clock!();

fn parse_duration(s: &str) -> Result<Duration, String> {
    let (n, unit) = s
        .find(|c: char| !c.is_ascii_digit())
        .map_or((s, "s"), |i| (&s[..i], &s[i..]));
    let n: u64 = n
        .parse()
        .map_err(|_| format!("not a duration: {s:?} (write 6s, 500ms, 2m)"))?;
    Ok(match unit {
        "ms" => Duration::from_millis(n),
        "s" => Duration::from_secs(n),
        "m" => Duration::from_secs(60 * n),
        _ => return Err(format!("not a duration: {s:?} (write 6s, 500ms, 2m)")),
    })
}

fn main() {
    if let Err(e) = real_main() {
        eprintln!("fencelock-sim: {e}");
        std::process::exit(2);
    }
}

fn real_main() -> Result<(), String> {
    let mut opts = Options::default();
    let (mut seeds, mut first, mut wall): (u64, u64, Option<Duration>) = (100, 0, None);
    let mut stop = false;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = |name: &str| args.next().ok_or(format!("{name} needs a value"));
        match a.as_str() {
            "--seeds" => {
                seeds = value("--seeds")?
                    .parse()
                    .map_err(|_| "--seeds takes a number")?
            }
            "--seed" => {
                first = value("--seed")?
                    .parse()
                    .map_err(|_| "--seed takes a number")?;
                seeds = 1;
            }
            "--first" => {
                first = value("--first")?
                    .parse()
                    .map_err(|_| "--first takes a number")?
            }
            "--duration" => opts.duration = parse_duration(&value("--duration")?)?,
            "--for" => wall = Some(parse_duration(&value("--for")?)?),
            "--nodes" => {
                opts.nodes = value("--nodes")?
                    .parse()
                    .map_err(|_| "--nodes takes a number")?
            }
            "--clients" => {
                opts.clients = value("--clients")?
                    .parse()
                    .map_err(|_| "--clients takes a number")?
            }
            "--faults" => {
                opts.faults = match value("--faults")?.as_str() {
                    "none" => Faults::None,
                    "claimed" => Faults::Claimed,
                    "amnesia" => Faults::Amnesia,
                    "all" => Faults::All,
                    other => {
                        return Err(format!(
                            "--faults {other:?}: use none, claimed, amnesia or all"
                        ))
                    }
                }
            }
            "--verbose" => opts.verbose = true,
            "--ttl-roles" => opts.ttl_roles = true,
            "--scenario" => {
                let name = value("--scenario")?;
                opts.scenario = Scenario::parse(&name).ok_or_else(|| {
                    format!("--scenario {name:?}: use mixed, short-ttl, held-extension, flush, slow-reply, counter-restart, counter-order, passing-failure, line-order, reader-to-the-end, refusals, node-set-first, many-locks, range-end, untrusted-read, terms-past-1e18, deleted-between-rounds, counter-lost, records-expire, cut-short, leaders-restart, failover, labels, evicting or cluster")
                })?
            }
            "--stop" => stop = true,
            other => {
                return Err(format!(
                    "unknown argument {other:?}; see the top of src/bin/fencelock-sim.rs"
                ))
            }
        }
    }
    let began = Instant::now();
    let (mut runs, mut failed, mut commands, mut grants) = (0u64, 0u64, 0u64, 0usize);
    let mut seed = first;
    loop {
        let done = match wall {
            Some(w) => began.elapsed() >= w,
            None => runs >= seeds,
        };
        if done {
            break;
        }
        let outcome = run(seed, &opts);
        runs += 1;
        commands += outcome.commands;
        grants += outcome.grants;
        if !outcome.ok() || opts.verbose {
            if !outcome.ok() {
                failed += 1;
            }
            println!("{}", report(&outcome, &opts));
        }
        seed += 1;
        if stop && failed > 0 {
            break;
        }
    }
    let secs = began.elapsed().as_secs_f64();
    println!(
        "{runs} runs (seeds {first}..{seed}), {failed} failed, {grants} grants, {commands} node commands in {secs:.1}s: {:.1} runs/s, {:.0} commands/s",
        runs as f64 / secs,
        commands as f64 / secs
    );
    if failed > 0 {
        std::process::exit(1);
    }
    Ok(())
}
