//! The crate's layout rules (docs/architecture.md), checked on its sources: the backend is
//! dispatched in one place, nothing is `unreachable!`, and the modules' imports form no cycle.
//! A module's imports are the `crate::` and `super::` paths in its code (comments and its
//! `#[cfg(test)] mod tests` left out), each resolved to the deepest module it names.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// Every source file of the library: its module path (`redis::round`, `""` for lib.rs) and
/// its code without comments and without its unit tests.
fn modules() -> BTreeMap<String, String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    collect(&root, &mut files);
    files
        .into_iter()
        .map(|path| {
            let rel = path.strip_prefix(&root).unwrap().with_extension("");
            let mut parts: Vec<String> = rel
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            if matches!(parts.last().map(String::as_str), Some("mod" | "lib")) {
                parts.pop();
            }
            (parts.join("::"), code(&fs::read_to_string(&path).unwrap()))
        })
        .collect()
}

fn collect(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            collect(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The code of a file: line comments (doc comments included) removed, and everything from its
/// unit-test module on (by the crate's habit, the last item of a file).
fn code(text: &str) -> String {
    let end = text.find("#[cfg(test)]\nmod tests").unwrap_or(text.len());
    text[..end]
        .lines()
        .map(|line| match line.find("//") {
            Some(i) if !line[..i].contains('"') => &line[..i],
            _ => line,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The paths after each occurrence of `prefix` (`crate::` or `super::`), with braces expanded
/// one level: `crate::{a, b::c}` gives `a` and `b::c`.
fn paths_after<'a>(code: &'a str, prefix: &str) -> Vec<&'a str> {
    let ident = |c: char| c.is_alphanumeric() || c == '_' || c == ':';
    let mut out = Vec::new();
    for (i, _) in code.match_indices(prefix) {
        let before = code[..i].chars().next_back();
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
            continue;
        }
        let rest = &code[i + prefix.len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let group = &group[..group.find('}').unwrap_or(group.len())];
            for item in group.split(',') {
                let item = item.trim();
                out.push(&item[..item.find(|c: char| !ident(c)).unwrap_or(item.len())]);
            }
        } else {
            out.push(&rest[..rest.find(|c: char| !ident(c)).unwrap_or(rest.len())]);
        }
    }
    out
}

/// Each module's imports of other modules of the crate (not of its own ancestors: a child
/// naming its parent's items is how Rust nests, not a layer crossing).
fn imports(mods: &BTreeMap<String, String>) -> BTreeMap<&str, BTreeSet<&str>> {
    let deepest = |path: &str| -> Option<&str> {
        let segs: Vec<&str> = path.trim_end_matches("::").split("::").collect();
        (1..=segs.len())
            .rev()
            .find_map(|n| mods.get_key_value(&segs[..n].join("::")))
            .map(|(k, _)| k.as_str())
    };
    let mut graph = BTreeMap::new();
    for (name, code) in mods {
        let parent = name.rsplit_once("::").map_or("", |(p, _)| p);
        let mut to = BTreeSet::new();
        let crate_paths = paths_after(code, "crate::").into_iter().map(String::from);
        let super_paths = paths_after(code, "super::").into_iter().map(|p| {
            if parent.is_empty() {
                p.to_string()
            } else {
                format!("{parent}::{p}")
            }
        });
        for path in crate_paths.chain(super_paths) {
            if let Some(target) = deepest(&path) {
                let ancestor = target.is_empty() || name.starts_with(&format!("{target}::"));
                if target != name && !ancestor {
                    to.insert(target);
                }
            }
        }
        graph.insert(name.as_str(), to);
    }
    graph
}

/// A cycle of the graph, if it has one (depth-first, the path kept).
fn cycle<'a>(graph: &BTreeMap<&'a str, BTreeSet<&'a str>>) -> Option<Vec<&'a str>> {
    fn visit<'a>(
        node: &'a str,
        graph: &BTreeMap<&'a str, BTreeSet<&'a str>>,
        path: &mut Vec<&'a str>,
        done: &mut BTreeSet<&'a str>,
    ) -> Option<Vec<&'a str>> {
        if let Some(at) = path.iter().position(|n| *n == node) {
            let mut found = path[at..].to_vec();
            found.push(node);
            return Some(found);
        }
        if !done.insert(node) {
            return None;
        }
        path.push(node);
        for next in graph.get(node).into_iter().flatten() {
            if let Some(found) = visit(next, graph, path, done) {
                return Some(found);
            }
        }
        path.pop();
        None
    }
    let mut done = BTreeSet::new();
    graph
        .keys()
        .find_map(|n| visit(n, graph, &mut Vec::new(), &mut done))
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
    if let Some(found) = cycle(&graph) {
        panic!("import cycle: {}", found.join(" -> "));
    }
}

#[test]
fn a_cycle_is_found_where_there_is_one() {
    // The reader and the search on a made-up crate: a -> b::x -> c -> a, and b -> c by
    // `super::`, b::x naming its parent b (no edge).
    let crate_of = |c_imports: &str| -> BTreeMap<String, String> {
        [
            ("a", "use crate::b::x::Thing; // use crate::z;"),
            ("b", "use super::c;"),
            ("b::x", "use crate::{c::f, b::Other};"),
            ("c", c_imports),
        ]
        .into_iter()
        .map(|(n, c)| (n.to_string(), code(c)))
        .collect()
    };
    let mods = crate_of("fn g() { crate::a::h(); }");
    let graph = imports(&mods);
    assert_eq!(graph["a"], BTreeSet::from(["b::x"]));
    assert_eq!(graph["b"], BTreeSet::from(["c"]));
    assert_eq!(graph["b::x"], BTreeSet::from(["c"]));
    assert_eq!(cycle(&graph), Some(vec!["a", "b::x", "c", "a"]));
    let mods = crate_of("");
    assert_eq!(cycle(&imports(&mods)), None);
}

#[test]
fn only_backend_rs_etcd_and_lib_rs_name_the_etcd_feature() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    collect(&root, &mut files);
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
fn nothing_is_unreachable() {
    let with: Vec<String> = modules()
        .into_iter()
        .filter(|(_, code)| code.contains("unreachable!"))
        .map(|(name, _)| name)
        .collect();
    assert!(with.is_empty(), "unreachable! in {with:?}");
}
