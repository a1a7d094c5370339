//! The clock-shift shim on plain child processes.

use std::process::Command;
use std::time::{SystemTime, UNIX_EPOCH};

use fencelock_testkit::{clock_shim_path, ClockOffset};

fn child_epoch_secs(clock: &ClockOffset) -> i64 {
    let mut cmd = Command::new("date");
    cmd.arg("+%s");
    clock.apply(&mut cmd);
    let out = cmd.output().unwrap();
    assert!(out.status.success());
    String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
}

fn now_secs() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
        .try_into()
        .unwrap()
}

#[test]
fn shim_is_built_once_and_cached() {
    let a = clock_shim_path().unwrap();
    let b = clock_shim_path().unwrap();
    assert_eq!(a, b);
    assert!(a.is_file());
}

#[test]
fn offset_moves_a_child_wall_clock_both_ways() {
    let clock = ClockOffset::new().unwrap();
    assert_eq!(clock.get().unwrap(), 0);
    let env = clock.env();
    assert!(env.iter().any(|(k, _)| k == "LD_PRELOAD"));
    assert!(env.iter().any(|(k, _)| k == "FENCELOCK_CLOCK_OFFSET_FILE"));

    // Slack of a few seconds covers a slow child start on a loaded machine.
    let real = now_secs();
    assert!((child_epoch_secs(&clock) - real).abs() <= 5);

    clock.set(86_400_000).unwrap();
    assert_eq!(clock.get().unwrap(), 86_400_000);
    let ahead = child_epoch_secs(&clock) - now_secs();
    assert!((86_395..=86_405).contains(&ahead), "{ahead}");

    clock.set(-3_600_500).unwrap();
    let behind = child_epoch_secs(&clock) - now_secs();
    assert!((-3_606..=-3_595).contains(&behind), "{behind}");
}
