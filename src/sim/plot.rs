//! Hand-written SVG plots of simulation timelines: machines by state (stacked) with the job
//! queue on a second axis, and an overlay of two runs for comparisons.
//!
//! Timelines may hold hundreds of thousands of rows, so each plot samples them into at most one
//! column per horizontal pixel, keeping the busiest moment of each column (the row with the
//! most machines, and the longest queue), so short peaks stay visible. This module only draws.

use std::fmt::Write as _;

use super::queue::SimTime;
use super::trace::{Counts, Trace};

const WIDTH: f64 = 1000.0;
const HEIGHT: f64 = 440.0;
const LEFT: f64 = 60.0;
const RIGHT: f64 = 60.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 60.0;
/// Tick spacings in seconds, from a minute to a week.
const TICK_STEPS: [u64; 12] = [
    60, 300, 900, 1800, 3600, 7200, 10_800, 21_600, 43_200, 86_400, 172_800, 604_800,
];
const COLUMNS: usize = (WIDTH - LEFT - RIGHT) as usize;

/// One column of a sampled timeline: the busiest counts and the longest queue in it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Column {
    machines: Counts,
    queued: u32,
}

/// Samples `trace` into `n` columns over `[0, end)`.
fn sample(trace: &Trace, end: SimTime, n: usize) -> Vec<Column> {
    let rows = &trace.timeline;
    let mut out = Vec::with_capacity(n);
    let mut i = 0;
    for c in 0..n {
        let lo = end * c as u64 / n as u64;
        let hi = (end * (c as u64 + 1) / n as u64).max(lo + 1);
        // Advance to the row in force at `lo`.
        while rows.get(i + 1).is_some_and(|r| r.at <= lo) {
            i += 1;
        }
        let mut col = Column::default();
        let mut j = i;
        while let Some(r) = rows.get(j) {
            if r.at >= hi && j > i {
                break;
            }
            if r.counts.total() >= col.machines.total() {
                col.machines = r.counts;
            }
            col.queued = col.queued.max(r.counts.queued);
            j += 1;
        }
        out.push(col);
    }
    out
}

/// A chart frame: scales and the SVG text built so far.
struct Chart {
    svg: String,
    end: SimTime,
    left_max: f64,
    right_max: f64,
}

/// The axis maximum for values up to `v`: 4 gridline steps of a round integer size.
fn nice_max(v: u32) -> f64 {
    let quarter = f64::from(v.max(1)) / 4.0;
    let mut decade = 1.0;
    loop {
        for c in [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0] {
            if c * decade >= quarter {
                return 4.0 * c * decade;
            }
        }
        decade *= 10.0;
    }
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

impl Chart {
    fn new(title: &str, trace: &Trace, end: SimTime, left_max: u32, right_max: u32) -> Self {
        let mut chart = Chart {
            svg: String::new(),
            end: end.max(1),
            left_max: nice_max(left_max),
            right_max: nice_max(right_max),
        };
        let _ = write!(
            chart.svg,
            "<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 {WIDTH} {HEIGHT}\" \
             width=\"{WIDTH}\" height=\"{HEIGHT}\" font-family=\"sans-serif\" font-size=\"12\">\n\
             <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n\
             <text x=\"{LEFT}\" y=\"22\" font-size=\"15\">{}</text>\n",
            escape(title)
        );
        chart.axes(trace);
        chart
    }

    fn x(&self, column: usize) -> f64 {
        LEFT + column as f64 * (WIDTH - LEFT - RIGHT) / COLUMNS as f64
    }

    fn y(&self, v: f64, max: f64) -> f64 {
        HEIGHT - BOTTOM - v / max * (HEIGHT - TOP - BOTTOM)
    }

    fn axes(&mut self, trace: &Trace) {
        let (x0, x1, y0, y1) = (LEFT, WIDTH - RIGHT, HEIGHT - BOTTOM, TOP);
        let _ = writeln!(
            self.svg,
            "<path d=\"M{x0} {y1}V{y0}H{x1}V{y1}\" fill=\"none\" stroke=\"#444\"/>"
        );
        for k in 0..=4 {
            let frac = f64::from(k) / 4.0;
            let y = y0 - frac * (y0 - y1);
            let _ = writeln!(
                self.svg,
                "<line x1=\"{x0}\" x2=\"{x1}\" y1=\"{y}\" y2=\"{y}\" stroke=\"#ddd\"/>\
                 <text x=\"{}\" y=\"{}\" text-anchor=\"end\">{}</text>\
                 <text x=\"{}\" y=\"{}\">{}</text>",
                x0 - 6.0,
                y + 4.0,
                frac * self.left_max,
                x1 + 6.0,
                y + 4.0,
                frac * self.right_max
            );
        }
        // Ticks on round wall-clock times (UTC): the smallest step giving at most 8 ticks.
        let span_s = self.end / 1000;
        let step = TICK_STEPS
            .iter()
            .copied()
            .find(|s| span_s / s <= 8)
            .unwrap_or(7 * 86_400);
        let start_s = trace.start.timestamp();
        let step_i = step as i64;
        let mut tick = start_s.div_euclid(step_i) * step_i;
        if tick < start_s {
            tick += step_i;
        }
        let mut last_date = String::new();
        while tick <= start_s + span_s as i64 {
            let at = ((tick - start_s) as u64) * 1000;
            let x = x0 + (x1 - x0) * at as f64 / self.end as f64;
            let wall = trace.wall(at);
            let date = wall.format("%Y-%m-%d").to_string();
            let time = wall.format("%H:%M").to_string();
            // The date only where it changes, to keep the axis readable.
            let date = if date == last_date {
                String::new()
            } else {
                date
            };
            if !date.is_empty() {
                last_date.clone_from(&date);
            }
            let _ = writeln!(
                self.svg,
                "<line x1=\"{x:.1}\" x2=\"{x:.1}\" y1=\"{y0}\" y2=\"{}\" stroke=\"#444\"/>\
                 <text x=\"{x:.1}\" y=\"{}\" text-anchor=\"middle\">{time}</text>\
                 <text x=\"{x:.1}\" y=\"{}\" text-anchor=\"middle\">{date}</text>",
                y0 + 4.0,
                y0 + 18.0,
                y0 + 32.0
            );
            tick += step_i;
        }
        let _ = writeln!(
            self.svg,
            "<text x=\"{}\" y=\"{}\" text-anchor=\"end\">UTC</text>",
            x1,
            y0 + 48.0
        );
        let _ = writeln!(
            self.svg,
            "<text x=\"14\" y=\"{}\" transform=\"rotate(-90 14 {})\" text-anchor=\"middle\">\
             machines</text><text x=\"{}\" y=\"{}\" transform=\"rotate(90 {} {})\" \
             text-anchor=\"middle\">queued jobs</text>",
            (y0 + y1) / 2.0,
            (y0 + y1) / 2.0,
            WIDTH - 14.0,
            (y0 + y1) / 2.0,
            WIDTH - 14.0,
            (y0 + y1) / 2.0
        );
    }

    /// A step line through `values` on the left (`right == false`) or right axis.
    fn line(&mut self, values: &[f64], right: bool, color: &str, dash: bool) {
        let max = if right { self.right_max } else { self.left_max };
        let mut d = String::new();
        for (c, v) in values.iter().enumerate() {
            let (x, y) = (self.x(c), self.y(*v, max));
            if c == 0 {
                let _ = write!(d, "M{x:.1} {y:.1}");
            } else {
                let _ = write!(d, "V{y:.1}");
            }
            let _ = write!(d, "H{:.1}", self.x(c + 1));
        }
        let dash = if dash {
            " stroke-dasharray=\"5 3\""
        } else {
            ""
        };
        let _ = writeln!(
            self.svg,
            "<path d=\"{d}\" fill=\"none\" stroke=\"{color}\" stroke-width=\"1.5\"{dash}/>"
        );
    }

    /// A filled band between `lower` and `upper` on the left axis.
    fn band(&mut self, lower: &[f64], upper: &[f64], color: &str) {
        let mut d = String::new();
        for (c, v) in upper.iter().enumerate() {
            let y = self.y(*v, self.left_max);
            let (x0, x1) = (self.x(c), self.x(c + 1));
            let _ = write!(
                d,
                "{}{x0:.1} {y:.1}L{x1:.1} {y:.1}",
                if c == 0 { "M" } else { "L" }
            );
        }
        for (c, v) in lower.iter().enumerate().rev() {
            let y = self.y(*v, self.left_max);
            let _ = write!(d, "L{:.1} {y:.1}L{:.1} {y:.1}", self.x(c + 1), self.x(c));
        }
        let _ = writeln!(
            self.svg,
            "<path d=\"{d}Z\" fill=\"{color}\" stroke=\"none\"/>"
        );
    }

    fn legend(&mut self, entries: &[(&str, &str, bool)]) {
        let mut x = LEFT + 320.0;
        for (label, color, dash) in entries {
            let dash = if *dash {
                " stroke-dasharray=\"5 3\""
            } else {
                ""
            };
            let _ = write!(
                self.svg,
                "<line x1=\"{x}\" x2=\"{}\" y1=\"18\" y2=\"18\" stroke=\"{color}\" \
                 stroke-width=\"6\"{dash}/><text x=\"{}\" y=\"22\">{}</text>",
                x + 16.0,
                x + 20.0,
                escape(label)
            );
            x += 30.0 + 7.0 * label.len() as f64;
        }
        self.svg.push('\n');
    }

    fn finish(mut self) -> String {
        self.svg.push_str("</svg>\n");
        self.svg
    }
}

/// A stacked layer: label, colour and the count it shows.
type Layer = (&'static str, &'static str, fn(&Counts) -> u32);

fn peak(trace: &Trace, f: impl Fn(&Counts) -> u32) -> u32 {
    trace
        .timeline
        .iter()
        .map(|r| f(&r.counts))
        .max()
        .unwrap_or(0)
}

/// Plots machines by state (stacked: used, idle, creating, removing) and the queue length.
pub fn plot(trace: &Trace, title: &str) -> String {
    let cols = sample(trace, trace.end, COLUMNS);
    let mut chart = Chart::new(
        title,
        trace,
        trace.end,
        peak(trace, Counts::total),
        peak(trace, |c| c.queued),
    );
    let layers: [Layer; 4] = [
        ("used", "#4c78a8", |c| c.used),
        ("idle", "#72b7b2", |c| c.idle),
        ("creating", "#f2cf5b", |c| c.creating),
        ("removing", "#e45756", |c| c.removing),
    ];
    let mut lower = vec![0.0; cols.len()];
    for (_, color, f) in layers {
        let upper: Vec<f64> = cols
            .iter()
            .zip(&lower)
            .map(|(c, l)| l + f64::from(f(&c.machines)))
            .collect();
        chart.band(&lower, &upper, color);
        lower = upper;
    }
    let queue: Vec<f64> = cols.iter().map(|c| f64::from(c.queued)).collect();
    chart.line(&queue, true, "#222", true);
    let mut legend: Vec<(&str, &str, bool)> =
        layers.iter().map(|(l, c, _)| (*l, *c, false)).collect();
    legend.push(("queued (right)", "#222", true));
    chart.legend(&legend);
    chart.finish()
}

/// Overlays two runs: total machines (solid) and queue length (dashed) of each.
pub fn plot_overlay(a: &Trace, a_label: &str, b: &Trace, b_label: &str) -> String {
    let end = a.end.max(b.end);
    let ca = sample(a, end, COLUMNS);
    let cb = sample(b, end, COLUMNS);
    let mut chart = Chart::new(
        &format!("{a_label} vs {b_label}"),
        a,
        end,
        peak(a, Counts::total).max(peak(b, Counts::total)),
        peak(a, |c| c.queued).max(peak(b, |c| c.queued)),
    );
    let total = |cs: &[Column]| {
        cs.iter()
            .map(|c| f64::from(c.machines.total()))
            .collect::<Vec<_>>()
    };
    let queue = |cs: &[Column]| cs.iter().map(|c| f64::from(c.queued)).collect::<Vec<_>>();
    chart.line(&total(&ca), false, "#4c78a8", false);
    chart.line(&total(&cb), false, "#f58518", false);
    chart.line(&queue(&ca), true, "#4c78a8", true);
    chart.line(&queue(&cb), true, "#f58518", true);
    let (qa, qb) = (format!("{a_label} queued"), format!("{b_label} queued"));
    chart.legend(&[
        (a_label, "#4c78a8", false),
        (b_label, "#f58518", false),
        (&qa, "#4c78a8", true),
        (&qb, "#f58518", true),
    ]);
    chart.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::DateTime;

    fn trace() -> Trace {
        let mut t = Trace::new(DateTime::UNIX_EPOCH, 0);
        for k in 0..5000u32 {
            t.record(
                u64::from(k) * 1000,
                Counts {
                    idle: k % 3,
                    used: k % 7,
                    creating: 0,
                    removing: u32::from(k == 2500) * 40,
                    queued: k % 11,
                },
            );
        }
        t.end = 5_000_000;
        t
    }

    #[test]
    fn sampling_keeps_peaks_and_one_column_per_pixel() {
        let t = trace();
        let cols = sample(&t, t.end, 100);
        assert_eq!(cols.len(), 100);
        // The single-second spike of 40 removing machines lands in column 50.
        assert_eq!(cols[50].machines.removing, 40);
        assert_eq!(cols.iter().map(|c| c.queued).max(), Some(10));
    }

    #[test]
    fn axis_maxima_are_round() {
        assert_eq!(nice_max(0), 4.0);
        assert_eq!(nice_max(30), 32.0);
        assert_eq!(nice_max(33), 40.0);
        assert_eq!(nice_max(150), 160.0);
        assert_eq!(nice_max(1000), 1200.0);
    }

    #[test]
    fn plots_are_well_formed_svg() {
        let t = trace();
        let svg = plot(&t, "a <title>");
        assert!(svg.starts_with("<svg") && svg.ends_with("</svg>\n"));
        assert!(svg.contains("a &lt;title&gt;"));
        assert_eq!(svg.matches("<path").count(), 1 + 4 + 1);
        let overlay = plot_overlay(&t, "old", &t, "new");
        assert!(overlay.contains("old vs new"));
        assert_eq!(overlay.matches("stroke-dasharray").count(), 4);
    }
}
