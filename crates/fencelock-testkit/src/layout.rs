//! The import graph of a crate's sources, for the layout tests of the library and the CLI: a
//! module's imports are the `crate::` and `super::` paths in its code (comments and its
//! `#[cfg(test)] mod tests` left out), each resolved to the deepest module it names. A cycle
//! in that graph is two layers that each need the other.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// Every source file under `src` (a crate's `src` folder): its module path (`redis::round`,
/// `""` for lib.rs or main.rs) and its code without comments and without its unit tests.
///
/// # Panics
///
/// When `src` or a file under it cannot be read: a layout test has nothing to check then.
pub fn modules(src: &Path) -> BTreeMap<String, String> {
    source_files(src)
        .into_iter()
        .map(|path| {
            let rel = path.strip_prefix(src).unwrap().with_extension("");
            let mut parts: Vec<String> = rel
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            // lib.rs and main.rs are the crate root; a folder's mod.rs is the folder's module.
            let root = parts.len() == 1 && matches!(parts[0].as_str(), "lib" | "main");
            if root || parts.last().is_some_and(|p| p == "mod") {
                parts.pop();
            }
            (parts.join("::"), code(&fs::read_to_string(&path).unwrap()))
        })
        .collect()
}

/// The `.rs` files under `dir`, at any depth.
///
/// # Panics
///
/// When `dir` cannot be read.
pub fn source_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    collect(dir, &mut out);
    out.sort();
    out
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
/// unit-test module on (by the project's habit, the last item of a file).
pub fn code(text: &str) -> String {
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
/// naming its parent's items is how Rust nests, not a layer crossing), and an edge from each
/// module below the root to each of its children: a parent is made of its children (it
/// declares them and reaches them by relative paths, `child::f`, that name no `crate::`), so a
/// child that imports a module importing the parent closes a circle
/// (`a::b -> c -> a -> a::b`).
pub fn imports(mods: &BTreeMap<String, String>) -> BTreeMap<&str, BTreeSet<&str>> {
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
    for name in mods.keys() {
        if let Some((parent, _)) = name.rsplit_once("::") {
            if let Some((parent, _)) = mods.get_key_value(parent) {
                graph
                    .entry(parent.as_str())
                    .or_default()
                    .insert(name.as_str());
            }
        }
    }
    graph
}

/// A cycle of the graph, if it has one (depth-first, the path kept): its modules in import
/// order, the first one repeated at the end.
pub fn cycle<'a>(graph: &BTreeMap<&'a str, BTreeSet<&'a str>>) -> Option<Vec<&'a str>> {
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

/// The circles of the graph, each named at least once (not every cycle: after each one found,
/// its closing edge is taken out and the search runs again), for a message that lists them all.
pub fn cycles<'a>(graph: &BTreeMap<&'a str, BTreeSet<&'a str>>) -> Vec<Vec<&'a str>> {
    let mut graph = graph.clone();
    let mut found = Vec::new();
    // Each found cycle loses its last edge, so the search moves on to the next circle.
    while let Some(c) = cycle(&graph) {
        let (from, to) = (c[c.len() - 2], c[c.len() - 1]);
        graph.get_mut(from).unwrap().remove(to);
        found.push(c);
    }
    found
}

/// `Ok` for a graph without a cycle, else one line per circle (`a -> b -> a`).
///
/// # Errors
///
/// The circles, as text for a test's failure message.
pub fn no_cycles(graph: &BTreeMap<&str, BTreeSet<&str>>) -> Result<(), String> {
    let found = cycles(graph);
    if found.is_empty() {
        return Ok(());
    }
    Err(found
        .iter()
        .map(|c| c.join(" -> "))
        .collect::<Vec<_>>()
        .join("\n"))
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert_eq!(graph["b"], BTreeSet::from(["b::x", "c"]));
        assert_eq!(graph["b::x"], BTreeSet::from(["c"]));
        assert_eq!(cycle(&graph), Some(vec!["a", "b::x", "c", "a"]));
        assert_eq!(cycles(&graph), vec![vec!["a", "b::x", "c", "a"]]);
        let mods = crate_of("");
        assert_eq!(cycle(&imports(&mods)), None);
    }

    #[test]
    fn a_circle_through_a_parent_and_its_child_is_found() {
        // a::b imports c, c imports a, and a is made of a::b: the circle has no `crate::` edge
        // from a to a::b, only the nesting.
        let mods: BTreeMap<String, String> = [
            ("a", "fn f() { b::g(); }"),
            ("a::b", "use crate::c::h;"),
            ("c", "use crate::a::f;"),
        ]
        .into_iter()
        .map(|(n, c)| (n.to_string(), code(c)))
        .collect();
        let graph = imports(&mods);
        assert_eq!(graph["a"], BTreeSet::from(["a::b"]));
        assert_eq!(cycle(&graph), Some(vec!["a", "a::b", "c", "a"]));
    }

    #[test]
    fn two_circles_are_both_listed() {
        let mods: BTreeMap<String, String> = [
            ("a", "use crate::b;"),
            ("b", "use crate::a;"),
            ("c", "use crate::d;"),
            ("d", "use crate::c;"),
        ]
        .into_iter()
        .map(|(n, c)| (n.to_string(), code(c)))
        .collect();
        let graph = imports(&mods);
        assert_eq!(
            cycles(&graph),
            vec![vec!["a", "b", "a"], vec!["c", "d", "c"]]
        );
    }
}
