//! The workspace's own binaries and examples, for tests that run them as processes.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The profile directory (`target/debug`, or `target/release`) of the running test, once the
/// workspace's test build is there: every binary and example, built as `./dev test`
/// (`cargo test --workspace --all-features`) builds them. Under `./dev test` that build is
/// already done and asking for it again costs about a second; a test run alone builds what
/// the workspace's tests need. Asking for anything else (`cargo build -p X`, `--examples`)
/// would resolve other dependency features and rebuild the library and the binaries (tens of
/// seconds), and the next `cargo test` would rebuild them back.
///
/// # Panics
///
/// When cargo cannot be run or the build fails: the test cannot go on without its binaries.
pub fn workspace_build() -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            let exe = std::env::current_exe().expect("the test's own path");
            // target/<profile>/deps/<test binary>
            let profile_dir = exe
                .parent()
                .and_then(Path::parent)
                .expect("a test binary lives in <target>/<profile>/deps")
                .to_path_buf();
            let target_dir = profile_dir
                .parent()
                .expect("a profile dir lives in the target dir");
            let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../Cargo.toml");
            let mut cargo = Command::new(env!("CARGO"));
            cargo
                .args([
                    "test",
                    "--quiet",
                    "--no-run",
                    "--workspace",
                    "--all-features",
                ])
                .arg("--manifest-path")
                .arg(&manifest)
                .arg("--target-dir")
                .arg(target_dir);
            // Cargo gives a running test the variables of its own package (CARGO_MANIFEST_DIR,
            // CARGO_PKG_NAME, ...). A nested cargo must not see them: ring's build script
            // reruns when CARGO_MANIFEST_DIR changes, and with it rustls, the etcd client and
            // everything above (seen: `EnvVarChanged { name: "CARGO_MANIFEST_DIR" }`, minutes
            // of rebuilding here and again in the next `cargo test`).
            for (name, _) in std::env::vars_os() {
                let name = name.to_string_lossy();
                if is_package_variable(&name) {
                    cargo.env_remove(&*name);
                }
            }
            if profile_dir.file_name().is_some_and(|p| p == "release") {
                cargo.arg("--release");
            }
            let status = cargo.status().expect("cannot run cargo");
            assert!(status.success(), "building the workspace failed: {status}");
            profile_dir
        })
        .clone()
}

/// The variables cargo sets for a running test from its package (not the user's settings such as
/// CARGO_HOME or CARGO_TARGET_DIR).
fn is_package_variable(name: &str) -> bool {
    matches!(
        name,
        "CARGO_MANIFEST_DIR"
            | "CARGO_MANIFEST_PATH"
            | "CARGO_CRATE_NAME"
            | "CARGO_BIN_NAME"
            | "CARGO_PRIMARY_PACKAGE"
            | "CARGO_TARGET_TMPDIR"
            | "OUT_DIR"
    ) || name.starts_with("CARGO_PKG_")
        || name.starts_with("CARGO_BIN_EXE_")
}
