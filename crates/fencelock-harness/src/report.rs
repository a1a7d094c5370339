//! The text summary and the self-contained HTML timeline.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;

use crate::history::EventKind;
use crate::mode::{FaultKind, Mode};
use crate::run::{ModeRun, ModeSummary};

/// The text summary of one mode.
pub fn text(run: &ModeRun) -> String {
    let s = run.summary();
    let mut out = String::new();
    write_setup(&mut out, run, &s);
    write_liveness(&mut out, &s);
    write_fenced_record(&mut out, &s);
    write_counter(&mut out, &s);
    write_lock(&mut out, &s);
    write_family(&mut out, &s);
    if s.mode == Mode::Run {
        write_commands(&mut out, &s);
    }
    let _ = writeln!(out, "  verdict: {}", verdict(&s));
    write_examples(&mut out, &s);
    out
}

/// `kind count` pairs, comma-separated (empty when there are none).
fn tally(counts: &BTreeMap<String, u64>) -> String {
    let parts: Vec<String> = counts.iter().map(|(k, v)| format!("{k} {v}")).collect();
    parts.join(", ")
}

/// [`tally`], or `none`.
fn tally_or_none(counts: &BTreeMap<String, u64>) -> String {
    if counts.is_empty() {
        "none".into()
    } else {
        tally(counts)
    }
}

/// What ran: the mode, its nodes, clients and settings, the faults injected, staged and skipped.
fn write_setup(out: &mut String, run: &ModeRun, s: &ModeSummary) {
    let on = |b: bool| if b { "on" } else { "off" };
    let _ = writeln!(
        out,
        "mode {}: {} node(s), {} clients, fencing {}, quarantine {}, {}, ran {:.1} s",
        s.mode,
        s.nodes,
        s.clients,
        on(s.fencing),
        on(s.quarantine),
        ttls(run),
        s.seconds
    );
    let _ = writeln!(out, "  faults injected: {}", tally_or_none(&s.faults));
    if !s.staged_missed.is_empty() {
        let _ = writeln!(
            out,
            "  staged episodes whose holder never got the lock in time (the fault still ran, unstaged): {}",
            tally(&s.staged_missed)
        );
    }
    for (kind, why) in &s.skipped_faults {
        let _ = writeln!(out, "  skipped {kind}: {why}");
    }
}

/// Attempts, grants, failures and acquire latency.
fn write_liveness(out: &mut String, s: &ModeSummary) {
    let _ = writeln!(
        out,
        "  acquisitions: {} attempts, {} granted; failures: {}",
        s.liveness.attempts,
        s.liveness.grants,
        tally_or_none(&s.liveness.failures)
    );
    let _ = writeln!(
        out,
        "  acquire latency: p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
        s.liveness.latency_p50_ms, s.liveness.latency_p99_ms, s.liveness.latency_max_ms
    );
}

fn write_fenced_record(out: &mut String, s: &ModeSummary) {
    let _ = writeln!(
        out,
        "  fenced record ({}): {} writes committed, {} stale reads/writes rejected, {} stale accepted, {} superseded writes accepted, {} token-order, {} duplicate tokens, {} interleaved, {} lost updates",
        if s.fencing { "token checked" } else { "no token check" },
        s.fenced_writes,
        s.liveness.stale_rejected,
        s.stale_accepted,
        s.superseded_writes,
        s.token_order,
        s.duplicate_tokens,
        s.fenced_interleaved,
        s.fenced_lost_updates
    );
}

fn write_counter(out: &mut String, s: &ModeSummary) {
    let _ = writeln!(
        out,
        "  unfenced counter (lock only): {} writes, {} interleaved, {} stale reads, {} lost updates",
        s.counter_writes, s.counter_interleaved, s.counter_stale_reads, s.counter_lost_updates
    );
}

/// The lock's own findings: overlapping validity and grant order.
fn write_lock(out: &mut String, s: &ModeSummary) {
    let _ = writeln!(
        out,
        "  lock: {} grant(s) inside another client's validity ({} with no clock jump in progress); {} grant(s) with a token not above an earlier, ended grant's{}",
        s.overlapping_validity,
        s.exclusion_violations,
        s.grant_order,
        if s.grant_order_faults.is_empty() {
            String::new()
        } else {
            format!(" (faults around them: {})", tally(&s.grant_order_faults))
        }
    );
}

/// The semaphore's, the election's and the read-write lock's own lines, for their modes.
fn write_family(out: &mut String, s: &ModeSummary) {
    if let Some(n) = s.permits {
        let _ = writeln!(
            out,
            "  semaphore: N = {n}; at most {} holders at once; {} moment(s) with more than N holders ({} with no clock jump in progress)",
            s.most_holders, s.too_many_holders, s.too_many_holders_outside_clock_jumps
        );
    }
    if s.mode.election() {
        let _ = writeln!(
            out,
            "  election: {} term(s) held twice or not above an earlier, ended leader's",
            s.term_order
        );
    }
    if s.mode == Mode::RedlockRwlock {
        let _ = writeln!(
            out,
            "  read-write lock: {} of the grants were read locks, at most {} readers within their validity at once (a writer beside anyone counts above as a grant inside another client's validity)",
            s.liveness.shared_grants, s.liveness.most_readers
        );
    }
}

/// The `run` mode: what the commands' processes did.
fn write_commands(out: &mut String, s: &ModeSummary) {
    let c = &s.commands;
    let exits: Vec<String> = c.exits.iter().map(|(k, v)| format!("{k}: {v}")).collect();
    let _ = writeln!(
        out,
        "  run: {} commands ran; processes {}, {} of them killed before their end; {} supervisor(s) killed with SIGKILL, {} while their command ran; fencelock run exits: {}",
        c.holders,
        tally(&c.processes),
        c.killed,
        c.supervisors_killed,
        c.supervisors_killed_holding,
        exits.join(", ")
    );
    let _ = writeln!(
        out,
        "  processes of two holders at once: {}",
        s.process_overlaps
    );
}

/// Up to three violations, as examples.
fn write_examples(out: &mut String, s: &ModeSummary) {
    for v in s.examples.iter().take(3) {
        let _ = writeln!(
            out,
            "    e.g. {:?} at {:.3} s: {}",
            v.kind,
            v.mono_ns as f64 / 1e9,
            v.detail
        );
    }
}

/// `ttl 1s`, or with clients of different TTLs `ttls 500ms (clients 0, 2), 3s (client 1)`.
fn ttls(run: &ModeRun) -> String {
    let mut by_ttl: std::collections::BTreeMap<std::time::Duration, Vec<String>> =
        std::collections::BTreeMap::new();
    for (id, t) in run.client_ttls.iter().enumerate() {
        by_ttl.entry(*t).or_default().push(id.to_string());
    }
    if by_ttl.len() <= 1 {
        return format!("ttl {:?}", run.ttl);
    }
    let parts: Vec<String> = by_ttl
        .iter()
        .map(|(t, ids)| {
            let who = if ids.len() == 1 { "client" } else { "clients" };
            format!("{t:?} ({who} {})", ids.join(", "))
        })
        .collect();
    format!("ttls {}", parts.join(", "))
}

/// The verdict line. A fenced mode passes only when its tokens followed the order of the grants,
/// the fenced record took no stale, superseded or duplicate-token row and lost nothing, and the
/// faults that make this meaningful fired.
pub fn verdict(s: &ModeSummary) -> String {
    if s.mode == Mode::Run {
        return run_verdict(s);
    }
    if s.quarantine && s.exclusion_violations > 0 {
        return exclusion_verdict(s);
    }
    if !s.fencing && s.quarantine {
        return exclusion_safe_verdict(s);
    }
    if !s.fencing {
        return unfenced_verdict(s);
    }
    let why = fenced_violations(s);
    if !why.is_empty() {
        return fenced_unsafe_verdict(s, &why);
    }
    if !s.uncovered_faults.is_empty() {
        return not_shown(s);
    }
    "SAFE: tokens followed the order of the grants, and the fenced storage accepted no stale or superseded write".to_owned()
}

/// A clean history without the faults that make it meaningful.
fn not_shown(s: &ModeSummary) -> String {
    format!(
        "NOT SHOWN: no {} fired, so this clean history proves little (run longer or add the fault kinds)",
        s.uncovered_faults.join(", no ")
    )
}

/// The `run` mode: whether the commands of two holders ever ran at once.
fn run_verdict(s: &ModeSummary) -> String {
    if s.process_overlaps > 0 {
        format!(
            "UNSAFE: {} time(s) a process of one holder's command ran after another holder's command had started",
            s.process_overlaps
        )
    } else if !s.uncovered_faults.is_empty() {
        not_shown(s)
    } else {
        "SAFE: no process of one holder's command (background and setsid ones included) ran once another holder's command had started".to_owned()
    }
}

/// A mode with restart quarantine that granted inside another client's validity, followed by
/// whatever else the run got wrong.
fn exclusion_verdict(s: &ModeSummary) -> String {
    format!(
        "UNSAFE: mutual exclusion: {} grant(s) inside another client's validity with no clock jump in progress (restart quarantine must keep a restarted node out until every lock it may have forgotten has expired){}",
        s.exclusion_violations,
        match verdict(&ModeSummary {
            exclusion_violations: 0,
            ..s.clone()
        }) {
            rest if rest.starts_with("UNSAFE: ") => format!("; {}", &rest["UNSAFE: ".len()..]),
            _ => String::new(),
        }
    )
}

/// A mode with restart quarantine and without fencing (`redlock-default`): what it claims is
/// exclusion outside clock jumps, which held; the record's violations (client pauses past the
/// TTL, which only fencing covers) are expected.
fn exclusion_safe_verdict(s: &ModeSummary) -> String {
    format!(
        "SAFE: no grant inside another client's validity outside a clock jump (restart quarantine); {}",
        unfenced_verdict(s)
    )
}

/// A mode without fencing: the fenced record's violations are expected, not a failure.
fn unfenced_verdict(s: &ModeSummary) -> String {
    if s.fenced_record_violations == 0 {
        "no violation found on the fenced record in this run (no fencing)".to_owned()
    } else {
        format!(
            "VIOLATIONS on the fenced record: {} (expected without fencing)",
            s.fenced_record_violations
        )
    }
}

/// What a fenced mode got wrong: token order, duplicate tokens, and the fenced record's harms.
fn fenced_violations(s: &ModeSummary) -> Vec<String> {
    let mut why = Vec::new();
    if s.grant_order > 0 {
        why.push(format!(
            "token order: {} grant(s) got a token not above the token of a grant that had ended before them",
            s.grant_order
        ));
    }
    if s.duplicate_tokens > 0 {
        why.push(format!("{} duplicate token(s)", s.duplicate_tokens));
    }
    let data = [
        (s.stale_accepted, "stale row(s) accepted"),
        (s.superseded_writes, "superseded write(s) accepted"),
        (s.token_order, "write(s) out of token order"),
        (s.fenced_interleaved, "interleaving(s)"),
    ];
    for (n, what) in data {
        if n > 0 {
            why.push(format!("{n} {what}"));
        }
    }
    if s.fenced_lost_updates != 0 {
        why.push(format!("{} update(s) lost", s.fenced_lost_updates));
    }
    why
}

/// The UNSAFE verdict of a fenced mode, and for grant-order violations which of the table's
/// cells this is.
fn fenced_unsafe_verdict(s: &ModeSummary, why: &[String]) -> String {
    let mut out = format!("UNSAFE: {}", why.join("; "));
    if s.grant_order > 0 {
        // Say which of the table's cells this is, without softening the verdict: when every
        // violation fell within an episode of a kind under which the guarantee is not
        // claimed, name it.
        let unclaimed = ["restart-nopersist", "clock-forward"];
        if let Some(kind) = unclaimed
            .iter()
            .find(|k| s.grant_order_faults.get(**k) == Some(&(s.grant_order as u64)))
        {
            let _ = write!(
                out,
                " (each within a {kind} episode: docs/guarantees.md does not claim token order under a restart without persistence or a forward clock jump)"
            );
        }
        if s.fenced_record_violations == 0 {
            out.push_str(
                "; the fenced record itself was not harmed: the storage refused the newer holders, whose work was lost instead",
            );
        }
    }
    out
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

fn fault_color(kind: FaultKind) -> &'static str {
    match kind {
        FaultKind::Kill => "#7f7f7f",
        FaultKind::KillLeader => "#393b79",
        FaultKind::RestartNopersist => "#d62728",
        FaultKind::RestartPersist => "#9467bd",
        FaultKind::PauseNode => "#1f77b4",
        FaultKind::PauseLeader => "#e377c2",
        FaultKind::PauseClient => "#17becf",
        FaultKind::ClockForward => "#ff7f0e",
        FaultKind::ClockBackward => "#bcbd22",
        FaultKind::Latency => "#8c564b",
        FaultKind::KillSupervisor => "#000000",
        FaultKind::RestartTwoNopersist => "#8b0000",
        FaultKind::Flushall => "#ff1493",
        FaultKind::TerminateBackend => "#9467bd",
        FaultKind::Failover => "#2ca02c",
    }
}

/// The timeline of one mode, as SVG.
pub fn svg(run: &ModeRun) -> String {
    let t = Timeline::of(run);
    let mut o = String::new();
    let _ = write!(
        o,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{:.0}" height="{:.0}" font-family="sans-serif" font-size="11">"#,
        t.width, t.height
    );
    t.draw_axis(&mut o);
    t.draw_lane_labels(&mut o, run);
    t.draw_held(&mut o, run);
    t.draw_faults(&mut o, run);
    t.draw_rejections(&mut o, run);
    t.draw_violations(&mut o, run);
    o.push_str("</svg>");
    o
}

/// The timeline's geometry: one lane per client, then one per node, time along x.
#[derive(Debug)]
struct Timeline {
    secs: f64,
    px_per_s: f64,
    left: f64,
    lane: f64,
    top: f64,
    clients: usize,
    width: f64,
    height: f64,
}

/// A held interval: granted, validity deadline, release started, token.
type Held = (u64, u64, Option<u64>, Option<u64>);

impl Timeline {
    fn of(run: &ModeRun) -> Timeline {
        let secs = run.elapsed.as_secs_f64().max(1.0);
        let px_per_s = (1400.0 / secs).clamp(20.0, 200.0);
        let left = 120.0;
        let lane = 26.0;
        let top = 24.0;
        let lanes = run.clients as usize + run.nodes;
        Timeline {
            secs,
            px_per_s,
            left,
            lane,
            top,
            clients: run.clients as usize,
            width: left + secs * px_per_s + 20.0,
            height: top + lanes as f64 * lane + 30.0,
        }
    }

    fn x(&self, ns: u64) -> f64 {
        self.left + ns as f64 / 1e9 * self.px_per_s
    }

    fn client_y(&self, c: u32) -> f64 {
        self.top + c as f64 * self.lane
    }

    fn node_y(&self, n: usize) -> f64 {
        self.top + (self.clients + n) as f64 * self.lane
    }

    /// The time axis: a grid line and a label every 1, 5, 10 or 60 s.
    fn draw_axis(&self, o: &mut String) {
        let (top, height) = (self.top, self.height);
        let step = if self.secs > 600.0 {
            60
        } else if self.secs > 120.0 {
            10
        } else if self.secs > 20.0 {
            5
        } else {
            1
        };
        let mut t = 0;
        while (t as f64) <= self.secs {
            let xx = self.left + t as f64 * self.px_per_s;
            let _ = write!(
                o,
                r##"<line x1="{xx:.1}" y1="{top}" x2="{xx:.1}" y2="{:.1}" stroke="#eee"/><text x="{xx:.1}" y="{:.1}" fill="#666">{t}s</text>"##,
                height - 24.0,
                height - 10.0
            );
            t += step;
        }
    }

    fn draw_lane_labels(&self, o: &mut String, run: &ModeRun) {
        for c in 0..run.clients {
            let _ = write!(
                o,
                r#"<text x="4" y="{:.1}">client {c}</text>"#,
                self.client_y(c) + 16.0
            );
        }
        let server = if run.mode.consensus() {
            "member"
        } else {
            "node"
        };
        for n in 0..run.nodes {
            let _ = write!(
                o,
                r#"<text x="4" y="{:.1}">{server} {n}</text>"#,
                self.node_y(n) + 16.0
            );
        }
    }

    /// Held intervals: green while valid, red once held past the validity deadline.
    fn draw_held(&self, o: &mut String, run: &ModeRun) {
        let end_ns = run.elapsed.as_nanos() as u64;
        for (&(c, acq), &(start, deadline, release, token)) in &held_intervals(run) {
            let end = release.unwrap_or(end_ns);
            let y = self.client_y(c) + 4.0;
            let valid_end = end.min(deadline);
            let tok = token.map_or(String::new(), |t| format!(", token {t}"));
            let _ = write!(
                o,
                r##"<rect x="{:.2}" y="{y:.1}" width="{:.2}" height="16" fill="#2ca02c"><title>client {c} acquisition {acq}{tok}: held {:.3}-{:.3} s</title></rect>"##,
                self.x(start),
                (self.x(valid_end) - self.x(start)).max(0.6),
                start as f64 / 1e9,
                end as f64 / 1e9
            );
            if end > deadline {
                let _ = write!(
                    o,
                    r##"<rect x="{:.2}" y="{y:.1}" width="{:.2}" height="16" fill="#f4a6a6"><title>client {c} acquisition {acq}: still acting {:.3} s past its validity</title></rect>"##,
                    self.x(deadline),
                    (self.x(end) - self.x(deadline)).max(0.6),
                    (end - deadline) as f64 / 1e9
                );
            }
        }
    }

    /// Faults: a bar on each node lane they touched, a thin one under each client lane.
    fn draw_faults(&self, o: &mut String, run: &ModeRun) {
        for f in &run.faults {
            let color = fault_color(f.kind);
            let w = (self.x(f.end_ns) - self.x(f.start_ns)).max(2.0);
            for &n in &f.nodes {
                let _ = write!(
                    o,
                    r#"<rect x="{:.2}" y="{:.1}" width="{w:.2}" height="16" fill="{color}" opacity="0.8"><title>{}: {}</title></rect>"#,
                    self.x(f.start_ns),
                    self.node_y(n) + 4.0,
                    f.kind,
                    esc(&f.detail)
                );
            }
            for &c in &f.clients {
                let _ = write!(
                    o,
                    r#"<rect x="{:.2}" y="{:.1}" width="{w:.2}" height="4" fill="{color}"><title>{}: {}</title></rect>"#,
                    self.x(f.start_ns),
                    self.client_y(c) + 21.0,
                    f.kind,
                    esc(&f.detail)
                );
            }
        }
    }

    /// Rejected stale reads and writes: the fence doing its job.
    fn draw_rejections(&self, o: &mut String, run: &ModeRun) {
        for e in &run.history.events {
            let what = match &e.kind {
                EventKind::WriteRejected {
                    presented, current, ..
                } => format!("write rejected: token {presented} < {current}"),
                EventKind::ReadRejected {
                    presented, current, ..
                } => format!("read rejected: token {presented} < {current}"),
                _ => continue,
            };
            let (xx, y) = (self.x(e.mono_ns), self.client_y(e.client) + 2.0);
            let _ = write!(
                o,
                r##"<path d="M{:.2} {y:.1} l5 9 l-10 0 z" fill="#ff7f0e" stroke="#000" stroke-width="0.5"><title>client {}: {what}</title></path>"##,
                xx, e.client
            );
        }
    }

    /// Violations: a red line across the lanes, a dot on each client involved.
    fn draw_violations(&self, o: &mut String, run: &ModeRun) {
        let (top, height) = (self.top, self.height);
        for v in run.findings.all() {
            let xx = self.x(v.mono_ns);
            let _ = write!(
                o,
                r##"<line x1="{xx:.2}" y1="{top}" x2="{xx:.2}" y2="{:.1}" stroke="#d00" stroke-width="1" opacity="0.6"><title>{:?}: {}</title></line>"##,
                height - 24.0,
                v.kind,
                esc(&v.detail)
            );
            for &c in &v.clients {
                let _ = write!(
                    o,
                    r##"<circle cx="{xx:.2}" cy="{:.1}" r="4" fill="#d00"><title>{:?}: {}</title></circle>"##,
                    self.client_y(c) + 12.0,
                    v.kind,
                    esc(&v.detail)
                );
            }
        }
    }
}

/// Each acquisition's held interval, by (client, acquisition).
fn held_intervals(run: &ModeRun) -> HashMap<(u32, u64), Held> {
    let mut held: HashMap<(u32, u64), Held> = HashMap::new();
    for e in &run.history.events {
        let key = (e.client, e.acq);
        match &e.kind {
            EventKind::AcquireOk {
                token, deadline_ns, ..
            } => {
                held.insert(key, (e.mono_ns, *deadline_ns, None, *token));
            }
            EventKind::ReleaseStart => {
                if let Some(h) = held.get_mut(&key) {
                    h.2 = Some(e.mono_ns);
                }
            }
            _ => {}
        }
    }
    held
}

/// The self-contained HTML report of every mode run.
pub fn html(runs: &[ModeRun], command: &str) -> String {
    let mut o = String::from(
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>fencelock harness report</title>\
         <style>body{font-family:sans-serif;margin:20px}pre{background:#f6f6f6;padding:8px}\
         .scroll{overflow-x:auto;border:1px solid #ddd}.legend span{display:inline-block;margin-right:12px}\
         .sw{display:inline-block;width:12px;height:12px;margin-right:4px;vertical-align:middle}</style></head><body>",
    );
    let _ = write!(
        o,
        "<h1>fencelock harness</h1><p><code>{}</code></p>",
        esc(command)
    );
    o.push_str("<p class=\"legend\">");
    let mut legend = vec![
        ("#2ca02c", "lock held, within validity".to_owned()),
        ("#f4a6a6", "still acting past validity".to_owned()),
        (
            "#ff7f0e",
            "&#9650; stale read/write rejected by the fence".to_owned(),
        ),
        ("#d00", "&#9679; violation".to_owned()),
    ];
    for k in FaultKind::ALL {
        legend.push((fault_color(k), k.name().to_owned()));
    }
    for (color, label) in legend {
        let _ = write!(
            o,
            "<span><i class=\"sw\" style=\"background:{color}\"></i>{label}</span>"
        );
    }
    o.push_str("</p>");
    for run in runs {
        let _ = write!(
            o,
            "<h2>{}</h2><pre>{}</pre><div class=\"scroll\">{}</div>",
            run.mode,
            esc(&text(run)),
            svg(run)
        );
    }
    o.push_str("</body></html>\n");
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A clean fenced summary, then `patch` applied to it.
    fn summary(patch: serde_json::Value) -> ModeSummary {
        let mut v = serde_json::json!({
            "mode": "redlock-fenced", "nodes": 5, "clients": 3, "fencing": true,
            "quarantine": false, "ttl_ms": 1000, "seconds": 1.0, "faults": {},
            "skipped_faults": {}, "attempts": 10, "grants": 10, "failures": {},
            "latency_p50_ms": 1.0, "latency_p99_ms": 1.0, "latency_max_ms": 1.0,
            "stale_rejected": 0, "releases_lost": 0, "fenced_writes": 10, "stale_accepted": 0,
            "token_order": 0, "duplicate_tokens": 0, "fenced_interleaved": 0,
            "fenced_lost_updates": 0, "counter_writes": 10, "counter_stale_reads": 0,
            "counter_lost_updates": 0, "overlapping_validity": 0, "grant_order": 0,
            "grant_order_faults": {}, "superseded_writes": 0, "counter_interleaved": 0,
            "fenced_record_violations": 0, "fenced_failures": 0, "uncovered_faults": [],
            "examples": []
        });
        for (k, x) in patch.as_object().unwrap() {
            v[k] = x.clone();
        }
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn verdicts_of_fenced_runs() {
        assert!(verdict(&summary(serde_json::json!({}))).starts_with("SAFE"));
        let missing = verdict(&summary(
            serde_json::json!({"uncovered_faults": ["clock jump"]}),
        ));
        assert!(missing.starts_with("NOT SHOWN: no clock jump"), "{missing}");
        // The 10,000-grant run's case: inversions only within restart-nopersist, data intact.
        let restart = verdict(&summary(serde_json::json!({
            "grant_order": 5, "fenced_failures": 5,
            "grant_order_faults": {"restart-nopersist": 5, "latency": 1}
        })));
        assert!(
            restart.starts_with("UNSAFE: token order: 5 grant(s)"),
            "{restart}"
        );
        assert!(
            restart.contains("within a restart-nopersist episode"),
            "{restart}"
        );
        assert!(restart.contains("not harmed"), "{restart}");
        // The mutant's case: inversions everywhere, some outside any unclaimed kind's episode.
        let mutant = verdict(&summary(serde_json::json!({
            "grant_order": 977, "duplicate_tokens": 11, "fenced_record_violations": 11,
            "fenced_failures": 988,
            "grant_order_faults": {"restart-nopersist": 800, "clock-forward": 909, "none": 6}
        })));
        assert!(mutant.starts_with("UNSAFE: token order: 977"), "{mutant}");
        assert!(mutant.contains("11 duplicate token(s)"), "{mutant}");
        assert!(!mutant.contains("episode"), "{mutant}");
        // Harmed data is named even when tokens were in order.
        let stale = verdict(&summary(serde_json::json!({
            "superseded_writes": 1, "fenced_record_violations": 1, "fenced_failures": 1
        })));
        assert_eq!(stale, "UNSAFE: 1 superseded write(s) accepted");
    }

    #[test]
    fn a_quarantine_run_fails_on_an_overlap_no_clock_jump_explains() {
        let overlap = verdict(&summary(serde_json::json!({
            "quarantine": true, "overlapping_validity": 3, "exclusion_violations": 1
        })));
        assert!(
            overlap.starts_with("UNSAFE: mutual exclusion: 1 grant(s)"),
            "{overlap}"
        );
        // Overlaps within clock jumps alone do not fail it, nor any overlap without quarantine.
        let jumps = verdict(&summary(serde_json::json!({
            "quarantine": true, "overlapping_validity": 3
        })));
        assert!(jumps.starts_with("SAFE"), "{jumps}");
        let fenced = verdict(&summary(serde_json::json!({
            "overlapping_validity": 3, "exclusion_violations": 3
        })));
        assert!(fenced.starts_with("SAFE"), "{fenced}");
        // The library's defaults (quarantine, no fencing): exclusion is the claim; the record's
        // harms from client pauses are expected, an overlap outside clock jumps is not.
        let default = |extra: serde_json::Value| {
            let mut v = serde_json::json!({
                "mode": "redlock-default", "fencing": false, "quarantine": true,
                "fenced_record_violations": 4
            });
            v.as_object_mut()
                .unwrap()
                .extend(extra.as_object().unwrap().clone());
            verdict(&summary(v))
        };
        let held = default(serde_json::json!({}));
        assert!(held.starts_with("SAFE: no grant inside"), "{held}");
        assert!(held.contains("expected without fencing"), "{held}");
        let broken = default(serde_json::json!({"exclusion_violations": 44}));
        assert!(
            broken.starts_with("UNSAFE: mutual exclusion: 44 grant(s)"),
            "{broken}"
        );
    }
}
