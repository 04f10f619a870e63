//! Load-time checks of `[[runners.machine.autoscaling]]` periods, with positions.
//!
//! Called by the walk for each autoscaling section once its keys are checked: compiles
//! `Periods` + `Timezone` with [`TimePeriod::compile`] and turns a failure into an error at the
//! offending `Periods` entry (or `Timezone` value), so a bad period in any runner fails the
//! whole file as upstream's `CompilePeriods` does. Period lint and host-zone fallbacks become
//! warnings. Matching itself lives in [`crate::config::periods`].

use super::node::Node;
use super::periods::{lint_periods, PeriodError, TimePeriod};
use super::walk::Walker;

/// Checks one converted autoscaling section at canonical `path` (`runners[0].machine.autoscaling[1]`).
pub(crate) fn check_section(w: &mut Walker<'_>, section: &[(&'static str, Node)], path: &str) {
    let get = |key: &str| section.iter().find(|(k, _)| *k == key).map(|(_, v)| v);
    let periods: Vec<String> = get("Periods")
        .and_then(Node::as_list)
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    let timezone = get("Timezone").and_then(Node::as_str).unwrap_or("");
    let at = |key: &str| format!("{path}.{key}");
    match TimePeriod::compile(&periods, timezone) {
        Ok(tp) => {
            for finding in lint_periods(&periods) {
                let target = if w.span_of(&at("Periods")).is_some() {
                    at("Periods")
                } else {
                    path.to_string()
                };
                emit(
                    w,
                    &target,
                    false,
                    format!("{}: {finding}", w.describe(&at("Periods"))),
                    None,
                );
            }
            if let Some(note) = tp.zone_note() {
                let target = if w.span_of(&at("Timezone")).is_some() {
                    at("Timezone")
                } else {
                    path.to_string()
                };
                emit(
                    w,
                    &target,
                    false,
                    format!("{}: {note}", w.describe(&at("Timezone"))),
                    None,
                );
            }
        }
        Err(e) => {
            let (target, hint) = match &e {
                // Each cron error names its own fix; the field-layout hint only helps when
                // the entry is not in the 7-field form (a shifted field is the likely cause).
                PeriodError::Cron { index, expr, .. } => (
                    format!("{path}.Periods[{index}]"),
                    (expr.split_whitespace().count() != 7).then(|| {
                        "periods use 7 fields: \"sec min hour day-of-month month day-of-week year\", e.g. \"* * 9-17 * * mon-fri *\"".to_string()
                    }),
                ),
                PeriodError::UnknownZone { .. } => (at("Timezone"), None),
            };
            let key = match &e {
                PeriodError::UnknownZone { .. } => at("Timezone"),
                _ => at("Periods"),
            };
            let message = format!("{}: invalid autoscaling period: {e}", w.describe(&key));
            emit(w, &target, true, message, hint);
        }
    }
}

fn emit(w: &mut Walker<'_>, target: &str, error: bool, message: String, hint: Option<String>) {
    let span = w
        .span_of(target)
        .map(|s| if error { s.value } else { s.key })
        .unwrap_or(0..0);
    if error {
        w.error(span, message, hint);
    } else {
        w.warn(span, message, hint);
    }
}
