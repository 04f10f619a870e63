//! Comparison of two runs of one workload: figures side by side with deltas, and the first
//! points where the scaling decisions diverge.
//!
//! Decisions are grouped by instant; two runs diverge at an instant when the engine issued a
//! different set of commands (action, runner, reason) there. Machine names are not compared:
//! they embed random suffixes. Two runs are *identical* when they have no divergence point and
//! the same timeline and summary. This module reads traces; it does not run them.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use chrono::SecondsFormat;
use serde::Serialize;

use super::queue::SimTime;
use super::report::{number, Summary};
use super::trace::Trace;

/// One instant where the two runs decided differently.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Divergence {
    /// When (RFC 3339).
    pub at: String,
    /// What the first run decided then (`action runner: reason`).
    pub a: Vec<String>,
    /// What the second run decided then.
    pub b: Vec<String>,
}

/// Two summaries and where their decisions part.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Comparison {
    /// Label of the first run.
    pub a_label: String,
    /// Label of the second run.
    pub b_label: String,
    /// The first run's summary.
    pub a: Summary,
    /// The second run's summary.
    pub b: Summary,
    /// Number of instants whose decisions differ.
    pub divergent_instants: usize,
    /// The first of those instants (at most [`Comparison::SHOWN`]).
    pub first_divergences: Vec<Divergence>,
    /// True when the runs made the same decisions and have the same timeline and summary.
    pub identical: bool,
}

fn by_instant(trace: &Trace) -> BTreeMap<SimTime, Vec<String>> {
    let mut map: BTreeMap<SimTime, Vec<String>> = BTreeMap::new();
    for d in &trace.decisions {
        map.entry(d.at).or_default().push(format!(
            "{} {}: {}",
            d.action,
            trace.runner_of(d),
            d.reason.as_str()
        ));
    }
    for v in map.values_mut() {
        v.sort();
    }
    map
}

/// Two summaries side by side: one row per figure with both values and the delta, rows in A's
/// order, then any only B has (a removal reason A never used).
pub fn figures_table(a: &Summary, a_label: &str, b: &Summary, b_label: &str) -> String {
    let mut out = String::new();
    let fa = a.figures();
    let fb: BTreeMap<_, _> = b.figures().into_iter().collect();
    let mut rows: Vec<(String, f64, f64)> = fa
        .iter()
        .map(|(l, v)| (l.clone(), *v, fb.get(l).copied().unwrap_or(0.0)))
        .collect();
    for (l, v) in b.figures() {
        if !fa.iter().any(|(k, _)| *k == l) {
            rows.push((l, 0.0, v));
        }
    }
    let w = a_label.len().max(b_label.len()).max(10);
    let _ = writeln!(
        out,
        "  {:<34} {:>w$} {:>w$} {:>10}",
        "", a_label, b_label, "delta"
    );
    for (label, va, vb) in rows {
        let delta = vb - va;
        let delta = if delta == 0.0 {
            "=".to_string()
        } else if delta > 0.0 {
            format!("+{}", number(delta))
        } else {
            number(delta)
        };
        let _ = writeln!(
            out,
            "  {label:<34} {:>w$} {:>w$} {delta:>10}",
            number(va),
            number(vb)
        );
    }
    out
}

impl Comparison {
    /// How many divergence points are listed.
    pub const SHOWN: usize = 5;

    /// Compares run `a` with run `b`.
    pub fn of(a_label: &str, a: &Trace, b_label: &str, b: &Trace) -> Self {
        let (da, db) = (by_instant(a), by_instant(b));
        let mut instants: Vec<SimTime> = da.keys().chain(db.keys()).copied().collect();
        instants.sort_unstable();
        instants.dedup();
        let empty = Vec::new();
        let mut divergent_instants = 0;
        let mut first_divergences = Vec::new();
        for at in instants {
            let (xa, xb) = (da.get(&at).unwrap_or(&empty), db.get(&at).unwrap_or(&empty));
            if xa != xb {
                divergent_instants += 1;
                if first_divergences.len() < Self::SHOWN {
                    first_divergences.push(Divergence {
                        at: a.wall(at).to_rfc3339_opts(SecondsFormat::AutoSi, true),
                        a: xa.clone(),
                        b: xb.clone(),
                    });
                }
            }
        }
        let (sa, sb) = (Summary::of(a), Summary::of(b));
        let identical = divergent_instants == 0 && a.timeline == b.timeline && sa == sb;
        Comparison {
            a_label: a_label.to_string(),
            b_label: b_label.to_string(),
            a: sa,
            b: sb,
            divergent_instants,
            first_divergences,
            identical,
        }
    }

    /// The comparison as pretty-printed JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_default()
    }

    /// The comparison as text: a table of figures, then the divergence points.
    pub fn to_text(&self) -> String {
        let mut out = format!(
            "simulated {} .. {} (seed {})\n",
            self.a.from, self.a.until, self.a.seed
        );
        out.push_str(&figures_table(
            &self.a,
            &self.a_label,
            &self.b,
            &self.b_label,
        ));
        let w = self.a_label.len().max(self.b_label.len()).max(10);
        if self.identical {
            out.push_str("\nidentical: the same decisions at the same times\n");
        } else if self.divergent_instants == 0 {
            out.push_str("\ndecisions match, but the timelines differ (job placement or timing)\n");
        } else {
            let _ = writeln!(
                out,
                "\ndecisions diverge at {} instant(s); the first:",
                self.divergent_instants
            );
            for d in &self.first_divergences {
                let _ = writeln!(out, "  {}", d.at);
                let show = |side: &[String]| {
                    if side.is_empty() {
                        return "(nothing)".to_string();
                    }
                    // Sorted already: collapse repeats into "N× decision".
                    let mut parts: Vec<String> = Vec::new();
                    let mut i = 0;
                    while let Some(d) = side.get(i) {
                        let n = side[i..].iter().take_while(|x| *x == d).count();
                        parts.push(if n > 1 {
                            format!("{n}× {d}")
                        } else {
                            d.clone()
                        });
                        i += n;
                    }
                    parts.join("; ")
                };
                let _ = writeln!(out, "    {:<w$} {}", self.a_label, show(&d.a));
                let _ = writeln!(out, "    {:<w$} {}", self.b_label, show(&d.b));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::super::trace::{Action, Counts, Decision};
    use super::*;
    use crate::engine::Reason;
    use chrono::DateTime;

    fn trace(decisions: &[(SimTime, Action, Reason)]) -> Trace {
        let mut t = Trace::new(DateTime::UNIX_EPOCH, 1);
        t.runners.push("r".into());
        for (i, &(at, action, reason)) in decisions.iter().enumerate() {
            t.decisions.push(Decision {
                at,
                runner: 0,
                action,
                reason,
            });
            t.record(
                at,
                Counts {
                    idle: i as u32 + 1,
                    ..Counts::default()
                },
            );
        }
        t.end = 100_000;
        t
    }

    #[test]
    fn identical_runs_have_no_divergence() {
        let a = trace(&[
            (0, Action::Create, Reason::IdleCapacity),
            (5_000, Action::Remove, Reason::TooManyIdleMachines),
        ]);
        let c = Comparison::of("old", &a, "new", &a.clone());
        assert!(c.identical);
        assert_eq!(c.divergent_instants, 0);
        assert!(c.to_text().contains("identical"));
    }

    #[test]
    fn reports_the_first_differing_instants() {
        let a = trace(&[
            (0, Action::Create, Reason::IdleCapacity),
            (0, Action::Create, Reason::IdleCapacity),
            (9_000, Action::Remove, Reason::TooManyBuilds),
        ]);
        let b = trace(&[
            (0, Action::Create, Reason::IdleCapacity),
            (3_000, Action::Create, Reason::IdleCapacity),
            (9_000, Action::Remove, Reason::TooManyBuilds),
        ]);
        let c = Comparison::of("old", &a, "new", &b);
        assert!(!c.identical);
        assert_eq!(c.divergent_instants, 2);
        assert_eq!(c.first_divergences[0].at, "1970-01-01T00:00:00Z");
        assert_eq!(c.first_divergences[0].a.len(), 2);
        assert_eq!(c.first_divergences[1].a, Vec::<String>::new());
        assert_eq!(
            c.first_divergences[1].b,
            ["create r: idle capacity below the idle settings"]
        );
        let text = c.to_text();
        assert!(text.contains("diverge at 2 instant(s)"), "{text}");
        assert!(text.contains("(nothing)"));
        assert!(
            text.contains("2× create r: idle capacity below the idle settings"),
            "{text}"
        );
    }
}
