//! The crate's layout rules (docs/architecture.md), checked on its sources: the backend is
//! dispatched in one place, nothing is `unreachable!`, and the modules' imports form no cycle.
//! The import graph is read by `fencelock_testkit::layout` (shared with the CLI's layout test).

use std::fs;
use std::path::Path;

use fencelock_testkit::layout::{imports, no_cycles, source_files};

/// Every source file of the library: its module path (`redis::round`, `""` for lib.rs) and
/// its code without comments and without its unit tests.
fn modules() -> std::collections::BTreeMap<String, String> {
    fencelock_testkit::layout::modules(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"))
}

#[test]
fn the_modules_import_each_other_without_a_cycle() {
    let mods = modules();
    let graph = imports(&mods);
    assert!(graph.len() > 40, "too few modules found: {}", graph.len());
    assert!(
        graph["client"].contains("backend"),
        "the import reader misses client's imports: {:?}",
        graph["client"]
    );
    if let Err(circles) = no_cycles(&graph) {
        panic!("import cycles:\n{circles}");
    }
}

#[test]
fn only_backend_rs_etcd_and_lib_rs_name_the_etcd_feature() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let files = source_files(&root);
    let naming: Vec<String> = files
        .iter()
        .filter(|p| {
            fs::read_to_string(p)
                .unwrap()
                .contains("feature = \"etcd\"")
        })
        .map(|p| p.strip_prefix(&root).unwrap().display().to_string())
        .filter(|p| p != "backend.rs" && p != "lib.rs" && !p.starts_with("etcd/"))
        .collect();
    assert!(naming.is_empty(), "the etcd feature named in {naming:?}");
}

#[test]
fn only_backend_rs_pglock_and_lib_rs_name_the_postgres_lock_feature() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let files = source_files(&root);
    let naming: Vec<String> = files
        .iter()
        .filter(|p| {
            fs::read_to_string(p)
                .unwrap()
                .contains("feature = \"postgres-lock\"")
        })
        .map(|p| p.strip_prefix(&root).unwrap().display().to_string())
        .collect();
    assert!(
        naming.iter().any(|p| p == "backend.rs"),
        "the feature is not found at all: {naming:?}"
    );
    let elsewhere: Vec<&String> = naming
        .iter()
        .filter(|p| *p != "backend.rs" && *p != "lib.rs" && !p.starts_with("pglock/"))
        .collect();
    assert!(
        elsewhere.is_empty(),
        "the postgres-lock feature named in {elsewhere:?}"
    );
}

#[test]
fn only_backend_rs_zk_and_lib_rs_name_the_zookeeper_feature() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let files = source_files(&root);
    let naming: Vec<String> = files
        .iter()
        .filter(|p| {
            fs::read_to_string(p)
                .unwrap()
                .contains("feature = \"zookeeper\"")
        })
        .map(|p| p.strip_prefix(&root).unwrap().display().to_string())
        .collect();
    assert!(
        naming.iter().any(|p| p == "backend.rs"),
        "the feature is not found at all: {naming:?}"
    );
    let elsewhere: Vec<&String> = naming
        .iter()
        // protocol.rs publishes the lock nodes' paths for tools (`fencelock inspect`); it
        // dispatches on nothing.
        .filter(|p| {
            *p != "backend.rs" && *p != "lib.rs" && *p != "protocol.rs" && !p.starts_with("zk/")
        })
        .collect();
    assert!(
        elsewhere.is_empty(),
        "the zookeeper feature named in {elsewhere:?}"
    );
}

#[test]
fn nothing_is_unreachable() {
    let with: Vec<String> = modules()
        .into_iter()
        .filter(|(_, code)| code.contains("unreachable!"))
        .map(|(name, _)| name)
        .collect();
    assert!(with.is_empty(), "unreachable! in {with:?}");
}
