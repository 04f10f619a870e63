//! Engine scenarios as short stories on a virtual clock: each sets up a pool, runs passes,
//! jobs and provider results, and checks what the engine decided and why.

mod engine_support;

use drover::engine::{
    AcquireResult, AcquireStep, Command, DrainSettings, Engine, Event, MachineState, Notice,
    Reason, RunnerId, RunnerPolicy, TrackedMachine,
};
use engine_support::*;

fn removal_reasons(o: &drover::engine::AcquireOutcome) -> Vec<(String, Reason)> {
    o.report
        .removals
        .iter()
        .map(|r| (r.name.clone(), r.reason))
        .collect()
}

#[test]
fn empty_pool_pre_creates_idle_count_and_refuses_the_job_until_one_is_idle() {
    let mut w = World::new(policy(idle(2, 600), limits(10, 0, 0)));
    w.create_latency = 60;
    let o = w.acquire();
    assert_eq!(o.report.created.len(), 2);
    // Zero idle machines and IdleCount != 0: no job request.
    assert_eq!(o.result, AcquireResult::NoFreeMachines);
    assert_eq!(w.count(|c| matches!(c, Command::Create { .. })), 2);
    // While both are creating, the next pass creates nothing (Creating counts as available).
    let o = w.acquire();
    assert!(o.report.created.is_empty());
    assert_eq!(o.report.counts.creating, 2);
    w.advance(60);
    let o = w.acquire();
    let newest = w.disk.iter().next_back().unwrap().clone();
    assert_eq!(o.result, AcquireResult::Machine(newest.clone()));
    assert_eq!(w.state(&newest), Some(MachineState::Acquired));
    // Create carried the options, with %s replaced in MachineOptionsWithName.
    let Command::Create {
        options,
        driver,
        reason,
        ..
    } = &w.commands[0]
    else {
        panic!("first command is a creation");
    };
    assert_eq!(driver, "fake");
    assert_eq!(*reason, Reason::IdleCapacity);
    assert_eq!(options[0], "fake-size=small");
    assert!(options[1].starts_with("fake-label=runner-abcdefghi-auto-"));
}

#[test]
fn created_names_follow_the_filter_and_the_seed() {
    let run = || {
        let mut w = World::new(policy(idle(3, 600), limits(0, 0, 0)));
        w.acquire();
        w.disk.iter().cloned().collect::<Vec<_>>()
    };
    let a = run();
    assert_eq!(a, run(), "same seed, same names");
    for n in &a {
        assert!(drover::engine::naming::matches_filter(n, FILTER));
        let suffix = n.strip_prefix("runner-abcdefghi-auto-").unwrap();
        let (secs, hex) = suffix.split_once('-').unwrap();
        assert_eq!(secs, t(0).timestamp().to_string());
        assert_eq!(hex.len(), 8);
        assert!(hex
            .chars()
            .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase()));
    }
}

#[test]
fn quirk5_adopted_machine_counts_one_build_and_goes_at_once_with_max_builds_1() {
    let m = name(1);
    let mut w =
        World::new(policy(idle(0, 600), limits(0, 1, 0))).with_disk(std::slice::from_ref(&m));
    let o = w.acquire();
    assert_eq!(o.report.adopted, vec![m.clone()]);
    assert_eq!(
        removal_reasons(&o),
        vec![(m.clone(), Reason::TooManyBuilds)]
    );
    assert!(!w.disk.contains(&m));
    assert!(
        w.engine.machine(&m).is_none(),
        "record deleted after removal"
    );
}

#[test]
fn quirk1_removals_depend_on_listing_order_against_partial_counters() {
    let names: Vec<String> = (1..=3).map(name).collect();
    let mut w = World::new(policy(idle(1, 60), limits(0, 0, 0))).with_disk(&names);
    w.acquire(); // adopt all three at t=0
    w.engine.release(R, &names[2], w.now).unwrap(); // the acquired one back to Idle
    w.now = t(120);
    let o = w.acquire();
    // The first is safe (0 available before it), the later two are past IdleTime.
    assert_eq!(
        removal_reasons(&o),
        vec![
            (names[1].clone(), Reason::TooManyIdleMachines),
            (names[2].clone(), Reason::TooManyIdleMachines)
        ]
    );
    assert_eq!(o.result, AcquireResult::Machine(names[0].clone()));
}

#[test]
fn idle_time_is_strictly_greater() {
    let names: Vec<String> = (1..=2).map(name).collect();
    let mut w = World::new(policy(idle(1, 60), limits(0, 0, 0)));
    for n in &names {
        w.engine
            .track(
                TrackedMachine {
                    name: n.clone(),
                    state: MachineState::Idle,
                    used_count: 1,
                    used: t(0),
                    retry_count: 0,
                    runner: None,
                },
                t(0),
            )
            .unwrap();
    }
    w.disk.extend(names.iter().cloned());
    w.now = t(60);
    let o = w.acquire();
    assert!(
        o.report.removals.is_empty(),
        "exactly IdleTime is not past it"
    );
    w.engine.release(R, &names[1], t(0)).unwrap();
    w.now = t(61);
    let o = w.acquire();
    assert_eq!(
        removal_reasons(&o),
        vec![(names[1].clone(), Reason::TooManyIdleMachines)]
    );
    // The removal notice keeps the last use the record had (the log's `used` = idle time),
    // although the record's own last use becomes the removal start.
    w.drive();
    let last_used = w.notices.iter().find_map(|n| match n {
        Notice::Removing {
            name, last_used, ..
        } if name == &names[1] => Some(*last_used),
        _ => None,
    });
    assert_eq!(last_used, Some(t(0)));
}

#[test]
fn limit_removes_every_later_idle_machine_ignoring_idle_time() {
    let names: Vec<String> = (1..=4).map(name).collect();
    let mut w = World::new(policy(idle(5, 3600), limits(2, 0, 0))).with_disk(&names);
    let o = w.acquire();
    assert_eq!(
        removal_reasons(&o),
        vec![
            (names[2].clone(), Reason::TooManyMachines),
            (names[3].clone(), Reason::TooManyMachines)
        ]
    );
    // Removing machines still use limit slots: nothing is created.
    assert!(o.report.created.is_empty());
}

#[test]
fn the_pass_never_removes_busy_machines() {
    let names: Vec<String> = (1..=3).map(name).collect();
    let mut w = World::new(policy(idle(0, 0), limits(1, 1, 0)));
    for (n, state) in names.iter().zip([
        MachineState::Used,
        MachineState::Acquired,
        MachineState::Used,
    ]) {
        w.engine
            .track(
                TrackedMachine {
                    name: n.clone(),
                    state,
                    used_count: 5,
                    used: zero(),
                    retry_count: 0,
                    runner: None,
                },
                t(0),
            )
            .unwrap();
    }
    w.disk.extend(names.iter().cloned());
    let o = w.acquire();
    assert!(o.report.removals.is_empty());
}

fn zero() -> drover::engine::Time {
    drover::engine::zero_time()
}

#[test]
fn quirk6_on_demand_gate_is_idle_count_exactly_zero() {
    let mut w = World::new(policy(idle(0, 0), limits(0, 0, 0)));
    let o = w.acquire();
    assert_eq!(o.result, AcquireResult::NoMachine);
    assert!(o.report.created.is_empty());

    let mut w = World::new(policy(idle(-1, 0), limits(0, 0, 0)));
    let o = w.acquire();
    assert!(
        o.report.created.is_empty(),
        "negative IdleCount never pre-creates"
    );
    assert_eq!(o.result, AcquireResult::NoFreeMachines);
}

#[test]
fn idle_count_zero_at_the_limit_refuses_the_job() {
    let names: Vec<String> = (1..=2).map(name).collect();
    let mut w = World::new(policy(idle(0, 600), limits(2, 0, 0)));
    for n in &names {
        w.engine
            .track(
                TrackedMachine {
                    name: n.clone(),
                    state: MachineState::Used,
                    used_count: 1,
                    used: t(0),
                    retry_count: 0,
                    runner: None,
                },
                t(0),
            )
            .unwrap();
    }
    w.disk.extend(names.iter().cloned());
    let o = w.acquire();
    assert_eq!(o.result, AcquireResult::NoFreeMachines);
}

#[test]
fn quirk7_failed_checks_still_request_a_job_when_idle_was_counted() {
    let names: Vec<String> = (1..=2).map(name).collect();
    let mut w = World::new(policy(idle(2, 600), limits(2, 0, 0))).with_disk(&names);
    w.unreachable.extend(names.iter().cloned());
    let o = w.acquire();
    // Newest first; both fail and are removed as unavailable.
    assert_eq!(w.checks, vec![names[1].clone(), names[0].clone()]);
    assert_eq!(
        o.report.unavailable,
        vec![names[1].clone(), names[0].clone()]
    );
    assert_eq!(o.result, AcquireResult::NoMachine);
    assert!(w.notices.iter().any(|n| matches!(
        n,
        Notice::Removed {
            reason: Reason::MachineUnavailable,
            ..
        }
    )));
}

#[test]
fn connectivity_walk_continues_to_older_machines_and_caches_success_for_5_minutes() {
    let names: Vec<String> = (1..=2).map(name).collect();
    let mut w = World::new(policy(idle(2, 3600), limits(0, 0, 0))).with_disk(&names);
    w.unreachable.insert(names[1].clone());
    let o = w.acquire();
    assert_eq!(o.result, AcquireResult::Machine(names[0].clone()));
    assert_eq!(w.checks.len(), 2);
    w.engine.release(R, &names[0], w.now).unwrap();
    w.now = t(299);
    w.acquire();
    assert_eq!(w.checks.len(), 2, "cached: no new check within 5 min");
    w.engine.release(R, &names[0], w.now).unwrap();
    w.now = t(301);
    w.acquire();
    assert_eq!(w.checks.len(), 3);
}

#[test]
fn quirk8_release_removes_on_max_builds_whatever_the_state() {
    let m = name(1);
    let mut w = World::new(policy(idle(1, 600), limits(0, 2, 0)));
    w.engine
        .track(
            TrackedMachine {
                name: m.clone(),
                state: MachineState::Acquired,
                used_count: 2,
                used: t(0),
                retry_count: 0,
                runner: None,
            },
            t(0),
        )
        .unwrap();
    w.engine.release(R, &m, t(10)).unwrap();
    w.drive();
    assert!(w.notices.iter().any(|n| matches!(
        n,
        Notice::Removing {
            reason: Reason::ReleaseTooManyBuilds,
            ..
        }
    )));
    assert_eq!(Reason::ReleaseTooManyBuilds.to_string(), "Too many builds");
    assert_eq!(Reason::TooManyBuilds.to_string(), "too many builds");
}

#[test]
fn a_job_story_use_then_release_counts_builds_and_keeps_the_machine_idle() {
    let mut w = World::new(policy(idle(1, 600), limits(0, 3, 0)));
    w.acquire();
    w.now = t(5);
    let o = w.acquire();
    let AcquireResult::Machine(m) = o.result else {
        panic!("a machine after creation");
    };
    w.engine.use_machine(&m, t(6)).unwrap();
    assert_eq!(w.state(&m), Some(MachineState::Used));
    w.engine.release(R, &m, t(100)).unwrap();
    let rec = w.engine.machine(&m).unwrap();
    assert_eq!(
        (rec.state, rec.used_count, rec.used),
        (MachineState::Idle, 1, t(100))
    );
    assert!(w.engine.claim_availability(R).unwrap());
}

#[test]
fn acquired_machine_released_after_an_empty_job_request_keeps_ageing() {
    let mut w = World::new(policy(idle(1, 600), limits(0, 0, 0)));
    w.acquire();
    let o = w.acquire();
    let AcquireResult::Machine(m) = o.result else {
        panic!("machine");
    };
    let used_before = w.engine.machine(&m).unwrap().used;
    w.engine.release(R, &m, t(500)).unwrap();
    assert_eq!(w.engine.machine(&m).unwrap().used, used_before);
}

#[test]
fn failed_creation_is_removed_with_failed_to_create() {
    let mut w = World::new(policy(idle(1, 600), limits(0, 0, 0)));
    w.fail_creates = 1;
    w.acquire();
    assert!(w
        .notices
        .iter()
        .any(|n| matches!(n, Notice::CreationFailed { .. })));
    assert!(w.notices.iter().any(|n| matches!(
        n,
        Notice::Removed {
            reason: Reason::FailedToCreate,
            gave_up: false,
            ..
        }
    )));
}

#[test]
fn max_growth_rate_bounds_a_pass_and_queues_on_demand_creations() {
    let mut w = World::new(policy(idle(5, 600), limits(0, 0, 2)));
    w.create_latency = 100;
    let o = w.acquire();
    assert_eq!(o.report.created.len(), 2);
    // Two on-demand creations wait in the coordinator: still only 2 Create commands.
    let a = w.engine.create_on_demand(R, w.now).unwrap();
    w.engine.create_on_demand(R, w.now).unwrap();
    w.drive();
    assert_eq!(w.count(|c| matches!(c, Command::Create { .. })), 2);
    assert_eq!(w.state(&a), Some(MachineState::Creating));
    w.advance(100);
    assert_eq!(w.count(|c| matches!(c, Command::Create { .. })), 4);
    assert!(w.commands.iter().any(|c| matches!(c,
        Command::Create { name, reason: Reason::OnDemand, .. } if *name == a)));
}

#[test]
fn quirk9_negative_max_growth_rate_deadlocks_creations() {
    let mut w = World::new(policy(idle(2, 600), limits(0, 0, -1)));
    let o = w.acquire();
    assert_eq!(
        o.report.created.len(),
        2,
        "the strategy treats it as unlimited"
    );
    assert_eq!(w.count(|c| matches!(c, Command::Create { .. })), 0);
    w.advance(3600);
    assert_eq!(w.count(|c| matches!(c, Command::Create { .. })), 0);
    assert!(w
        .notices
        .iter()
        .any(|n| matches!(n, Notice::Warning(s) if s.contains("forever"))));
    let o = w.acquire();
    assert_eq!(o.report.counts.creating, 2);
}

#[test]
fn removal_retries_30s_apart_gets_stuck_after_3_and_gives_up_with_one_force_remove() {
    let mut p = policy(idle(0, 0), limits(0, 0, 0));
    p.max_removal_attempts = 4;
    let mut w = World::new(p);
    // A created machine carries MaxRemovalAttempts (adopted ones get the default, 30).
    let created = w.engine.create_on_demand(R, t(0)).unwrap();
    w.drive();
    w.rm_failures.insert(created.clone(), 100);
    // Its uncached connectivity check fails: "machine is unavailable".
    let mut step = w
        .engine
        .begin_find(R, std::slice::from_ref(&created), t(0))
        .unwrap();
    while let drover::engine::FindStep::CheckConnectivity { id, .. } = step {
        step = w.engine.find_connectivity_result(id, false, t(0)).unwrap();
    }
    w.drive();
    let removes = |w: &World| {
        w.commands
            .iter()
            .filter(|c| matches!(c, Command::Remove { name, .. } if *name == created))
            .count()
    };
    assert_eq!(removes(&w), 1);
    w.advance(29);
    assert_eq!(removes(&w), 1, "retry waits 30 s");
    w.advance(1);
    assert_eq!(removes(&w), 2);
    w.advance(30);
    assert_eq!(removes(&w), 3);
    assert!(w.engine.machine(&created).unwrap().is_stuck());
    let gauge = w.engine.machine_states(w.now);
    assert_eq!(gauge[0].1.stuck_on_removing, 1);
    w.advance(30);
    assert_eq!(removes(&w), 4);
    w.advance(30);
    assert_eq!(removes(&w), 4, "MaxRemovalAttempts 4: give up");
    assert_eq!(
        w.count(|c| matches!(c, Command::ForceRemove { gave_up: true, .. })),
        1
    );
    assert!(w.engine.machine(&created).is_none());
    assert!(w.notices.iter().any(|n| matches!(
        n,
        Notice::Removed {
            gave_up: true,
            reason: Reason::MachineUnavailable,
            ..
        }
    )));
}

#[test]
fn stuck_machines_are_removed_one_at_a_time() {
    let mut w = World::new(policy(idle(0, 0), limits(0, 0, 0)));
    let names: Vec<String> = (1..=2).map(name).collect();
    for n in &names {
        w.engine
            .track(
                TrackedMachine {
                    name: n.clone(),
                    state: MachineState::Idle,
                    used_count: 1,
                    used: t(0),
                    retry_count: 0,
                    runner: None,
                },
                t(0),
            )
            .unwrap();
        w.rm_failures.insert(n.clone(), 3);
    }
    w.disk.extend(names.iter().cloned());
    w.unreachable.extend(names.iter().cloned());
    let mut step = w.engine.begin_find(R, &names, t(0)).unwrap();
    while let drover::engine::FindStep::CheckConnectivity { id, .. } = step {
        step = w.engine.find_connectivity_result(id, false, t(0)).unwrap();
    }
    // Hold Stop results back to see the lock: answer by hand.
    let mut stops = Vec::new();
    for _ in 0..3 {
        while let Some(c) = w.engine.poll_command() {
            match c {
                Command::CheckExists { name, .. } => {
                    w.engine.handle(Event::Exists { name, exists: true }, w.now)
                }
                Command::Stop { name, .. } => w.engine.handle(Event::Stopped { name }, w.now),
                Command::Remove { name, .. } => {
                    w.engine.handle(Event::Removed { name, ok: false }, w.now)
                }
                other => panic!("unexpected {other:?}"),
            }
        }
        w.now += chrono::TimeDelta::seconds(30);
        w.engine.handle(Event::Tick, w.now);
    }
    // Both are stuck now; the 4th attempt: only one Stop goes out.
    while let Some(c) = w.engine.poll_command() {
        match c {
            Command::CheckExists { name, .. } => {
                w.engine.handle(Event::Exists { name, exists: true }, w.now)
            }
            Command::Stop { name, .. } => stops.push(name),
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(stops.len(), 1, "one stuck removal at a time");
    w.engine.handle(
        Event::Stopped {
            name: stops[0].clone(),
        },
        w.now,
    );
    let Some(Command::Remove { name, .. }) = w.engine.poll_command() else {
        panic!("remove after stop");
    };
    w.engine.handle(Event::Removed { name, ok: true }, w.now);
    assert!(
        matches!(w.engine.poll_command(), Some(Command::Stop { .. })),
        "lock handed over"
    );
}

#[test]
fn removal_of_a_machine_already_gone_needs_no_stop_or_rm() {
    let m = name(1);
    let mut w = World::new(policy(idle(0, 0), limits(0, 1, 0)));
    let o = w
        .engine
        .begin_acquire(R, std::slice::from_ref(&m), t(0))
        .unwrap();
    assert!(matches!(o, AcquireStep::Done(_)));
    // The provider says it does not exist (disk is empty in this world).
    w.drive();
    assert_eq!(
        w.count(|c| matches!(c, Command::Stop { .. } | Command::Remove { .. })),
        0
    );
    assert!(w.engine.machine(&m).is_none());
}

#[test]
fn quirk10_drain_removes_busy_machines_and_max_retries_0_still_retries_3_times() {
    let mut w = World::new(policy(idle(0, 0), limits(0, 0, 0)));
    let names: Vec<String> = (1..=2).map(name).collect();
    for (n, state) in names
        .iter()
        .zip([MachineState::Used, MachineState::Acquired])
    {
        w.engine
            .track(
                TrackedMachine {
                    name: n.clone(),
                    state,
                    used_count: 1,
                    used: t(0),
                    retry_count: 0,
                    runner: None,
                },
                t(0),
            )
            .unwrap();
    }
    w.disk.extend(names.iter().cloned());
    w.force_fails = true;
    w.engine.begin_drain(
        DrainSettings {
            enabled: true,
            concurrency: 0,
            max_retries: 0,
            retry_backoff_secs: 0,
            shutdown_timeout_secs: 600,
        },
        w.now,
    );
    w.advance(600);
    let forces = w.count(|c| matches!(c, Command::ForceRemove { gave_up: false, .. }));
    assert_eq!(forces, 8, "4 attempts each (5 s, 10 s, 15 s apart)");
    let report = w.notices.iter().find_map(|n| match n {
        Notice::DrainFinished(r) => Some(*r),
        _ => None,
    });
    let report = report.expect("drain finished");
    assert_eq!((report.succeeded, report.failed), (0, 2));
    assert_eq!(
        w.state(&names[0]),
        Some(MachineState::Removing),
        "records stay"
    );
    // A later drain picks the failed ones up again.
    w.force_fails = false;
    w.notices.clear();
    w.engine.begin_drain(
        DrainSettings {
            enabled: true,
            concurrency: 1,
            max_retries: 1,
            retry_backoff_secs: 1,
            shutdown_timeout_secs: 60,
        },
        w.now,
    );
    w.advance(1);
    assert!(w.notices.iter().any(|n| matches!(n,
        Notice::DrainFinished(r) if r.succeeded == 2 && r.failed == 0)));
    assert!(w.disk.is_empty());
}

#[test]
fn drain_waits_for_a_creation_and_times_out() {
    let mut w = World::new(policy(idle(1, 0), limits(0, 0, 0)));
    w.create_latency = 100;
    w.acquire();
    w.engine.begin_drain(
        DrainSettings {
            enabled: true,
            concurrency: 3,
            max_retries: 3,
            retry_backoff_secs: 5,
            shutdown_timeout_secs: 30,
        },
        w.now,
    );
    w.advance(31);
    let report = w.notices.iter().find_map(|n| match n {
        Notice::DrainFinished(r) => Some(*r),
        _ => None,
    });
    let report = report.expect("drain finished");
    assert!(report.timed_out);
    assert_eq!(report.failed, 1);
    assert!(w.notices.iter().any(|n| matches!(n,
        Notice::Warning(s) if s == "Drain operation cancelled or timed out")));
}

#[test]
fn drain_succeeds_after_a_creation_finishes() {
    let mut w = World::new(policy(idle(1, 0), limits(0, 0, 0)));
    w.create_latency = 10;
    w.acquire();
    w.engine.begin_drain(
        DrainSettings {
            enabled: true,
            concurrency: 3,
            max_retries: 3,
            retry_backoff_secs: 5,
            shutdown_timeout_secs: 300,
        },
        w.now,
    );
    w.advance(20);
    assert!(w.notices.iter().any(|n| matches!(n,
        Notice::DrainFinished(r) if r.succeeded == 1 && r.failed == 0)));
    assert!(w.disk.is_empty());
    assert_eq!(w.engine.machines().count(), 0);
}

#[test]
fn state_gauge_leaves_out_idle_machines_not_listed_for_20_minutes() {
    let m = name(1);
    let mut w =
        World::new(policy(idle(1, 99999), limits(0, 0, 0))).with_disk(std::slice::from_ref(&m));
    w.acquire();
    w.engine.release(R, &m, w.now).unwrap();
    assert_eq!(w.engine.machine_states(t(1200))[0].1.idle, 1);
    assert_eq!(w.engine.machine_states(t(1201))[0].1.idle, 0);
    assert!(
        w.engine.machine(&m).is_some(),
        "left out of the gauge, not removed"
    );
}

#[test]
fn quirk11_names_outside_the_filter_are_ignored_not_removed() {
    let mut w = World::new(policy(idle(0, 0), limits(0, 1, 0))).with_disk(&[
        "runner-other-auto-1-aa".to_string(),
        "test-machine".to_string(),
    ]);
    let o = w.acquire();
    assert_eq!(o.report.ignored, 2);
    assert!(o.report.removals.is_empty());
    assert!(w.engine.machines().next().is_none());
}

#[test]
fn a_second_pass_cannot_start_while_one_waits_for_a_check() {
    let m = name(1);
    let mut e = Engine::new(vec![policy(idle(1, 600), limits(0, 0, 0))], 1);
    let step = e.begin_acquire(R, std::slice::from_ref(&m), t(0)).unwrap();
    assert!(matches!(
        step,
        drover::engine::AcquireStep::CheckConnectivity { .. }
    ));
    assert!(e.begin_acquire(R, std::slice::from_ref(&m), t(0)).is_err());
    let done = e.connectivity_result(&m, true, t(0)).unwrap();
    assert!(matches!(done, AcquireStep::Done(_)));
    assert!(e.begin_acquire(R, &[m], t(1)).is_ok());
}

#[test]
fn missing_machine_name_fails_the_pass() {
    let mut p = policy(idle(1, 600), limits(0, 0, 0));
    p.machine_name.clear();
    let mut e = Engine::new(vec![p], 1);
    let AcquireStep::Done(o) = e.begin_acquire(R, &[name(1)], t(0)).unwrap() else {
        panic!("done at once");
    };
    assert_eq!(o.result.error_text(), Some("missing Machine options"));
}

#[test]
fn stray_and_duplicate_events_are_ignored_and_ticks_are_harmless() {
    let mut w = World::new(policy(idle(1, 600), limits(0, 0, 0)));
    w.acquire();
    let before: Vec<_> = w
        .engine
        .machines()
        .map(|m| (m.name.clone(), m.state))
        .collect();
    w.engine.handle(
        Event::Created {
            name: "nope".into(),
            ok: true,
        },
        t(1),
    );
    w.engine.handle(
        Event::Removed {
            name: before[0].0.to_string(),
            ok: true,
        },
        t(1),
    );
    w.engine.handle(Event::Tick, t(1));
    w.engine.handle(Event::Tick, t(1));
    let after: Vec<_> = w
        .engine
        .machines()
        .map(|m| (m.name.clone(), m.state))
        .collect();
    assert_eq!(before, after);
    assert!(w.engine.poll_command().is_none());
}

#[test]
fn state_gauge_emits_one_empty_series_without_machines_and_groups_by_labels() {
    let w = World::new(policy(idle(0, 0), limits(0, 0, 0)));
    let g = w.engine.machine_states(t(0));
    assert_eq!(
        g,
        vec![(drover::engine::TargetLabels::default(), Default::default())]
    );

    let mut w = World::new(policy(idle(2, 600), limits(0, 0, 0)));
    w.create_latency = 10;
    w.acquire();
    let names: Vec<String> = w.engine.machines().map(|m| m.name.to_string()).collect();
    let zone = drover::engine::TargetLabels {
        zone: "europe-west1-b".into(),
        region: "europe-west1".into(),
        project: "p".into(),
        machine_type: "n1".into(),
    };
    w.engine.handle(
        Event::Labels {
            name: names[0].clone(),
            labels: zone.clone(),
        },
        w.now,
    );
    let g = w.engine.machine_states(w.now);
    assert_eq!(g.len(), 2);
    assert!(g.iter().all(|(_, c)| c.creating == 1));
    assert!(g.iter().any(|(l, _)| *l == zone));
    w.advance(10);
    assert!(w.notices.iter().any(|n| matches!(n,
        Notice::Created { labels, .. } if *labels == zone)));
}

#[test]
fn a_config_reload_fixing_max_growth_rate_releases_queued_creations() {
    let mut w = World::new(policy(idle(2, 600), limits(0, 0, -1)));
    w.acquire();
    assert_eq!(w.count(|c| matches!(c, Command::Create { .. })), 0);
    w.engine
        .set_policy(R, policy(idle(2, 600), limits(0, 0, 0)))
        .unwrap();
    w.drive();
    assert_eq!(w.count(|c| matches!(c, Command::Create { .. })), 2);
}

#[test]
fn a_runner_added_by_a_reload_gets_the_next_id_and_its_own_idle_machines() {
    let mut w = World::new(policy(idle(1, 600), limits(0, 0, 0)));
    w.acquire();
    let added = RunnerPolicy {
        token: "glrt-zyxwvutsrqp".into(),
        ..policy(idle(2, 600), limits(0, 0, 0))
    };
    let id = w.engine.add_runner(added);
    assert_eq!(id, RunnerId(1));
    assert_eq!(
        w.engine.filter(R),
        Some(FILTER),
        "the first runner is unchanged"
    );
    let names: Vec<String> = w.disk.iter().cloned().collect();
    let step = w.engine.begin_acquire(id, &names, w.now).unwrap();
    assert!(matches!(step, AcquireStep::Done(_)), "{step:?}");
    w.drive();
    let created: Vec<String> = w
        .commands
        .iter()
        .filter_map(|c| match c {
            Command::Create { name, .. } => Some(name.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(created.len(), 3, "{created:?}");
    assert!(
        created[0].starts_with("runner-abcdefghi-auto-"),
        "{created:?}"
    );
    assert!(
        created[1..]
            .iter()
            .all(|n| n.starts_with("runner-zyxwvutsr-auto-")),
        "{created:?}"
    );
}

#[test]
fn the_engine_can_move_into_a_driver_task() {
    fn send<T: Send + 'static>() {}
    send::<Engine>();
    send::<Command>();
    send::<drover::engine::AcquireOutcome>();
}
