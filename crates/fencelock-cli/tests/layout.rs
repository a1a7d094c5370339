//! The CLI's layout rule, checked on its sources as the library's is (crates/fencelock/tests/
//! layout.rs, the same reader in `fencelock_testkit::layout`): the modules' imports form no
//! cycle. A command sits above what it holds (`hold`) and what it probes (`probe`), and the
//! argument structs sit in `cli`, which imports no command.

use std::path::Path;

use fencelock_testkit::layout::{imports, modules, no_cycles};

#[test]
fn the_cli_modules_import_each_other_without_a_cycle() {
    let mods = modules(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"));
    let graph = imports(&mods);
    assert!(graph.len() > 30, "too few modules found: {}", graph.len());
    assert!(
        graph["run"].contains("exit"),
        "the import reader misses run's imports: {:?}",
        graph["run"]
    );
    if let Err(circles) = no_cycles(&graph) {
        panic!("import cycles:\n{circles}");
    }
}
