//! Property tests: invariants of the Acquire pass and of creations over random pools,
//! settings and event sequences.

mod engine_support;

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use chrono::TimeDelta;
use drover::engine::{
    AcquireResult, AcquireStep, Command, Engine, Event, IdleSettings, Limits, MachineState, Reason,
    TrackedMachine,
};
use engine_support::{name, policy, t, R};
use proptest::prelude::*;

#[derive(Debug, Clone)]
struct Setup {
    idle: IdleSettings,
    limits: Limits,
    machines: Vec<(Option<MachineState>, i64, i64, u32, bool)>,
}

fn state() -> impl Strategy<Value = Option<MachineState>> {
    prop_oneof![
        Just(None),
        Just(Some(MachineState::Idle)),
        Just(Some(MachineState::Acquired)),
        Just(Some(MachineState::Creating)),
        Just(Some(MachineState::Used)),
        Just(Some(MachineState::Removing)),
    ]
}

fn setup() -> impl Strategy<Value = Setup> {
    (
        -1i64..6,
        0i64..4,
        prop_oneof![Just(0.0), 0.0f64..2.0],
        0i64..900,
        0i64..8,
        0i64..4,
        -1i64..3,
        prop::collection::vec(
            (state(), 0i64..5, 0i64..2000, 0u32..5, any::<bool>()),
            0..14,
        ),
    )
        .prop_map(|(ic, min, f, it, limit, mb, growth, machines)| Setup {
            idle: IdleSettings {
                idle_count: ic,
                idle_count_min: min,
                idle_scale_factor: f,
                idle_time: it,
                active_section: None,
            },
            limits: Limits {
                limit,
                max_builds: mb,
                max_growth_rate: growth,
            },
            machines,
        })
}

/// Builds an engine with the machines tracked, and returns the on-disk names.
fn build(s: &Setup, seed: u64) -> (Engine, Vec<String>, HashMap<String, bool>) {
    let mut e = Engine::new(vec![policy(s.idle, s.limits)], seed);
    let mut disk = Vec::new();
    let mut reach = HashMap::new();
    for (i, (st, used_count, ago, retry, reachable)) in s.machines.iter().enumerate() {
        let n = name(i as u32);
        reach.insert(n.clone(), *reachable);
        if let Some(st) = st {
            e.track(
                TrackedMachine {
                    name: n.clone(),
                    state: *st,
                    used_count: *used_count,
                    used: t(2000 - ago),
                    retry_count: *retry,
                    runner: None,
                },
                t(0),
            )
            .unwrap();
        }
        if *st != Some(MachineState::Creating) {
            disk.push(n);
        }
    }
    (e, disk, reach)
}

fn run_pass(
    e: &mut Engine,
    disk: &[String],
    reach: &HashMap<String, bool>,
) -> drover::engine::AcquireOutcome {
    let now = t(2000);
    let mut step = e.begin_acquire(R, disk, now).unwrap();
    loop {
        match step {
            AcquireStep::CheckConnectivity { name } => {
                let ok = reach.get(&name).copied().unwrap_or(true);
                step = e.connectivity_result(&name, ok, now).unwrap();
            }
            AcquireStep::Done(o) => return *o,
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn pass_invariants(s in setup(), seed in any::<u64>()) {
        let (mut e, disk, reach) = build(&s, seed);
        let before: HashMap<String, MachineState> =
            e.machines().map(|m| (m.name.to_string(), m.state)).collect();
        let o = run_pass(&mut e, &disk, &reach);
        let r = &o.report;
        for c in &r.created {
            if s.limits.limit > 0 {
                prop_assert!(c.counts_before.total() < s.limits.limit,
                    "creation at total {} >= limit {}", c.counts_before.total(), s.limits.limit);
            }
            if s.limits.max_growth_rate > 0 {
                prop_assert!(c.counts_before.creating < s.limits.max_growth_rate);
            }
        }
        for d in &r.removals {
            let was = before.get(&d.name).copied().unwrap_or(MachineState::Idle);
            prop_assert_eq!(was, MachineState::Idle, "removed a busy machine");
            prop_assert!(matches!(d.reason,
                Reason::TooManyBuilds | Reason::TooManyMachines | Reason::TooManyIdleMachines));
        }
        // The pass counters cover every listed machine plus the creations it started.
        let listed = r.input_counts.total();
        prop_assert_eq!(r.counts.total(), listed + r.created.len() as i64);
        prop_assert_eq!(r.can_create_idle,
            drover::engine::policy::can_create(&s.limits, &s.idle, &r.input_counts, false));
        match &o.result {
            AcquireResult::Machine(m) => {
                prop_assert_eq!(before.get(m).copied().unwrap_or(MachineState::Idle),
                    MachineState::Idle);
                prop_assert_eq!(e.machine(m).map(|x| x.state), Some(MachineState::Acquired));
                prop_assert!(reach.get(m).copied().unwrap_or(true));
            }
            AcquireResult::NoFreeMachines => prop_assert_eq!(r.counts.idle, 0),
            AcquireResult::NoMachine => {}
            AcquireResult::MissingMachineOptions => prop_assert!(false, "MachineName is set"),
        }
        // Negative IdleCount never pre-creates.
        if s.idle.idle_count < 0 {
            prop_assert!(r.created.is_empty());
        }
        // Same inputs, same seed: same decisions.
        let (mut e2, _, _) = build(&s, seed);
        let o2 = run_pass(&mut e2, &disk, &reach);
        prop_assert_eq!(o, o2);
    }

    #[test]
    fn creations_in_flight_never_exceed_max_growth_rate(
        ic in 0i64..8,
        growth in -1i64..4,
        ops in prop::collection::vec(0u8..5, 1..60),
    ) {
        let limits = Limits { limit: 0, max_builds: 0, max_growth_rate: growth };
        let idle = IdleSettings { idle_count: ic, idle_time: 30, ..IdleSettings::default() };
        let mut p = policy(idle, limits);
        p.idle = Arc::new(idle);
        let mut e = Engine::new(vec![p], 1);
        let mut now = t(0);
        let mut disk: BTreeSet<String> = BTreeSet::new();
        let mut in_flight: Vec<String> = Vec::new();
        for op in ops {
            match op {
                0 => {
                    let names: Vec<String> = disk.iter().cloned().collect();
                    let mut step = e.begin_acquire(R, &names, now).unwrap();
                    while let AcquireStep::CheckConnectivity { name } = step {
                        step = e.connectivity_result(&name, true, now).unwrap();
                    }
                }
                1 => { e.create_on_demand(R, now).unwrap(); }
                2 | 3 if !in_flight.is_empty() => {
                    let n = in_flight.remove(0);
                    let ok = op == 2;
                    if ok { disk.insert(n.clone()); }
                    e.handle(Event::Created { name: n, ok }, now);
                }
                _ => {
                    now += TimeDelta::seconds(31);
                    e.handle(Event::Tick, now);
                }
            }
            while let Some(c) = e.poll_command() {
                match c {
                    Command::Create { name, .. } => in_flight.push(name),
                    Command::CheckExists { name, .. } => {
                        let exists = disk.contains(&name);
                        e.handle(Event::Exists { name, exists }, now);
                    }
                    Command::Stop { name, .. } => e.handle(Event::Stopped { name }, now),
                    Command::Remove { name, .. } => {
                        disk.remove(&name);
                        e.handle(Event::Removed { name, ok: true }, now);
                    }
                    Command::ForceRemove { name, .. } => {
                        disk.remove(&name);
                        e.handle(Event::ForceRemoved { name, ok: true }, now);
                    }
                }
            }
            if growth > 0 {
                prop_assert!(in_flight.len() as i64 <= growth,
                    "{} creations in flight > MaxGrowthRate {}", in_flight.len(), growth);
            }
            if growth < 0 {
                prop_assert!(in_flight.is_empty(), "negative MaxGrowthRate must deadlock");
            }
            let creating = e.machines().filter(|m| m.state == MachineState::Creating).count();
            prop_assert!(creating >= in_flight.len());
        }
    }
}

/// A reference model of updateMachines (spec §6 step 4), written from the spec with the
/// policy functions, checked against the engine over sequences of changing listings (new
/// names anywhere, names gone, reordering), so listing shortcuts cannot change a decision.
mod reference {
    use super::*;
    use drover::engine::policy::{should_remove, MachineFacts, RemoveVerdict};
    use drover::engine::Counts;

    pub fn expected(
        e: &Engine,
        listing: &[String],
        idle: &IdleSettings,
        limits: &Limits,
        now: drover::engine::Time,
    ) -> (Vec<(String, Reason)>, Counts) {
        let mut counts = Counts::default();
        let mut removals = Vec::new();
        for n in listing {
            let (state, used_count, used, retry) = match e.machine(n) {
                Some(m) => (m.state, m.used_count, m.used, m.retry_count),
                None => (MachineState::Idle, 1, now, 0),
            };
            let facts = MachineFacts {
                state,
                used_count,
                used,
            };
            match should_remove(&facts, limits, idle, &counts, now) {
                Some(v) => {
                    removals.push((
                        n.clone(),
                        match v {
                            RemoveVerdict::TooManyBuilds => Reason::TooManyBuilds,
                            RemoveVerdict::TooManyMachines => Reason::TooManyMachines,
                            RemoveVerdict::TooManyIdleMachines => Reason::TooManyIdleMachines,
                        },
                    ));
                    counts.add(MachineState::Removing, 0);
                }
                None => counts.add(state, retry),
            }
        }
        for m in e.machines() {
            if m.state == MachineState::Creating && !listing.iter().any(|n| *n == *m.name) {
                counts.add(MachineState::Creating, m.retry_count);
            }
        }
        (removals, counts)
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(150))]

    #[test]
    fn pass_matches_the_reference_over_changing_listings(
        s in setup(),
        steps in prop::collection::vec((0u8..4, 0usize..20, 1i64..400), 1..12),
    ) {
        let (mut e, mut disk, _) = build(&s, 5);
        let mut now = t(2000);
        let mut fresh = 1000u32;
        for (op, pos, dt) in steps {
            match op {
                0 if !disk.is_empty() => { disk.remove(pos % disk.len()); }
                1 => {
                    fresh += 1;
                    let at = pos % (disk.len() + 1);
                    disk.insert(at, name(fresh));
                }
                2 if disk.len() > 1 => { let l = disk.len(); disk.swap(pos % l, (pos + 1) % l); }
                _ => {}
            }
            now += TimeDelta::seconds(dt);
            let (want_removals, want_counts) =
                reference::expected(&e, &disk, &s.idle, &s.limits, now);
            let mut step = e.begin_acquire(R, &disk, now).unwrap();
            let outcome = loop {
                match step {
                    AcquireStep::CheckConnectivity { name } => {
                        step = e.connectivity_result(&name, true, now).unwrap();
                    }
                    AcquireStep::Done(o) => break *o,
                }
            };
            let got: Vec<(String, Reason)> = outcome.report.removals.iter()
                .map(|r| (r.name.clone(), r.reason)).collect();
            prop_assert_eq!(got, want_removals);
            let mut counts = outcome.report.counts;
            counts.creating -= outcome.report.created.len() as i64;
            prop_assert_eq!(counts, want_counts);
            // Give the acquired machine back so the next pass sees it Idle again.
            if let AcquireResult::Machine(m) = &outcome.result {
                e.release(R, m, now).unwrap();
            }
            while e.poll_command().is_some() {}
        }
    }
}
