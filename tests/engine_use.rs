//! `Use` sessions (spec §7) as stories: the acquired machine, a fresh search, on-demand
//! creation with its retries, availability signals and failed credentials.

mod engine_support;

use drover::engine::{AcquireResult, Command, MachineState, Reason, UseError, UseStep};
use engine_support::*;

fn pool_of_one(w: &mut World) -> String {
    w.acquire();
    let o = w.acquire();
    match o.result {
        AcquireResult::Machine(m) => m,
        other => panic!("expected a machine, got {other:?}"),
    }
}

#[test]
fn the_acquired_machine_passes_an_uncached_check_and_is_used() {
    let mut w = World::new(policy(idle(1, 600), limits(0, 0, 0)));
    let m = pool_of_one(&mut w);
    let checks_before = w.checks.len();
    let used = w.run_use(Some(&m), 5).unwrap();
    assert_eq!((used.name.as_str(), used.new_data), (m.as_str(), false));
    assert!(
        matches!(&w.use_steps[0], UseStep::CheckConnectivity { name, .. } if *name == m),
        "checked again although the pass cached it"
    );
    assert_eq!(w.checks.len(), checks_before);
    let rec = w.engine.machine(&m).unwrap();
    assert_eq!((rec.state, rec.used_count), (MachineState::Used, 1));
}

#[test]
fn an_unreachable_acquired_machine_is_left_acquired_and_another_is_found() {
    let names: Vec<String> = (1..=2).map(name).collect();
    let mut w = World::new(policy(idle(2, 600), limits(0, 0, 0))).with_disk(&names);
    let o = w.acquire();
    assert_eq!(o.result, AcquireResult::Machine(names[1].clone()));
    w.unreachable.insert(names[1].clone());
    let used = w.run_use(Some(&names[1]), 5).unwrap();
    assert_eq!(
        (used.name.as_str(), used.new_data),
        (names[0].as_str(), true)
    );
    assert_eq!(
        w.state(&names[1]),
        Some(MachineState::Acquired),
        "data is not touched"
    );
    w.engine.release(R, &used.name, w.now).unwrap();
    w.engine.release(R, &names[1], w.now).unwrap();
    assert_eq!(w.state(&names[0]), Some(MachineState::Idle));
}

#[test]
fn with_no_free_machine_use_creates_one_on_demand_and_waits_for_it() {
    let mut w = World::new(policy(idle(0, 600), limits(0, 0, 0)));
    w.create_latency = 45;
    let o = w.acquire();
    assert_eq!(o.result, AcquireResult::NoMachine);
    let used = w.run_use(None, 60).unwrap();
    assert!(used.new_data);
    assert_eq!(
        w.now,
        t(45),
        "took the machine as soon as its creation finished"
    );
    assert!(w.commands.iter().any(|c| matches!(c,
        Command::Create { name, reason: Reason::OnDemand, .. } if *name == used.name)));
    assert_eq!(w.state(&used.name), Some(MachineState::Used));
}

#[test]
fn three_failed_creations_fail_use_one_second_apart() {
    let mut w = World::new(policy(idle(0, 600), limits(0, 0, 0)));
    w.fail_creates = 3;
    let err = w.run_use(None, 10).unwrap_err();
    assert!(matches!(err, UseError::CreationFailed(_)));
    assert_eq!(w.count(|c| matches!(c, Command::Create { .. })), 3);
    assert_eq!(w.now, t(2), "attempts at 0 s, 1 s and 2 s");
    let lists = w
        .use_steps
        .iter()
        .filter(|s| matches!(s, UseStep::List { .. }))
        .count();
    assert_eq!(lists, 3);
}

#[test]
fn a_failed_creation_is_retried_and_the_second_attempt_succeeds() {
    let mut w = World::new(policy(idle(0, 600), limits(0, 0, 0)));
    w.fail_creates = 1;
    let used = w.run_use(None, 10).unwrap();
    assert_eq!(w.state(&used.name), Some(MachineState::Used));
}

#[test]
fn failed_credentials_release_the_machine() {
    let mut w = World::new(policy(idle(1, 600), limits(0, 0, 0)));
    let m = pool_of_one(&mut w);
    w.bad_credentials.insert(m.clone());
    let err = w.run_use(Some(&m), 5).unwrap_err();
    assert_eq!(err, UseError::Credentials(m.clone()));
    assert_eq!(w.state(&m), Some(MachineState::Idle));
}

#[test]
fn a_waiting_session_takes_a_released_machine_and_its_own_creation_joins_the_pool() {
    // MaxGrowthRate 1 and a pool creation in flight: the session's own creation is queued.
    let busy = name(1);
    let mut w =
        World::new(policy(idle(2, 600), limits(0, 0, 1))).with_disk(std::slice::from_ref(&busy));
    w.create_latency = 100;
    w.acquire(); // adopts `busy` and acquires it
    w.engine.use_machine(&busy, w.now).unwrap();
    let id = w.engine.begin_use(R, None, w.now).unwrap();
    let UseStep::List { id: list_id } = w.engine.poll_use().unwrap() else {
        panic!("a listing first");
    };
    assert_eq!(list_id, id);
    let names: Vec<String> = w.disk.iter().cloned().collect();
    w.engine.use_listing(id, &names, w.now).unwrap();
    assert!(w.engine.poll_use().is_none(), "nothing free: waiting");
    w.drive();
    // The job on `busy` ends: availability is signalled and the session searches again.
    w.engine.release(R, &busy, w.now).unwrap();
    let Some(UseStep::List { .. }) = w.engine.poll_use() else {
        panic!("woken by the availability signal");
    };
    w.engine.use_listing(id, &names, w.now).unwrap();
    let Some(UseStep::CheckConnectivity { name, .. }) = w.engine.poll_use() else {
        panic!("check the released machine");
    };
    assert_eq!(name, busy);
    w.engine.use_connectivity_result(id, true, w.now).unwrap();
    let Some(UseStep::FetchCredentials { .. }) = w.engine.poll_use() else {
        panic!("credentials");
    };
    w.engine.use_credentials_result(id, true, w.now).unwrap();
    let Some(UseStep::Done {
        result: Ok(used), ..
    }) = w.engine.poll_use()
    else {
        panic!("done");
    };
    assert_eq!(used.name, busy);
    w.advance(300);
    let idle_now = w
        .engine
        .machines()
        .filter(|m| m.state == MachineState::Idle)
        .count();
    assert_eq!(
        idle_now, 2,
        "the pool creation and the session's own creation, both Idle"
    );
}

/// A woken session whose search comes back empty goes back to waiting for the creation it
/// already started; it does not start another (spec §7). The simulator found machines piling
/// up past `limit` with `IdleCount = 0` when it did.
#[test]
fn a_wake_up_that_finds_nothing_keeps_waiting_for_the_sessions_own_creation() {
    let busy = name(1);
    let mut w =
        World::new(policy(idle(0, 600), limits(0, 0, 0))).with_disk(std::slice::from_ref(&busy));
    w.create_latency = 100;
    let taken = w.acquire(); // adopts `busy` and acquires it
    assert_eq!(taken.result, AcquireResult::Machine(busy.clone()));
    w.engine.use_machine(&busy, w.now).unwrap();

    let id = w.engine.begin_use(R, None, w.now).unwrap();
    let Some(UseStep::List { .. }) = w.engine.poll_use() else {
        panic!("a listing first");
    };
    let names: Vec<String> = w.disk.iter().cloned().collect();
    w.engine.use_listing(id, &names, w.now).unwrap();
    w.drive();
    assert_eq!(w.count(|c| matches!(c, Command::Create { .. })), 1);

    // `busy` is released: the session is woken, but an Acquire pass takes the machine
    // before the session's listing arrives, so its search finds nothing.
    w.engine.release(R, &busy, w.now).unwrap();
    let Some(UseStep::List { .. }) = w.engine.poll_use() else {
        panic!("woken by the availability signal");
    };
    assert_eq!(
        w.acquire().result,
        AcquireResult::Machine(busy.clone()),
        "the pass takes the released machine first"
    );
    w.engine.use_listing(id, &names, w.now).unwrap();
    w.drive();
    assert!(w.engine.poll_use().is_none(), "nothing free: waiting again");
    assert_eq!(
        w.count(|c| matches!(c, Command::Create { .. })),
        1,
        "no second creation for the same attempt"
    );

    // The session's own creation finishes: it takes that machine.
    w.advance(100);
    let own = w
        .commands
        .iter()
        .find_map(|c| match c {
            Command::Create { name, .. } => Some(name.clone()),
            _ => None,
        })
        .unwrap();
    let Some(UseStep::FetchCredentials { name, .. }) = w.engine.poll_use() else {
        panic!("the own creation is taken");
    };
    assert_eq!(name, own);
}

/// The session's own creation finishes while the session is busy with a search: when the
/// search comes back empty, the session takes its finished machine.
#[test]
fn an_own_creation_finishing_during_a_search_is_taken_when_the_search_ends_empty() {
    let busy = name(1);
    let mut w =
        World::new(policy(idle(0, 600), limits(0, 0, 0))).with_disk(std::slice::from_ref(&busy));
    w.create_latency = 100;
    w.acquire(); // adopts `busy` and acquires it
    w.engine.use_machine(&busy, w.now).unwrap();
    let id = w.engine.begin_use(R, None, w.now).unwrap();
    w.engine.poll_use();
    let names: Vec<String> = w.disk.iter().cloned().collect();
    w.engine.use_listing(id, &names, w.now).unwrap();
    w.drive();

    w.engine.release(R, &busy, w.now).unwrap();
    let Some(UseStep::List { .. }) = w.engine.poll_use() else {
        panic!("woken by the availability signal");
    };
    w.acquire(); // takes `busy` before the session's listing arrives
    w.advance(100); // the own creation finishes while the session's listing is pending
    assert!(w.engine.poll_use().is_none());
    w.engine.use_listing(id, &names, w.now).unwrap();
    w.drive();
    let Some(UseStep::FetchCredentials { .. }) = w.engine.poll_use() else {
        panic!("the finished own creation is taken");
    };
    assert_eq!(w.count(|c| matches!(c, Command::Create { .. })), 1);
}
