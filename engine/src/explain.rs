//! Decisions as sentences: turns a [`PassReport`] into the plain-English explanations
//! `drover autoscale decide` prints, each ending with upstream's exact reason string.
//!
//! Pure formatting over the report; no decision is made here.

use super::command::Reason;
use super::pass::{AcquireResult, PassReport, RemovalDecision};
use super::policy;

/// One sentence explaining a removal the pass decided.
pub fn removal_sentence(r: &RemovalDecision, report: &PassReport) -> String {
    let c = &r.counts_before;
    let why = match r.reason {
        Reason::TooManyBuilds => format!(
            "used {} times >= MaxBuilds {}",
            r.used_count, report.limits.max_builds
        ),
        Reason::TooManyMachines => format!(
            "{} machines listed before it >= limit {}",
            c.total(),
            report.limits.limit
        ),
        Reason::TooManyIdleMachines => {
            let idle = &report.idle;
            let cap = if policy::idle_exceeded(idle, c) {
                format!(
                    "{} available >= IdleCount {}",
                    c.available(),
                    idle.idle_count
                )
            } else {
                format!(
                    "{} available >= IdleCountMin {} and >= {} in use x IdleScaleFactor {} = {}",
                    c.available(),
                    policy::effective_idle_count_min(idle),
                    c.in_use(),
                    idle.idle_scale_factor,
                    policy::factor_target(idle, c)
                )
            };
            format!(
                "idle for {} s > IdleTime {} s and {}",
                r.idle_for_secs, idle.idle_time, cap
            )
        }
        other => other.as_str().to_string(),
    };
    format!("removed {}: {} ({})", r.name, why, r.reason)
}

/// Every sentence for a pass, in decision order, ending with the outcome.
pub fn pass_sentences(report: &PassReport, result: &AcquireResult) -> Vec<String> {
    let mut out = Vec::new();
    for name in &report.adopted {
        out.push(format!(
            "adopted {name}: first seen on disk, counted as Idle with 1 build"
        ));
    }
    for r in &report.removals {
        out.push(removal_sentence(r, report));
    }
    let idle = &report.idle;
    for c in &report.created {
        let b = &c.counts_before;
        out.push(format!(
            "creating {}: {} available < IdleCount {}{}{} (idle capacity below the idle settings)",
            c.name,
            b.available(),
            idle.idle_count,
            if report.limits.limit > 0 {
                format!(", {} total < limit {}", b.total(), report.limits.limit)
            } else {
                String::new()
            },
            if report.limits.max_growth_rate > 0 {
                format!(
                    ", {} creating < MaxGrowthRate {}",
                    b.creating, report.limits.max_growth_rate
                )
            } else {
                String::new()
            }
        ));
    }
    for name in &report.unavailable {
        out.push(format!(
            "removed {name}: the connectivity check failed ({})",
            Reason::MachineUnavailable
        ));
    }
    let c = &report.counts;
    out.push(match result {
        AcquireResult::Machine(name) => format!("acquired {name}: the newest free machine"),
        AcquireResult::NoMachine if idle.idle_count == 0 => format!(
            "no free machine; IdleCount is 0 and a machine can be created on demand, so a job \
             is requested anyway ({} total, limit {})",
            c.total(),
            report.limits.limit
        ),
        AcquireResult::NoMachine => format!(
            "no free machine, but the pass counted {} idle, so a job is requested anyway and \
             created on demand",
            c.idle
        ),
        AcquireResult::NoFreeMachines => format!(
            "no free machine and the pass counted 0 idle (IdleCount {}): no job is requested \
             (no free machines that can process builds)",
            idle.idle_count
        ),
        AcquireResult::MissingMachineOptions => {
            "the runner has no MachineName (missing Machine options)".to_string()
        }
    });
    out
}
