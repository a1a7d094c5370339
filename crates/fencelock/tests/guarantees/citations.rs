//! The check behind docs/guarantees.md's "What backs each cell" (issue 36): every key a cell of
//! the guarantee tables cites must name tests that make the cell's fault, in the cell's mode.
//!
//! The doc gives each key a line in its `citations` block: the faults and modes it claims and the
//! tests behind it. Claims are not trusted: what a test makes and in which mode it runs is read
//! from its source (the test's function, and the functions, constants and statics of its file
//! that it reaches), by the calls that make each fault. A cell passes when each of its test,
//! model or harness keys has a test whose source makes the cell's fault in every mode of the
//! cell's row. Argued keys (A-) are allowed and counted as such; the count of backed cells is
//! compared with the one the doc states.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// A fault of the tables' columns (README's rows).
pub(crate) const FAULTS: [&str; 8] = [
    "pause",
    "clock",
    "restart-empty",
    "crash-persist",
    "minority",
    "majority",
    "delay",
    "evict",
];

/// A mode a run can be in: `single` (one Redis node), `redlock` (several), `fenced` (fencing
/// tokens on), `quarantine` / `no-quarantine` (restart quarantine on / off), `etcd`.
pub(crate) const MODES: [&str; 6] = [
    "single",
    "redlock",
    "fenced",
    "quarantine",
    "no-quarantine",
    "etcd",
];

/// One run a test makes: the modes it runs in and the faults it makes there.
#[derive(Debug, Clone, Default)]
pub(crate) struct Run {
    pub(crate) modes: BTreeSet<&'static str>,
    pub(crate) faults: BTreeSet<&'static str>,
}

/// A key's line in the `citations` block.
#[derive(Debug, Clone)]
pub(crate) struct Citation {
    pub(crate) faults: Vec<String>,
    pub(crate) modes: Vec<String>,
    pub(crate) tests: Vec<String>,
}

/// A cell that may fail for a reason tracked elsewhere: (table, row start, fault, key, why).
/// An entry that no longer fails is itself an error, so the list cannot go stale.
pub(crate) type Pending = (
    &'static str,
    &'static str,
    &'static str,
    &'static str,
    &'static str,
);

/// What the check found.
#[derive(Debug, Default)]
pub(crate) struct Report {
    pub(crate) errors: Vec<String>,
    pub(crate) backed: usize,
    /// Cells with a test, model or harness key, one of whose keys fails (a pending entry).
    pub(crate) partly: usize,
    pub(crate) argued: usize,
    pub(crate) not_applicable: usize,
    pub(crate) cells: usize,
}

pub(crate) fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The `citations` block of the doc: key -> its line.
pub(crate) fn parse_citations(doc: &str) -> Result<BTreeMap<String, Citation>, String> {
    let mut out = BTreeMap::new();
    let mut inside = false;
    for line in doc.lines() {
        if line.trim() == "```citations" {
            inside = true;
            continue;
        }
        if !inside {
            continue;
        }
        if line.trim() == "```" {
            return Ok(out);
        }
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let parts: Vec<&str> = line.split('|').map(str::trim).collect();
        let [key, faults, modes, tests] = parts[..] else {
            return Err(format!(
                "citations line {line:?}: want `KEY | faults | modes | tests`"
            ));
        };
        let words = |s: &str| -> Vec<String> {
            s.split([',', ' '])
                .filter(|w| !w.is_empty())
                .map(str::to_owned)
                .collect()
        };
        let citation = Citation {
            faults: words(faults),
            modes: words(modes),
            tests: words(tests),
        };
        for f in &citation.faults {
            if !FAULTS.contains(&f.as_str()) {
                return Err(format!("{key}: unknown fault {f:?} (known: {FAULTS:?})"));
            }
        }
        for m in &citation.modes {
            if !MODES.contains(&m.as_str()) {
                return Err(format!("{key}: unknown mode {m:?} (known: {MODES:?})"));
            }
        }
        if citation.tests.is_empty() {
            return Err(format!("{key}: names no test"));
        }
        if out.insert(key.to_owned(), citation).is_some() {
            return Err(format!("{key}: two citations lines"));
        }
    }
    Err("no ```citations block (or it is not closed)".to_owned())
}

/// The top-level items (functions, constants, statics) of a Rust file, by name, without their
/// comment lines.
fn items(src: &str) -> HashMap<String, String> {
    let mut out: HashMap<String, String> = HashMap::new();
    // (name, text, the line that ends it if it is a block: its indentation and `}`)
    let mut current: Option<(String, String, Option<String>)> = None;
    for line in src.lines() {
        if line.trim_start().starts_with("//") {
            continue;
        }
        if let Some((name, text, end)) = current.as_mut() {
            text.push_str(line);
            text.push('\n');
            let ends = match end {
                Some(end) => line == end.as_str() || line.strip_suffix(';') == Some(end.as_str()),
                None => line.ends_with(';'),
            };
            if ends {
                out.entry(std::mem::take(name))
                    .or_default()
                    .push_str(&std::mem::take(text));
                current = None;
            }
            continue;
        }
        // Items at the top level and in a module one level down.
        let indent = if line.starts_with("    ") && !line.starts_with("     ") {
            "    "
        } else if !line.starts_with(' ') {
            ""
        } else {
            continue;
        };
        let mut rest = &line[indent.len()..];
        for prefix in ["pub(crate) ", "pub(super) ", "pub "] {
            rest = rest.strip_prefix(prefix).unwrap_or(rest);
        }
        rest = rest.strip_prefix("async ").unwrap_or(rest);
        let Some(rest) = ["fn ", "const ", "static ", "impl ", "struct ", "enum "]
            .iter()
            .find_map(|p| rest.strip_prefix(p))
        else {
            continue;
        };
        let name: String = rest
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        if name.is_empty() {
            continue;
        }
        let text = format!("{line}\n");
        if line.ends_with(';') || line.ends_with('}') {
            out.entry(name).or_default().push_str(&text);
        } else {
            let is_value = line.contains("const ") || line.contains("static ");
            let end = (!is_value || line.ends_with('{')).then(|| format!("{indent}}}"));
            current = Some((name, text, end));
        }
    }
    out
}

/// The test's function and every item of its file it reaches, as one text.
fn closure(src: &str, test: &str) -> Option<String> {
    let items = items(src);
    let mut seen = BTreeSet::new();
    let mut todo = vec![test.to_owned()];
    let mut text = String::new();
    while let Some(name) = todo.pop() {
        if !seen.insert(name.clone()) {
            continue;
        }
        let Some(body) = items.get(&name) else {
            if name == test {
                return None;
            }
            continue;
        };
        text.push_str(body);
        for word in body.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
            if !word.is_empty() && items.contains_key(word) && !seen.contains(word) {
                todo.push(word.to_owned());
            }
        }
    }
    Some(text)
}

/// `RedisNodes::start(N` / `start_with(N,` with N >= 2 (several nodes), or N == 1.
fn redis_node_counts(text: &str) -> BTreeSet<u32> {
    let mut counts = BTreeSet::new();
    for pat in ["RedisNodes::start(", "RedisNodes::start_with("] {
        for (i, _) in text.match_indices(pat) {
            let digits: String = text[i + pat.len()..]
                .chars()
                .take_while(char::is_ascii_digit)
                .collect();
            if let Ok(n) = digits.parse() {
                counts.insert(n);
            }
        }
    }
    if text.contains("RedisNode::start") {
        counts.insert(1);
    }
    counts
}

/// What a test on real servers makes, read from its source (`own`: the test's function alone).
fn real_run(text: &str, own: &str) -> Run {
    let has = |p: &str| text.contains(p);
    let mut run = Run::default();
    let counts = redis_node_counts(text);
    if counts.contains(&1) {
        run.modes.insert("single");
    }
    if counts.iter().any(|n| *n >= 2) {
        run.modes.insert("redlock");
    }
    if has("EtcdCluster::start(") || has("Etcd::start(") {
        run.modes.insert("etcd");
    }
    if has("with_fencing(true)")
        || has("REJECTED stale write")
        || has("ErrorKind::StaleToken")
        || has("\"--fencing\"")
    {
        run.modes.insert("fenced");
    }
    // A flag passed down: `for quarantine in [false, true]`, or a helper's argument.
    let passed = has("with_quarantine(quarantine)");
    let redis = run.modes.contains("single") || run.modes.contains("redlock");
    if redis
        && (has("with_quarantine(false)")
            || has("--no-quarantine")
            || passed && (has("in [false") || own.contains("(false)")))
    {
        run.modes.insert("no-quarantine");
    }
    if redis
        && (has("with_quarantine(true)")
            || passed && (has("true]") || own.contains("(true)"))
            || has("Config::new") && !has("with_quarantine(") && !has("--no-quarantine"))
    {
        run.modes.insert("quarantine");
    }

    let node_down = has(".kill()") || has(".stop()") || has(".pause()");
    // `--stop-after-read`: the inventory example's worker stops itself with SIGSTOP.
    if has("SIGSTOP") || has("--stop-after-read") {
        run.faults.insert("pause");
    }
    if has("set_clock_offset(") {
        run.faults.insert("clock");
    }
    let persists = has("Persistence::AofAlways");
    if has("kill_and_wipe(")
        || has("replace_member_empty(")
        || has("FLUSHALL")
        || has(".restart()") && !persists && !run.modes.contains("etcd")
    {
        run.faults.insert("restart-empty");
    }
    if has(".kill()") && has(".restart()") && (persists || run.modes.contains("etcd")) {
        run.faults.insert("crash-persist");
    }
    if node_down {
        run.faults.insert("minority");
    }
    if node_down && (has("ErrorKind::Unavailable") || has("ErrorKind::Lost")) {
        run.faults.insert("majority");
    }
    if has("set_delay(") || has(".pause()") && has(".resume()") {
        run.faults.insert("delay");
    }
    if has("maxmemory") {
        run.faults.insert("evict");
    }
    run
}

/// What a model case explores: every case has pauses, timeouts and requests in any order;
/// `faults(clock jumps, restarts without persistence, total losses, evictions)` adds the rest.
fn model_run(text: &str) -> Run {
    let mut run = Run::default();
    run.modes.extend(["redlock", "fenced"]);
    if text.contains("quarantine: true") || text.contains("for quarantine in [false, true]") {
        run.modes.insert("quarantine");
    }
    if text.contains("quarantine: false") || text.contains("for quarantine in [false, true]") {
        run.modes.insert("no-quarantine");
    }
    if text.contains("PAUSES_ONLY") {
        run.faults.extend(["pause", "delay", "minority"]);
    }
    for (i, _) in text.match_indices("faults(") {
        let args: Vec<u32> = text[i + "faults(".len()..]
            .split(')')
            .next()
            .unwrap_or("")
            .split(',')
            .map(|a| a.trim().parse().unwrap_or(u32::MAX))
            .collect();
        if let [clock, restarts, losses, evictions] = args[..] {
            if args.contains(&u32::MAX) {
                continue;
            }
            if clock > 0 {
                run.faults.insert("clock");
            }
            if restarts > 0 || losses > 0 {
                run.faults.insert("restart-empty");
            }
            if evictions > 0 {
                run.faults.insert("evict");
            }
        }
    }
    run
}

/// Each `run("modes", FAULTS, ...)` / `run_with(...)` call of a harness test: its modes and
/// fault kinds (a constant is looked up in the same text).
fn harness_runs(text: &str) -> Vec<Run> {
    let mut runs = Vec::new();
    for pat in ["run(", "run_with("] {
        for (i, _) in text.match_indices(pat) {
            let Some(rest) = text[i + pat.len()..].trim_start().strip_prefix('"') else {
                continue;
            };
            let Some((modes, rest)) = rest.split_once('"') else {
                continue;
            };
            let rest = rest.trim_start_matches([',', ' ', '\n']);
            let faults = if let Some(lit) = rest.strip_prefix('"') {
                lit.split('"').next().unwrap_or("").to_owned()
            } else {
                let name: String = rest
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                text.split(&format!("const {name}: &str ="))
                    .nth(1)
                    .and_then(|r| r.split('"').nth(1))
                    .unwrap_or("")
                    .to_owned()
            };
            for mode in modes.split(',') {
                let mut run = Run::default();
                match mode {
                    "single" => run.modes.insert("single"),
                    "redlock" => run.modes.insert("redlock"),
                    "redlock-fenced" => {
                        run.modes.extend(["redlock", "fenced", "no-quarantine"]);
                        true
                    }
                    "redlock-quarantine" => {
                        run.modes.extend(["redlock", "fenced", "quarantine"]);
                        true
                    }
                    "etcd" => run.modes.insert("etcd"),
                    _ => continue,
                };
                for kind in faults.split(',') {
                    let fault = match kind {
                        "pause-client" => "pause",
                        "clock-forward" => "clock",
                        // A node's data lost: by a restart, two of them within a TTL, or a
                        // FLUSHALL without a restart (what such a restart leaves).
                        "restart-nopersist" | "restart-two-nopersist" | "flushall" => {
                            "restart-empty"
                        }
                        "restart-persist" => "crash-persist",
                        "kill" | "kill-leader" | "pause-node" | "pause-leader" => "minority",
                        "latency" => "delay",
                        _ => continue,
                    };
                    run.faults.insert(fault);
                }
                runs.push(run);
            }
        }
    }
    runs
}

/// The runs of one cited test (`FILE::NAME`; FILE is `crates/fencelock/tests/FILE.rs` unless it
/// has a `/`).
pub(crate) fn runs_of(
    test: &str,
    read: &dyn Fn(&Path) -> Option<String>,
) -> Result<Vec<Run>, String> {
    let (file, name) = test
        .split_once("::")
        .ok_or_else(|| format!("{test}: want FILE::NAME"))?;
    let path = if file.contains('/') {
        PathBuf::from(format!("{file}.rs"))
    } else {
        PathBuf::from(format!("crates/fencelock/tests/{file}.rs"))
    };
    let src = read(&path).ok_or_else(|| format!("{test}: no file {}", path.display()))?;
    let text = closure(&src, name)
        .ok_or_else(|| format!("{test}: no function {name} in {}", path.display()))?;
    Ok(if path.ends_with("fencelock-harness/tests/harness.rs") {
        harness_runs(&text)
    } else if file.ends_with("_model") {
        vec![model_run(&text)]
    } else {
        let own = items(&src).remove(name).unwrap_or_default();
        vec![real_run(&text, &own)]
    })
}

/// Which fault a column (or README row) title names.
fn fault_of(title: &str) -> Option<&'static str> {
    let t = title.to_ascii_lowercase();
    [
        ("pause", "pause"),
        ("clock", "clock"),
        ("without persistence", "restart-empty"),
        ("appendfsync", "crash-persist"),
        ("minority", "minority"),
        ("majority", "majority"),
        ("delay", "delay"),
        ("eviction", "evict"),
    ]
    .into_iter()
    .find(|(word, _)| t.contains(word))
    .map(|(_, f)| f)
}

/// The modes a row of the backing table needs, for the cell's fault.
fn row_modes(row: &str, fault: &str) -> Vec<&'static str> {
    let r = row.to_ascii_lowercase();
    if r.starts_with("single") {
        vec!["single"]
    } else if r.contains("etcd") {
        vec!["etcd"]
    } else if r.contains("quarantine") {
        vec!["redlock", "fenced", "quarantine"]
    } else if r.contains("without fencing") {
        vec!["redlock"]
    } else if fault == "restart-empty" {
        // The fenced row is the one without quarantine: that changes what a restart does.
        vec!["redlock", "fenced", "no-quarantine"]
    } else {
        vec!["redlock", "fenced"]
    }
}

/// The keys a cell cites (`T-...`, `M-...`, `H-...`, `A-...`).
pub(crate) fn keys_in(cell: &str) -> Vec<String> {
    let mut keys = Vec::new();
    let bytes: Vec<char> = cell.chars().collect();
    let mut i = 0;
    while i + 2 < bytes.len() {
        let starts = matches!(bytes[i], 'T' | 'M' | 'H' | 'A' | 'B')
            && bytes[i + 1] == '-'
            && bytes[i + 2].is_ascii_lowercase()
            && (i == 0 || !bytes[i - 1].is_ascii_alphanumeric());
        if starts {
            let key: String = bytes[i..]
                .iter()
                .take_while(|c| c.is_ascii_alphanumeric() || **c == '-')
                .collect();
            let key = key.trim_end_matches('-').to_owned();
            i += key.len();
            keys.push(key);
        } else {
            i += 1;
        }
    }
    keys
}

/// The table that follows the first line starting with `after` (or the first table whose
/// header has `header_has`): header cells and rows of cells.
pub(crate) fn table(
    doc: &str,
    after: Option<&str>,
    header_has: &str,
) -> Option<(Vec<String>, Vec<Vec<String>>)> {
    let mut lines = doc.lines().peekable();
    if let Some(marker) = after {
        lines.find(|l| l.starts_with(marker))?;
    }
    let split = |l: &str| -> Vec<String> {
        l.trim()
            .trim_matches('|')
            .split(" | ")
            .map(|c| c.trim().to_owned())
            .collect()
    };
    let header = loop {
        let l = lines.next()?;
        if l.starts_with('|') && l.contains(header_has) {
            break split(l);
        }
    };
    lines.next(); // | --- |
    let rows = lines
        .take_while(|l| l.starts_with('|'))
        .map(split)
        .collect();
    Some((header, rows))
}

struct Checker<'a> {
    citations: &'a BTreeMap<String, Citation>,
    read: &'a dyn Fn(&Path) -> Option<String>,
    runs: HashMap<String, Result<Vec<Run>, String>>,
}

impl Checker<'_> {
    fn runs(&mut self, test: &str) -> Result<Vec<Run>, String> {
        if !self.runs.contains_key(test) {
            let r = runs_of(test, self.read);
            self.runs.insert(test.to_owned(), r);
        }
        self.runs[test].clone()
    }

    /// Why `key` does not back `fault` in `modes`, or None when it does.
    fn why_not(&mut self, key: &str, fault: &str, modes: &[&str]) -> Option<String> {
        let Some(citation) = self.citations.get(key) else {
            return Some(format!("{key} has no line in the citations block"));
        };
        if !citation.faults.iter().any(|f| f == fault) {
            return Some(format!(
                "{key} claims faults {:?}, not {fault}",
                citation.faults
            ));
        }
        let mut seen = Vec::new();
        for test in citation.tests.clone() {
            match self.runs(&test) {
                Err(e) => return Some(e),
                Ok(runs) => {
                    for run in runs {
                        if run.faults.contains(fault) && modes.iter().all(|m| run.modes.contains(m))
                        {
                            return None;
                        }
                        seen.push(format!(
                            "{test}: faults {:?} in modes {:?}",
                            run.faults, run.modes
                        ));
                    }
                }
            }
        }
        Some(format!(
            "no test of {key} makes {fault} in modes {modes:?} ({})",
            seen.join("; ")
        ))
    }
}

/// Checks every key's own line (its claimed faults and modes are made by one of its tests),
/// the backing table of docs/guarantees.md (fault and mode per cell) and README's fault table
/// (fault per row), and counts the backing table's cells.
pub(crate) fn check(
    doc: &str,
    readme: Option<&str>,
    read: &dyn Fn(&Path) -> Option<String>,
    pending: &[Pending],
) -> Report {
    let mut report = Report::default();
    let citations = match parse_citations(doc) {
        Ok(c) => c,
        Err(e) => {
            report.errors.push(e);
            return report;
        }
    };
    let mut checker = Checker {
        citations: &citations,
        read,
        runs: HashMap::new(),
    };
    let mut failures: Vec<(&str, String, &str, String, String)> = Vec::new();

    for (key, c) in &citations {
        if key.starts_with("A-") {
            continue;
        }
        // Every test a key names must exist, not only the one that backs a cell.
        for test in &c.tests {
            if let Err(e) = checker.runs(test) {
                failures.push(("citations", key.clone(), "-", key.clone(), e));
            }
        }
        let modes: Vec<&str> = c.modes.iter().map(String::as_str).collect();
        for fault in &c.faults {
            let fault = FAULTS.iter().find(|f| *f == fault).copied().unwrap_or("?");
            if let Some(why) = checker.why_not(key, fault, &modes) {
                failures.push(("citations", key.clone(), fault, key.clone(), why));
            }
        }
    }

    match table(doc, Some("### What backs each cell"), "| mode |") {
        None => report
            .errors
            .push("docs/guarantees.md: no backing table after `### What backs each cell`".into()),
        Some((header, rows)) => {
            for row in &rows {
                for (col, cell) in row.iter().enumerate().skip(1) {
                    let Some(fault) = header.get(col).and_then(|h| fault_of(h)) else {
                        report
                            .errors
                            .push(format!("backing table: column {col} names no fault"));
                        continue;
                    };
                    report.cells += 1;
                    let keys = keys_in(cell);
                    if keys.is_empty() {
                        if cell.trim() == "n/a" {
                            report.not_applicable += 1;
                        } else {
                            report.errors.push(format!(
                                "backing table, {} / {fault}: {cell:?} cites no key and is not n/a",
                                row[0]
                            ));
                        }
                        continue;
                    }
                    let modes = row_modes(&row[0], fault);
                    let mut evidence = 0;
                    let mut failed = false;
                    for key in &keys {
                        if key.starts_with("A-") {
                            if !citations.contains_key(key) && !doc.contains(&format!("**{key}**"))
                            {
                                report.errors.push(format!("{key} is not defined"));
                            }
                            continue;
                        }
                        evidence += 1;
                        if let Some(why) = checker.why_not(key, fault, &modes) {
                            failed = true;
                            failures.push(("guarantees", row[0].clone(), fault, key.clone(), why));
                        }
                    }
                    if evidence > 0 && failed {
                        report.partly += 1;
                    } else if evidence > 0 {
                        report.backed += 1;
                    } else {
                        report.argued += 1;
                    }
                }
            }
        }
    }

    if let Some(readme) = readme {
        // Every key README's tables cite is defined here (its own bold entry or a citations line).
        for header_has in ["backed by", "| primitive |"] {
            for row in table(readme, None, header_has)
                .map(|t| t.1)
                .unwrap_or_default()
            {
                for key in row.iter().flat_map(|cell| keys_in(cell)) {
                    if !citations.contains_key(&key) && !doc.contains(&format!("**{key}**")) {
                        report.errors.push(format!(
                            "README cites {key}, which docs/guarantees.md does not define"
                        ));
                    }
                }
            }
        }
        if let Some((header, rows)) = table(readme, None, "backed by") {
            let last = header.len() - 1;
            for row in &rows {
                let Some(fault) = fault_of(&row[0]) else {
                    report
                        .errors
                        .push(format!("README: row {:?} names no fault", row[0]));
                    continue;
                };
                for key in keys_in(&row[last]) {
                    if key.starts_with("A-") {
                        continue;
                    }
                    if let Some(why) = checker.why_not(&key, fault, &[]) {
                        failures.push(("README", row[0].clone(), fault, key, why));
                    }
                }
            }
        }
    }

    let mut used = vec![false; pending.len()];
    for (table, row, fault, key, why) in failures {
        let known = pending.iter().position(|(t, r, f, k, _)| {
            *t == table && row.starts_with(r) && *f == fault && *k == key
        });
        match known {
            Some(i) => used[i] = true,
            None => report
                .errors
                .push(format!("{table}, row {row:?}, {fault}: {why}")),
        }
    }
    for (p, used) in pending.iter().zip(used) {
        if !used {
            report.errors.push(format!(
                "pending entry {p:?} no longer fails: take it off the list"
            ));
        }
    }
    report
}

/// The numbers of the doc's `**Count**` paragraph: backed ("N of the"), cells ("N cells of the
/// table"), partly ("N partly"), argued only ("N rests on argument only"), n/a ("N are n/a").
pub(crate) fn stated_count(doc: &str) -> Option<[usize; 5]> {
    let start = doc.find("\n**Count**")?;
    let end = doc[start + 1..]
        .find("\n\n")
        .map_or(doc.len(), |e| start + 1 + e);
    let text = doc[start..end].replace('\n', " ");
    let before = |phrase: &str| -> Option<usize> {
        let head = &text[..text.find(phrase)?];
        let digits: String = head
            .chars()
            .rev()
            .take_while(char::is_ascii_digit)
            .collect::<String>()
            .chars()
            .rev()
            .collect();
        digits.parse().ok()
    };
    Some([
        before(" of the ")?,
        before(" cells of the table")?,
        before(" partly")?,
        before(" rests on argument only")?,
        before(" are n/a")?,
    ])
}

pub(crate) fn describe(report: &Report) -> String {
    let mut s = String::new();
    for e in &report.errors {
        let _ = writeln!(s, "- {e}");
    }
    s
}
