//! The command-line guide's shell script (docs/guide/command-line.md, the block marked
//! `<!-- script: acquire-release -->`) runs as printed against real nodes: the lock is held
//! between its steps and released when it exits.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

use fencelock_testkit::RedisNodes;

/// The shell block that follows the marker in the guide.
fn script() -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/guide/command-line.md");
    let text = std::fs::read_to_string(&path).unwrap();
    let after = text
        .split_once("<!-- script: acquire-release -->")
        .unwrap_or_else(|| panic!("{} lost its acquire-release script", path.display()))
        .1;
    let body = after
        .trim_start()
        .strip_prefix("```sh\n")
        .expect("the marker is followed by a ```sh block");
    body.split_once("\n```").unwrap().0.to_owned() + "\n"
}

fn executable(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

#[test]
fn the_guides_acquire_and_release_script_holds_the_lock_between_its_steps() {
    let nodes = RedisNodes::start(3).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let bin = dir.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    // `fencelock` on PATH is the built binary on the test's nodes; fresh nodes need no
    // restart quarantine.
    executable(
        &bin.join("fencelock"),
        &format!(
            "#!/bin/sh\nexec {} --nodes {} --node-timeout {} --no-quarantine \"$@\"\n",
            common::BIN,
            nodes.urls().join(","),
            common::LOOSE_NODE_TIMEOUT
        ),
    );
    // Each step records whether another client could take the lock at that moment (75: held).
    for step in ["migrate-step-1.sh", "migrate-step-2.sh"] {
        executable(
            &dir.path().join(step),
            &format!(
                "#!/bin/sh\nfencelock acquire db-migrate >/dev/null 2>&1\necho \"{step}: $?\" >> steps.log\n"
            ),
        );
    }
    executable(&dir.path().join("migrate.sh"), &script());

    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut sh = Command::new("sh");
    sh.arg("migrate.sh")
        .current_dir(dir.path())
        .env("PATH", path)
        .env("HOME", &home)
        .env("XDG_CONFIG_HOME", home.join("config"))
        .env("XDG_DATA_HOME", home.join("data"));
    // Only what the script itself sets: none of the test environment's settings.
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("FENCELOCK_") {
            sh.env_remove(name);
        }
    }
    let status = sh.status().unwrap();
    assert!(status.success(), "the guide's script failed: {status}");
    let log = std::fs::read_to_string(dir.path().join("steps.log")).unwrap();
    assert_eq!(log, "migrate-step-1.sh: 75\nmigrate-step-2.sh: 75\n");
    // The trap released it: the key is gone on every node.
    for node in nodes.iter() {
        assert_eq!(
            node.cli(&["EXISTS", "db-migrate"]).unwrap(),
            "0",
            "{}",
            node.url()
        );
    }
}
