//! Runs fencelock's fencing model checker (`crates/fencelock/tests/fencing_model.rs`) optimised
//! and without debug assertions, so that `cargo test --workspace` explores the full bounds that
//! `docs/fencing.md` cites. The package has no code of its own: its one test target is that
//! file, and the workspace's `[profile.test.package.fencelock-model]` makes it fast.
//!
//! Run it alone: `cargo test -p fencelock-model -- --nocapture`.
