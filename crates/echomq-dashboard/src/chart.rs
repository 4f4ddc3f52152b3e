//! The history charts of a queue's page: completed, failed and wait time
//! over 1 h / 24 h / 7 d ([`echomq::Queue::history`]), drawn here as SVG
//! with their axes (no script draws them; the page's script only fetches
//! the page again to refresh them).

use std::fmt::Write as _;

use echomq::admin::{Bucket, Span};

use crate::html::{escape, time};

// The drawing's frame: the plot inside the margins for the axis labels.
const W: f64 = 640.0;
const H: f64 = 170.0;
const LEFT: f64 = 56.0;
const RIGHT: f64 = 8.0;
const TOP: f64 = 10.0;
const BOTTOM: f64 = 24.0;
/// Time labels on the x axis.
const X_TICKS: usize = 5;

/// One series of a chart: its class (its colour) and its values per bucket.
struct Series<'a> {
    class: &'a str,
    label: &'a str,
    values: Vec<u64>,
}

/// The three charts of `buckets` over `span`.
pub(crate) fn charts(span: Span, buckets: &[Bucket]) -> String {
    let per = match span {
        Span::Hour => "per minute",
        Span::Day => "per 15 minutes",
        _ => "per hour",
    };
    let count = |f: fn(&Bucket) -> u64| buckets.iter().map(f).collect::<Vec<_>>();
    let mut out = String::new();
    out.push_str(&chart(
        span,
        buckets,
        "completed",
        &format!("completed, {per}"),
        &[Series {
            class: "completed",
            label: "completed",
            values: count(|b| b.completed),
        }],
        Unit::Jobs,
    ));
    out.push_str(&chart(
        span,
        buckets,
        "failed",
        &format!("failed for good and retried, {per}"),
        &[
            Series {
                class: "failed",
                label: "failed",
                values: count(|b| b.failed),
            },
            Series {
                class: "retried",
                label: "retried",
                values: count(|b| b.retried),
            },
        ],
        Unit::Jobs,
    ));
    out.push_str(&chart(
        span,
        buckets,
        "wait",
        &format!("mean wait from enqueue to start, {per}"),
        &[Series {
            class: "wait",
            label: "mean wait",
            values: count(|b| b.mean_wait_ms().unwrap_or(0)),
        }],
        Unit::Ms,
    ));
    out
}

#[derive(Clone, Copy)]
enum Unit {
    Jobs,
    Ms,
}

impl Unit {
    fn label(self, v: u64) -> String {
        match self {
            Unit::Jobs => v.to_string(),
            Unit::Ms if v >= 60_000 => format!("{} min", trim(v as f64 / 60_000.0)),
            Unit::Ms if v >= 1_000 => format!("{} s", trim(v as f64 / 1_000.0)),
            Unit::Ms => format!("{v} ms"),
        }
    }
}

/// A value with at most one decimal, without a trailing `.0`.
fn trim(v: f64) -> String {
    let s = format!("{v:.1}");
    s.strip_suffix(".0").map(str::to_owned).unwrap_or(s)
}

/// The smallest 1, 2 or 5 times a power of ten at or above `v` (at least 1):
/// the top of the value axis.
fn nice_max(v: u64) -> u64 {
    let mut p = 1_u64;
    loop {
        for m in [1, 2, 5] {
            if let Some(top) = p.checked_mul(m)
                && top >= v
            {
                return top;
            }
        }
        match p.checked_mul(10) {
            Some(n) => p = n,
            None => return u64::MAX,
        }
    }
}

/// A bucket's start as an x-axis label: the time of day for 1 h and 24 h,
/// the date and hour for 7 d (UTC, as every time of the dashboard).
fn tick(span: Span, ms: u64) -> String {
    let t = time(ms); // "YYYY-MM-DD HH:MM:SS.mmm UTC"
    match span {
        Span::Week => format!("{} {}h", t.get(5..10).unwrap_or(""), t.get(11..13).unwrap_or("")),
        _ => t.get(11..16).unwrap_or("").to_owned(),
    }
}

fn chart(span: Span, buckets: &[Bucket], id: &str, title: &str, series: &[Series<'_>], unit: Unit) -> String {
    let n = buckets.len().max(1);
    let top = nice_max(series.iter().flat_map(|s| s.values.iter().copied()).max().unwrap_or(0));
    let (pw, ph) = (W - LEFT - RIGHT, H - TOP - BOTTOM);
    let x = |i: usize| LEFT + pw * i as f64 / n as f64;
    let y = |v: u64| TOP + ph - ph * (v as f64 / top as f64);
    let totals: Vec<String> = series
        .iter()
        .map(|s| {
            let sum: u64 = s.values.iter().sum();
            match unit {
                Unit::Jobs => format!("{sum} {}", s.label),
                Unit::Ms => {
                    let waits: u64 = buckets.iter().map(|b| b.waited).sum();
                    let all: u64 = buckets.iter().map(|b| b.wait_ms).sum();
                    match all.checked_div(waits) {
                        Some(mean) => format!("{} over {}, {waits} jobs started", unit.label(mean), span.as_str()),
                        None => "no job started".to_owned(),
                    }
                }
            }
        })
        .collect();
    let summary = format!("{title}: {}", totals.join(", "));
    let mut svg = String::new();
    let _ = write!(
        svg,
        "<figure class=\"history\" data-chart=\"{id}\"><figcaption>{t} <span class=\"total\">{sum}</span></figcaption>\
         <svg class=\"chart\" viewBox=\"0 0 {W} {H}\" role=\"img\" aria-label=\"{label}\" data-max=\"{top}\" data-buckets=\"{n}\">\
         <title>{label}</title>",
        t = escape(title),
        sum = escape(&totals.join(", ")),
        label = escape(&summary),
    );
    // The value axis: 0, half and the top, with grid lines.
    let mut marks = vec![0, top / 2, top];
    marks.dedup();
    for v in marks {
        let _ = write!(
            svg,
            "<line class=\"grid\" x1=\"{LEFT}\" x2=\"{x2}\" y1=\"{yy:.1}\" y2=\"{yy:.1}\"/>\
             <text class=\"axis y\" x=\"{lx}\" y=\"{ty:.1}\" text-anchor=\"end\">{l}</text>",
            x2 = W - RIGHT,
            yy = y(v),
            lx = LEFT - 6.0,
            ty = y(v) + 4.0,
            l = escape(&unit.label(v)),
        );
    }
    // The time axis: a label at evenly spaced buckets, the last one "now".
    let _ = write!(
        svg,
        "<line class=\"axis\" x1=\"{LEFT}\" x2=\"{x2}\" y1=\"{b:.1}\" y2=\"{b:.1}\"/>",
        x2 = W - RIGHT,
        b = TOP + ph
    );
    for k in 0..X_TICKS {
        let i = k * (n - 1) / (X_TICKS - 1);
        let Some(b) = buckets.get(i) else { continue };
        let anchor = match k {
            0 => "start",
            k if k == X_TICKS - 1 => "end",
            _ => "middle",
        };
        let tx = if k == X_TICKS - 1 { x(n) } else { x(i) };
        let _ = write!(
            svg,
            "<text class=\"axis x\" x=\"{tx:.1}\" y=\"{ty}\" text-anchor=\"{anchor}\">{l}</text>",
            ty = H - 6.0,
            l = escape(&tick(span, b.start_ms)),
        );
    }
    // Counts as bars side by side in their bucket; the wait as a line.
    let slot = pw / n as f64;
    for (si, s) in series.iter().enumerate() {
        match unit {
            Unit::Jobs => {
                let bw = (slot * 0.8 / series.len() as f64).max(0.5);
                for (i, v) in s.values.iter().enumerate().filter(|(_, v)| **v > 0) {
                    let bx = x(i) + slot * 0.1 + bw * si as f64;
                    let _ = write!(
                        svg,
                        "<rect class=\"{c}\" x=\"{bx:.2}\" y=\"{by:.2}\" width=\"{bw:.2}\" height=\"{bh:.2}\"><title>{l}: {v}</title></rect>",
                        c = s.class,
                        by = y(*v),
                        bh = TOP + ph - y(*v),
                        l = escape(&format!("{} {}", tick(span, buckets[i].start_ms), s.label)),
                    );
                }
            }
            Unit::Ms => {
                let points: Vec<String> = s
                    .values
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| buckets[*i].waited > 0)
                    .map(|(i, v)| format!("{:.1},{:.1}", x(i) + slot / 2.0, y(*v)))
                    .collect();
                let _ = write!(svg, "<polyline class=\"{}\" points=\"{}\"/>", s.class, points.join(" "));
                // A lone bucket with waits draws no line: a dot marks each.
                for p in &points {
                    if let Some((cx, cy)) = p.split_once(',') {
                        let _ = write!(svg, "<circle class=\"{}\" cx=\"{cx}\" cy=\"{cy}\" r=\"2.5\"/>", s.class);
                    }
                }
            }
        }
    }
    svg.push_str("</svg></figure>");
    svg
}

#[cfg(test)]
mod tests {
    use super::*;

    // The value axis ends on a round number at or above the largest value.
    #[test]
    fn the_value_axis_tops_at_a_round_number() {
        assert_eq!(nice_max(0), 1);
        assert_eq!(nice_max(1), 1);
        assert_eq!(nice_max(3), 5);
        assert_eq!(nice_max(7), 10);
        assert_eq!(nice_max(11), 20);
        assert_eq!(nice_max(199), 200);
        assert_eq!(nice_max(u64::MAX), u64::MAX);
        assert_eq!(Unit::Ms.label(1_500), "1.5 s");
        assert_eq!(Unit::Ms.label(120_000), "2 min");
        assert_eq!(Unit::Ms.label(20), "20 ms");
    }

    // Time labels are the time of day, or the date and hour over a week.
    #[test]
    fn time_labels_fit_the_span() {
        assert_eq!(tick(Span::Hour, 951_782_400_123 + 3_600_000 + 120_000), "01:02");
        assert_eq!(tick(Span::Week, 951_782_400_123 + 7_200_000), "02-29 02h");
    }
}
