//! Removals that gave up: upstream forgets them; with orphan retry on (drover run) the engine
//! retries them in the background with capped backoff, one `Reconciled` notice per decision,
//! and a ledger keeps them across restarts. Reconciliation with the provider's listing, at
//! start and in periodic rounds, goes through the same notices.

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

/// The delays announced after each failed background retry of `m`.
fn next_delays(w: &World, m: &str) -> Vec<i64> {
    decisions(w, m)
        .iter()
        .filter_map(|d| match d {
            ReconcileDecision::RetryFailed { next_in_secs, .. } => Some(*next_in_secs),
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
    assert_eq!(next_delays(&w, &m), vec![60, 120, 120, 120]);
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

fn reconciled(w: &World) -> Vec<(String, ReconcileDecision)> {
    w.notices
        .iter()
        .filter_map(|n| match n {
            Notice::Reconciled { name, decision } => Some((name.clone(), *decision)),
            _ => None,
        })
        .collect()
}

fn tracked(name: &str, state: drover::engine::MachineState) -> drover::engine::TrackedMachine {
    drover::engine::TrackedMachine {
        name: name.to_string(),
        state,
        used_count: 2,
        used: t(0),
        retry_count: 0,
        runner: Some(R),
    }
}

#[test]
fn a_periodic_round_drops_vanished_idle_machines_and_adopts_unknown_listed_ones() {
    use drover::engine::MachineState::{Creating, Idle, Removing, Used};
    let mut w = World::new(policy(idle(0, 600), limits(0, 0, 0)));
    let (kept, vanished, used, removing, creating, unknown) =
        (name(1), name(2), name(3), name(4), name(5), name(6));
    for (n, state) in [
        (&kept, Idle),
        (&vanished, Idle),
        (&used, Used),
        (&removing, Removing),
        (&creating, Creating),
    ] {
        w.engine.track(tracked(n, state), t(0)).unwrap();
    }
    w.disk = [
        kept.clone(),
        unknown.clone(),
        "someone-elses-vm".to_string(),
    ]
    .into();
    w.advance(60);
    let report = w.reconcile();
    assert_eq!(report.vanished, vec![vanished.clone()]);
    assert_eq!(report.adopted, vec![unknown.clone()]);
    assert_eq!(
        reconciled(&w),
        vec![
            (vanished.clone(), ReconcileDecision::Vanished),
            (unknown.clone(), ReconcileDecision::Adopted),
        ],
        "one decision per machine; none for a machine outside the runner's filter"
    );
    assert!(w.engine.machine(&vanished).is_none(), "dropped");
    let adopted = w.engine.machine(&unknown).expect("adopted");
    assert_eq!(
        (adopted.state, adopted.used_count),
        (Idle, 1),
        "as upstream"
    );
    for (n, state) in [
        (&kept, Idle),
        (&used, Used),
        (&removing, Removing),
        (&creating, Creating),
    ] {
        assert_eq!(
            w.state(n),
            Some(state),
            "{n}: its absence is expected or it is listed"
        );
    }
    // Nothing changed since: the next round decides nothing.
    assert_eq!(w.reconcile(), drover::engine::ReconcileReport::default());
    assert_eq!(reconciled(&w).len(), 2);
}

#[test]
fn a_round_ignores_creations_and_removals_that_finished_while_it_listed() {
    let mut p = policy(idle(0, 600), limits(0, 1, 0));
    p.max_removal_attempts = 2;
    let mut w = World::new(p);
    w.create_latency = 10;
    let created = w.engine.create_on_demand(R, t(0)).unwrap();
    let removed = name(7);
    w.engine
        .track(tracked(&removed, drover::engine::MachineState::Idle), t(0))
        .unwrap();
    w.disk.insert(removed.clone());
    w.drive();
    // The round begins and the listing is taken: the creation is not on disk yet.
    w.engine.begin_reconcile(w.now);
    let listing: Vec<String> = w.disk.iter().cloned().collect();
    // While the listing travels, the creation finishes and a removal (MaxBuilds) finishes.
    w.advance(10);
    w.engine.release(R, &removed, w.now).unwrap();
    w.drive();
    assert_eq!(w.state(&created), Some(drover::engine::MachineState::Idle));
    assert!(w.engine.machine(&removed).is_none() && !w.disk.contains(&removed));
    let report = w.engine.finish_reconcile(&listing, w.now).unwrap();
    w.drive();
    assert_eq!(report, drover::engine::ReconcileReport::default());
    assert!(reconciled(&w).is_empty(), "{:?}", reconciled(&w));
    assert!(w.engine.machine(&created).is_some());
    assert!(w.engine.machine(&removed).is_none(), "not adopted back");
}

#[test]
fn a_round_leaves_orphans_to_their_retries_and_needs_to_be_open() {
    let (mut w, m) = gave_up_world(Some(OrphanRetry::default()));
    assert!(w.disk.contains(&m), "the VM is still listed");
    assert!(w
        .engine
        .finish_reconcile(std::slice::from_ref(&m), w.now)
        .is_err());
    let report = w.reconcile();
    assert!(report.adopted.is_empty(), "{report:?}");
    assert!(w.engine.machine(&m).is_none());
    assert_eq!(w.engine.orphans().collect::<Vec<_>>(), vec![m.as_str()]);
}

#[test]
fn orphans_saved_in_the_ledger_resume_their_retries_after_a_restart() {
    use drover::ledger::{LedgerFile, OrphanRecord};
    let retry = OrphanRetry {
        first: TimeDelta::seconds(30),
        cap: TimeDelta::seconds(600),
    };
    let (mut w, m) = gave_up_world(Some(retry));
    w.advance(30);
    assert_eq!(forces(&w, &m), 2, "one background retry failed");
    let dir = tempfile::tempdir().unwrap();
    let file = LedgerFile::at(dir.path().join(".drover-machines.json"));
    let orphans: Vec<OrphanRecord> = w.engine.orphan_entries().iter().map(Into::into).collect();
    assert_eq!(orphans.len(), 1);
    assert_eq!(orphans[0].next_retry, w.now + TimeDelta::seconds(60));
    file.save(&[], &orphans).unwrap();

    // The restart: a fresh engine, the same provider, 20 s later.
    let mut again = World::new(policy(idle(0, 0), limits(0, 0, 0)));
    again.engine.set_orphan_retry(Some(retry));
    again.disk = w.disk.clone();
    again.now = w.now;
    again.force_fails = true;
    again.advance(20);
    let loaded = file.load();
    again
        .engine
        .resume_orphans(loaded.orphans.iter().map(Into::into).collect());
    assert_eq!(again.engine.orphans().collect::<Vec<_>>(), vec![m.as_str()]);
    again.advance(39);
    assert_eq!(forces(&again, &m), 0, "the saved retry time stands");
    again.advance(1);
    assert_eq!(forces(&again, &m), 1, "retried when it was due");
    assert_eq!(
        next_delays(&again, &m),
        vec![120],
        "the backoff goes on from the saved failures"
    );
    again.force_fails = false;
    again.advance(120);
    assert!(
        !again.disk.contains(&m),
        "the VM is removed after the restart"
    );
    assert_eq!(
        decisions(&again, &m).last(),
        Some(&ReconcileDecision::Removed)
    );
}
