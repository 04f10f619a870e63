//! Removals that gave up: upstream forgets them; with orphan retry on (drover run) the engine
//! retries them in the background with capped backoff, one `Reconciled` notice per decision.

mod engine_support;

use chrono::TimeDelta;
use drover::engine::{Command, Notice, OrphanRetry, ReconcileDecision};
use engine_support::*;

/// A world with one created machine whose every `rm -y` fails, driven to give up
/// (MaxRemovalAttempts 2) with a failing `rm -f`.
fn gave_up_world(retry: Option<OrphanRetry>) -> (World, String) {
    let mut p = policy(idle(0, 0), limits(0, 0, 0));
    p.max_removal_attempts = 2;
    let mut w = World::new(p);
    w.engine.set_orphan_retry(retry);
    let m = w.engine.create_on_demand(R, t(0)).unwrap();
    w.drive();
    w.rm_failures.insert(m.clone(), u32::MAX);
    w.force_fails = true;
    let mut step = w
        .engine
        .begin_find(R, std::slice::from_ref(&m), t(0))
        .unwrap();
    while let drover::engine::FindStep::CheckConnectivity { id, .. } = step {
        step = w.engine.find_connectivity_result(id, false, t(0)).unwrap();
    }
    w.drive();
    w.advance(30);
    w.advance(30);
    assert!(
        w.engine.machine(&m).is_none(),
        "the record is deleted as upstream"
    );
    assert_eq!(forces(&w, &m), 1, "given up with one rm -f");
    (w, m)
}

fn forces(w: &World, m: &str) -> usize {
    w.count(|c| matches!(c, Command::ForceRemove { name, .. } if name == m))
}

fn decisions(w: &World, m: &str) -> Vec<ReconcileDecision> {
    w.notices
        .iter()
        .filter_map(|n| match n {
            Notice::Reconciled { name, decision } if name == m => Some(*decision),
            _ => None,
        })
        .collect()
}

#[test]
fn without_orphan_retry_a_removal_that_gave_up_is_forgotten_as_upstream() {
    let (mut w, m) = gave_up_world(None);
    for _ in 0..10 {
        w.advance(3600);
    }
    assert_eq!(forces(&w, &m), 1);
    assert!(decisions(&w, &m).is_empty());
    assert!(
        w.disk.contains(&m),
        "the VM is leaked, as upstream leaks it"
    );
}

#[test]
fn orphan_retry_backs_off_doubling_up_to_the_cap_then_removes_the_vm() {
    let retry = OrphanRetry {
        first: TimeDelta::seconds(30),
        cap: TimeDelta::seconds(120),
    };
    let (mut w, m) = gave_up_world(Some(retry));
    assert_eq!(w.engine.orphans().collect::<Vec<_>>(), vec![m.as_str()]);
    w.advance(29);
    assert_eq!(forces(&w, &m), 1, "first retry after 30 s");
    w.advance(1);
    assert_eq!(forces(&w, &m), 2);
    // 60, then 120, then capped at 120.
    w.advance(59);
    assert_eq!(forces(&w, &m), 2);
    w.advance(1);
    assert_eq!(forces(&w, &m), 3);
    w.advance(120);
    assert_eq!(forces(&w, &m), 4);
    w.advance(120);
    assert_eq!(forces(&w, &m), 5);
    let next: Vec<i64> = decisions(&w, &m)
        .iter()
        .filter_map(|d| match d {
            ReconcileDecision::RetryFailed { next_in_secs, .. } => Some(*next_in_secs),
            _ => None,
        })
        .collect();
    assert_eq!(next, vec![60, 120, 120, 120]);
    // The provider recovers: the next retry removes the VM, and the orphan is resolved.
    w.force_fails = false;
    w.advance(120);
    assert!(!w.disk.contains(&m));
    assert_eq!(decisions(&w, &m).last(), Some(&ReconcileDecision::Removed));
    assert_eq!(w.engine.orphans().count(), 0);
    // Nothing more happens once resolved.
    let before = w.commands.len();
    w.advance(3600);
    assert_eq!(w.commands.len(), before);
    // An orphan never counts as a machine (limit, gauge): upstream's decisions stand.
    assert!(w.engine.machine(&m).is_none());
}

#[test]
fn an_orphan_that_vanished_is_resolved_without_another_rm() {
    let (mut w, m) = gave_up_world(Some(OrphanRetry::default()));
    w.disk.remove(&m);
    w.advance(30);
    assert_eq!(forces(&w, &m), 1, "no rm -f for a machine that is gone");
    assert_eq!(decisions(&w, &m), vec![ReconcileDecision::Vanished]);
    assert_eq!(w.engine.orphans().count(), 0);
}

#[test]
fn backoff_is_capped_and_never_overflows() {
    let r = OrphanRetry::default();
    assert_eq!(r.delay(0), TimeDelta::seconds(30));
    assert_eq!(r.delay(1), TimeDelta::seconds(60));
    assert_eq!(r.delay(6), TimeDelta::seconds(1920));
    assert_eq!(r.delay(7), TimeDelta::hours(1));
    assert_eq!(r.delay(u32::MAX), TimeDelta::hours(1));
}

fn record(name: &str, state: drover::engine::MachineState) -> drover::engine::RestoredMachine {
    drover::engine::RestoredMachine {
        name: name.to_string(),
        runner: Some(R),
        state,
        used_count: 2,
        used: t(0),
        removal_attempts: 0,
        retry_count: 0,
        reason: None,
    }
}

#[test]
fn start_reconciliation_drops_vanished_records_and_reports_unknown_listed_machines() {
    use drover::engine::MachineState::{Creating, Idle};
    let mut w = World::new(policy(idle(0, 600), limits(0, 0, 0)));
    let (listed, vanished, creating, unknown) = (name(1), name(2), name(3), name(4));
    let records = vec![
        record(&listed, Idle),
        record(&vanished, Idle),
        record(&creating, Creating),
    ];
    let seen = [
        listed.clone(),
        unknown.clone(),
        "someone-elses-vm".to_string(),
    ];
    let kept = w.engine.reconcile_ledger(records, &seen);
    let kept: Vec<&str> = kept.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(kept, vec![listed.as_str(), creating.as_str()]);
    w.drive();
    let all: Vec<(String, ReconcileDecision)> = w
        .notices
        .iter()
        .filter_map(|n| match n {
            Notice::Reconciled { name, decision } => Some((name.clone(), *decision)),
            _ => None,
        })
        .collect();
    assert_eq!(
        all,
        vec![
            (vanished, ReconcileDecision::Vanished),
            (unknown, ReconcileDecision::Adopted),
        ],
        "one decision per machine, none for a machine outside the runner's filter"
    );
}
