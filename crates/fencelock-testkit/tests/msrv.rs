//! The workspace's `rust-version` is a true minimum: no resolved dependency
//! needs a newer Rust than the one the workspace states.
//!
//! It lives here, in the unpublished test-support crate, because it reads the
//! whole workspace (`cargo metadata` from the workspace root), which a
//! published crate's tests could not.

use std::path::Path;
use std::process::Command;

use serde_json::Value;

/// `"1.88"` or `"1.88.0"` as `(1, 88, 0)`.
fn parse_version(v: &str) -> (u64, u64, u64) {
    let mut parts = v.split('.').map(|p| {
        p.parse::<u64>()
            .unwrap_or_else(|_| panic!("rust-version {v:?} is not a version"))
    });
    let major = parts.next().unwrap_or(0);
    let minor = parts.next().unwrap_or(0);
    let patch = parts.next().unwrap_or(0);
    (major, minor, patch)
}

fn metadata() -> Value {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    // --all-features: the optional dependencies (etcd-client, tokio-postgres,
    // the TLS stack) count. No --filter-platform: rust-version promises every
    // platform, so a Windows-only dependency counts as well. --locked: a test
    // must not rewrite Cargo.lock.
    let out = Command::new(env!("CARGO"))
        .args([
            "metadata",
            "--format-version",
            "1",
            "--all-features",
            "--locked",
        ])
        .current_dir(&root)
        .output()
        .expect("cannot run cargo metadata");
    assert!(
        out.status.success(),
        "cargo metadata failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("cargo metadata printed invalid JSON")
}

#[test]
fn rust_version_is_at_least_every_dependencys() {
    let meta = metadata();
    let members: Vec<&str> = meta["workspace_members"]
        .as_array()
        .expect("workspace_members")
        .iter()
        .map(|id| id.as_str().expect("package id"))
        .collect();
    let packages = meta["packages"].as_array().expect("packages");

    let mut needed = (0, 0, 0);
    let mut offenders: Vec<(String, (u64, u64, u64))> = Vec::new();
    for p in packages {
        if members.contains(&p["id"].as_str().unwrap_or_default()) {
            continue;
        }
        let Some(v) = p["rust_version"].as_str() else {
            continue;
        };
        let v = parse_version(v);
        let name = format!(
            "{} {}",
            p["name"].as_str().unwrap(),
            p["version"].as_str().unwrap()
        );
        offenders.push((name, v));
        needed = needed.max(v);
    }
    assert!(
        needed > (1, 0, 0),
        "no dependency declares a rust_version: is this cargo metadata output?"
    );
    offenders.retain(|(_, v)| *v == needed);

    let mut checked = 0;
    for p in packages {
        if !members.contains(&p["id"].as_str().unwrap_or_default()) {
            continue;
        }
        let name = p["name"].as_str().unwrap();
        let stated = p["rust_version"]
            .as_str()
            .unwrap_or_else(|| panic!("{name} states no rust-version"));
        let names: Vec<&str> = offenders.iter().map(|(n, _)| n.as_str()).collect();
        assert!(
            parse_version(stated) >= needed,
            "{name} states rust-version {stated}, but {} need{} Rust {}.{}.{}: \
             raise rust-version in the workspace Cargo.toml (and the MSRV in README.md)",
            names.join(", "),
            if names.len() == 1 { "s" } else { "" },
            needed.0,
            needed.1,
            needed.2,
        );
        checked += 1;
    }
    assert_eq!(checked, members.len(), "every workspace member was checked");
}
