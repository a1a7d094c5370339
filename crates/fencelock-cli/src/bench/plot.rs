//! `--plot FILE.svg`: the latency distribution of each series as a cumulative curve (the
//! fraction of cycles at or below each latency, latency on a log scale), hand-written SVG.

use std::fmt::Write as _;
use std::time::Duration;

/// One curve: a name and its samples, sorted ascending.
#[derive(Debug)]
pub(crate) struct Series<'a> {
    pub(crate) name: &'a str,
    pub(crate) sorted: &'a [Duration],
}

const WIDTH: f64 = 760.0;
const HEIGHT: f64 = 440.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 20.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 60.0;
const COLORS: [&str; 4] = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd"];
/// At most this many points per curve: enough for the eye, small files for 10,000 samples.
const MAX_POINTS: usize = 400;

/// The SVG document for `series` under `title`.
pub(crate) fn svg(title: &str, series: &[Series<'_>]) -> String {
    let all = series.iter().flat_map(|s| s.sorted.iter());
    let lo = all
        .clone()
        .map(|d| d.as_secs_f64() * 1e6)
        .fold(f64::INFINITY, f64::min)
        .max(1.0);
    let hi = all
        .map(|d| d.as_secs_f64() * 1e6)
        .fold(0.0f64, f64::max)
        .max(lo * 10.0);
    // No samples at all: an empty 1 µs - 10 µs frame rather than infinite bounds.
    let (lo, hi) = if lo.is_finite() && hi.is_finite() {
        (lo, hi)
    } else {
        (1.0, 10.0)
    };
    // Whole decades, so that the ticks fall on 1, 10, 100 ... µs.
    let (dlo, dhi) = (lo.log10().floor(), hi.log10().ceil());
    let pw = WIDTH - LEFT - RIGHT;
    let ph = HEIGHT - TOP - BOTTOM;
    let x = |us: f64| LEFT + (us.max(1.0).log10() - dlo) / (dhi - dlo) * pw;
    let y = |frac: f64| TOP + (1.0 - frac) * ph;

    let mut out = String::new();
    let _ = writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(out, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        out,
        r#"<text x="{}" y="22" text-anchor="middle" font-size="15">{}</text>"#,
        WIDTH / 2.0,
        escape(title)
    );
    // Grid and ticks.
    let mut decade = dlo;
    while decade <= dhi + 1e-9 {
        let us = 10f64.powf(decade);
        let px = x(us);
        let _ = writeln!(
            out,
            r##"<line x1="{px:.1}" y1="{TOP}" x2="{px:.1}" y2="{:.1}" stroke="#ddd"/><text x="{px:.1}" y="{:.1}" text-anchor="middle">{}</text>"##,
            TOP + ph,
            TOP + ph + 16.0,
            tick_label(us)
        );
        decade += 1.0;
    }
    for q in [0.0, 0.25, 0.5, 0.75, 0.9, 0.99, 1.0] {
        let py = y(q);
        let _ = writeln!(
            out,
            r##"<line x1="{LEFT}" y1="{py:.1}" x2="{:.1}" y2="{py:.1}" stroke="#eee"/><text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"##,
            LEFT + pw,
            LEFT - 6.0,
            py + 4.0,
            format_args!("p{}", (q * 100.0).round())
        );
    }
    let _ = writeln!(
        out,
        r##"<rect x="{LEFT}" y="{TOP}" width="{pw}" height="{ph}" fill="none" stroke="#444"/>"##
    );
    let _ = writeln!(
        out,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">latency (log scale)</text>"#,
        LEFT + pw / 2.0,
        HEIGHT - 18.0
    );
    let _ = writeln!(
        out,
        r#"<text x="16" y="{:.1}" text-anchor="middle" transform="rotate(-90 16 {:.1})">fraction of cycles at or below</text>"#,
        TOP + ph / 2.0,
        TOP + ph / 2.0
    );
    // Curves and legend.
    for (i, s) in series.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let n = s.sorted.len();
        if n > 0 {
            let step = n.div_ceil(MAX_POINTS).max(1);
            let mut points = String::new();
            let mut k = 0;
            while k < n {
                let us = s.sorted[k].as_secs_f64() * 1e6;
                let _ = write!(points, "{:.1},{:.1} ", x(us), y((k + 1) as f64 / n as f64));
                k = if k + step >= n && k != n - 1 {
                    n - 1
                } else {
                    k + step
                };
            }
            let _ = writeln!(
                out,
                r#"<polyline fill="none" stroke="{color}" stroke-width="2" points="{}"/>"#,
                points.trim_end()
            );
        }
        let ly = TOP + 16.0 + 18.0 * i as f64;
        let _ = writeln!(
            out,
            r#"<line x1="{:.1}" y1="{ly:.1}" x2="{:.1}" y2="{ly:.1}" stroke="{color}" stroke-width="3"/><text x="{:.1}" y="{:.1}">{} ({n})</text>"#,
            LEFT + 12.0,
            LEFT + 36.0,
            LEFT + 42.0,
            ly + 4.0,
            escape(s.name)
        );
    }
    out.push_str("</svg>\n");
    out
}

fn tick_label(us: f64) -> String {
    if us >= 1e6 {
        format!("{}s", us / 1e6)
    } else if us >= 1e3 {
        format!("{}ms", us / 1e3)
    } else {
        format!("{us}µs")
    }
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_plot_is_one_svg_with_a_curve_per_series() {
        let a: Vec<Duration> = (1..=1000).map(Duration::from_micros).collect();
        let b = vec![Duration::from_millis(2)];
        let doc = svg(
            "seq <5 nodes>",
            &[
                Series {
                    name: "fencelock",
                    sorted: &a,
                },
                Series {
                    name: "raw",
                    sorted: &b,
                },
            ],
        );
        assert!(doc.starts_with("<svg"));
        assert!(doc.trim_end().ends_with("</svg>"));
        assert_eq!(doc.matches("<polyline").count(), 2);
        assert!(doc.contains("seq &lt;5 nodes&gt;"));
        // Downsampled, but the last sample (the max) is always drawn.
        let first = doc.lines().find(|l| l.starts_with("<polyline")).unwrap();
        assert!(first.matches(',').count() <= MAX_POINTS + 1);
    }

    #[test]
    fn empty_series_do_not_break_the_plot() {
        let doc = svg(
            "x",
            &[Series {
                name: "none",
                sorted: &[],
            }],
        );
        assert!(doc.contains("none (0)"));
    }
}
