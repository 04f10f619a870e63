//! Differential property test of the indexed Acquire pass (issue 24 item 2): two engines with
//! the same records and seed, one driven with `begin_acquire` over the full listing (the
//! walk), the other with `listing_insert` / `listing_remove` and `begin_acquire_listed` (the
//! indexes), through the same random sequences of passes, provider answers, uses, releases,
//! outside listing changes and time. Every command, notice, pass outcome, gauge and record
//! must agree, step by step.

mod engine_support;

use std::collections::{BTreeSet, VecDeque};

use chrono::TimeDelta;
use drover::engine::{
    AcquireOutcome, AcquireStep, Command, Engine, Event, IdleSettings, Limits, MachineState,
    Notice, Time, TrackedMachine,
};
use engine_support::{name, policy, t, R};
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Op {
    /// An Acquire pass; the connectivity checks answer from the bits (cycled).
    Pass(u8),
    /// Time goes on.
    Wait(i64),
    /// Deliver the oldest provider answer; `ok` for creations and removals.
    Deliver(bool),
    /// `Use` on the n-th machine (in name order) if it is Idle or Acquired.
    Use(usize),
    /// `Release` of the n-th machine.
    Release(usize),
    /// A name the engine never made appears in the listing (a pass adopts it).
    Appear(u32),
    /// The n-th listed name leaves the listing (outside deletion).
    Vanish(usize),
    /// Timer tick.
    Tick,
    /// An Acquire pass during which, at its first connectivity check, the oldest provider
    /// answer arrives (a creation finishing lists a machine) and a job releases the n-th
    /// machine.
    Interleaved(u8, usize),
}

/// Names for the records and outside machines of a test: a third as the engine makes them, a
/// third that tie on their 16 bytes after the filter's prefix (the indexes' inline order key)
/// and differ after, a third shorter than that key (zero padding).
fn varied_name(i: u32) -> String {
    match i % 3 {
        0 => name(i),
        1 => format!("runner-abcdefghi-auto-1700000000-aaaa{i:04x}"),
        _ => format!("runner-abcdefghi-auto-1700{i:03}"),
    }
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => any::<u8>().prop_map(Op::Pass),
        2 => (1i64..1200).prop_map(Op::Wait),
        5 => any::<bool>().prop_map(Op::Deliver),
        3 => (0usize..24).prop_map(Op::Use),
        3 => (0usize..24).prop_map(Op::Release),
        1 => (100u32..140).prop_map(Op::Appear),
        1 => (0usize..24).prop_map(Op::Vanish),
        1 => Just(Op::Tick),
        3 => (any::<u8>(), 0usize..24).prop_map(|(b, n)| Op::Interleaved(b, n)),
    ]
}

#[derive(Debug, Clone)]
struct Setup {
    idle: IdleSettings,
    limits: Limits,
    machines: Vec<(Option<MachineState>, i64, i64, u32)>,
    ops: Vec<Op>,
}

fn state() -> impl Strategy<Value = Option<MachineState>> {
    prop_oneof![
        Just(None),
        Just(Some(MachineState::Idle)),
        Just(Some(MachineState::Idle)),
        Just(Some(MachineState::Acquired)),
        Just(Some(MachineState::Used)),
        Just(Some(MachineState::Removing)),
    ]
}

fn setup() -> impl Strategy<Value = Setup> {
    (
        -1i64..7,
        prop_oneof![4 => Just(0.0), 1 => 0.0f64..2.0],
        0i64..900,
        prop_oneof![Just(0i64), 1i64..12],
        prop_oneof![Just(0i64), 1i64..4],
        prop_oneof![Just(0i64), 1i64..3],
        prop::collection::vec((state(), 0i64..3, 0i64..2000, 0u32..5), 0..16),
        prop::collection::vec(op(), 1..60),
    )
        .prop_map(|(ic, f, it, limit, mb, growth, machines, ops)| Setup {
            idle: IdleSettings {
                idle_count: ic,
                idle_count_min: 0,
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
            ops,
        })
}

/// The two engines and the fake provider they share.
struct Pair {
    walk: Engine,
    indexed: Engine,
    disk: BTreeSet<String>,
    answers: VecDeque<Command>,
    now: Time,
}

#[derive(Debug, PartialEq)]
struct Record {
    name: String,
    state: MachineState,
    used_count: i64,
    used: Time,
    retry_count: u32,
}

fn records(e: &Engine) -> Vec<Record> {
    let mut v: Vec<Record> = e
        .machines()
        .map(|m| Record {
            name: m.name.to_string(),
            state: m.state,
            used_count: m.used_count,
            used: m.used,
            retry_count: m.retry_count,
        })
        .collect();
    v.sort_by(|a, b| a.name.cmp(&b.name));
    v
}

impl Pair {
    fn new(s: &Setup) -> Pair {
        let mut walk = Engine::new(vec![policy(s.idle, s.limits)], 7);
        let mut indexed = Engine::new(vec![policy(s.idle, s.limits)], 7);
        let mut disk = BTreeSet::new();
        for (i, (st, used_count, ago, retry)) in s.machines.iter().enumerate() {
            let n = varied_name(i as u32);
            if let Some(st) = st {
                for e in [&mut walk, &mut indexed] {
                    e.track(
                        TrackedMachine {
                            name: n.clone(),
                            state: *st,
                            used_count: *used_count,
                            used: t(-ago),
                            retry_count: *retry,
                            runner: None,
                        },
                        t(0),
                    )
                    .unwrap();
                }
            }
            disk.insert(n.clone());
            indexed.listing_insert(&n);
        }
        Pair {
            walk,
            indexed,
            disk,
            answers: VecDeque::new(),
            now: t(0),
        }
    }

    /// Drains both engines and checks that they said the same.
    fn settle(&mut self) -> Result<(), TestCaseError> {
        let walk: Vec<Command> = std::iter::from_fn(|| self.walk.poll_command()).collect();
        let indexed: Vec<Command> = std::iter::from_fn(|| self.indexed.poll_command()).collect();
        prop_assert_eq!(&walk, &indexed);
        let walk_n: Vec<Notice> = std::iter::from_fn(|| self.walk.poll_notice()).collect();
        let indexed_n: Vec<Notice> = std::iter::from_fn(|| self.indexed.poll_notice()).collect();
        prop_assert_eq!(&walk_n, &indexed_n);
        for n in &walk_n {
            match n {
                Notice::Created { name, .. } => self.list(name, true),
                Notice::Removed { name, .. } => self.list(name, false),
                _ => {}
            }
        }
        self.answers.extend(walk);
        prop_assert_eq!(records(&self.walk), records(&self.indexed));
        prop_assert_eq!(
            self.walk.machine_states(self.now),
            self.indexed.machine_states(self.now)
        );
        prop_assert_eq!(self.walk.poll_timeout(), self.indexed.poll_timeout());
        Ok(())
    }

    fn list(&mut self, name: &str, listed: bool) {
        if listed {
            self.disk.insert(name.to_string());
            self.indexed.listing_insert(name);
        } else {
            self.disk.remove(name);
            self.indexed.listing_remove(name);
        }
    }

    fn pass(&mut self, bits: u8, between: Option<usize>) -> Result<(), TestCaseError> {
        let listing: Vec<String> = self.disk.iter().cloned().collect();
        let now = self.now;
        let mut walk_first = self.walk.begin_acquire(R, &listing, now).unwrap();
        let mut indexed_first = self.indexed.begin_acquire_listed(R, now).unwrap();
        if let (Some(n), AcquireStep::CheckConnectivity { .. }) = (between, &walk_first) {
            prop_assert_eq!(&walk_first, &indexed_first);
            self.apply(&Op::Deliver(true))?;
            self.apply(&Op::Release(n))?;
            // Answer the check the pass waits for, then go on as usual.
            let AcquireStep::CheckConnectivity { name } = walk_first.clone() else {
                return Ok(());
            };
            let ok = bits & 1 == 1;
            walk_first = self.walk.connectivity_result(&name, ok, now).unwrap();
            indexed_first = self.indexed.connectivity_result(&name, ok, now).unwrap();
        }
        let run = |e: &mut Engine, first: AcquireStep| -> AcquireOutcome {
            let mut step = first;
            let mut i = 0u32;
            loop {
                match step {
                    AcquireStep::CheckConnectivity { name } => {
                        let ok = bits.rotate_right(i) & 1 == 1;
                        i += 1;
                        step = e.connectivity_result(&name, ok, now).unwrap();
                    }
                    AcquireStep::Done(o) => return *o,
                }
            }
        };
        let walk = run(&mut self.walk, walk_first);
        let indexed = run(&mut self.indexed, indexed_first);
        prop_assert_eq!(walk, indexed);
        Ok(())
    }

    fn nth(&self, n: usize) -> Option<String> {
        let names: Vec<String> = records(&self.walk).into_iter().map(|r| r.name).collect();
        if names.is_empty() {
            return None;
        }
        names.get(n % names.len()).cloned()
    }

    fn apply(&mut self, op: &Op) -> Result<(), TestCaseError> {
        let now = self.now;
        match op {
            Op::Pass(bits) => self.pass(*bits, None)?,
            Op::Interleaved(bits, n) => self.pass(*bits, Some(*n))?,
            Op::Wait(secs) => self.now += TimeDelta::seconds(*secs),
            Op::Deliver(ok) => {
                let Some(cmd) = self.answers.pop_front() else {
                    return Ok(());
                };
                let event = match cmd {
                    Command::Create { name, .. } => Event::Created { name, ok: *ok },
                    Command::CheckExists { name, .. } => {
                        let exists = self.disk.contains(&name);
                        Event::Exists { name, exists }
                    }
                    Command::Stop { name, .. } => Event::Stopped { name },
                    Command::Remove { name, .. } => {
                        if *ok {
                            self.list(&name, false);
                        }
                        Event::Removed { name, ok: *ok }
                    }
                    Command::ForceRemove { name, .. } => {
                        self.list(&name, false);
                        Event::ForceRemoved { name, ok: true }
                    }
                };
                self.walk.handle(event.clone(), now);
                self.indexed.handle(event, now);
            }
            Op::Use(n) => {
                if let Some(m) = self.nth(*n) {
                    let usable = self.walk.machine(&m).is_some_and(|x| {
                        matches!(x.state, MachineState::Idle | MachineState::Acquired)
                    });
                    if usable {
                        self.walk.use_machine(&m, now).unwrap();
                        self.indexed.use_machine(&m, now).unwrap();
                    }
                }
            }
            Op::Release(n) => {
                if let Some(m) = self.nth(*n) {
                    self.walk.release(R, &m, now).unwrap();
                    self.indexed.release(R, &m, now).unwrap();
                }
            }
            Op::Appear(n) => self.list(&varied_name(*n), true),
            Op::Vanish(n) => {
                let listed: Vec<String> = self.disk.iter().cloned().collect();
                if !listed.is_empty() {
                    let m = listed[n % listed.len()].clone();
                    self.list(&m, false);
                }
            }
            Op::Tick => {
                self.walk.handle(Event::Tick, now);
                self.indexed.handle(Event::Tick, now);
            }
        }
        self.settle()
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    /// The indexed pass decides exactly what the walk over the same listing decides.
    #[test]
    fn indexed_pass_matches_the_walk(s in setup()) {
        let mut pair = Pair::new(&s);
        pair.settle()?;
        for op in &s.ops {
            pair.apply(op)?;
        }
    }
}

/// One indexed pass at a glance: the Idle machines past IdleTime after the IdleCount-th
/// available machine go, newest first search finds the newest Idle one.
#[test]
fn an_indexed_pass_removes_and_finds_as_the_walk() {
    let s = Setup {
        idle: IdleSettings {
            idle_count: 2,
            idle_time: 600,
            ..IdleSettings::default()
        },
        limits: Limits::default(),
        machines: (0..6)
            .map(|i| {
                (
                    Some(MachineState::Idle),
                    0,
                    if i % 2 == 0 { 1200 } else { 10 },
                    0,
                )
            })
            .collect(),
        ops: vec![Op::Pass(0xff)],
    };
    let mut pair = Pair::new(&s);
    pair.settle().unwrap();
    let listing: Vec<String> = pair.disk.iter().cloned().collect();
    let step = pair.indexed.begin_acquire_listed(R, pair.now).unwrap();
    let AcquireStep::CheckConnectivity { name: checked } = step else {
        panic!("expected a connectivity check, got {step:?}");
    };
    assert_eq!(checked, listing[5]);
    let AcquireStep::Done(o) = pair
        .indexed
        .connectivity_result(&checked, true, pair.now)
        .unwrap()
    else {
        panic!("the pass should end");
    };
    let removed: Vec<&str> = o.report.removals.iter().map(|r| r.name.as_str()).collect();
    // Available before machine 2 is 2 (machines 0 and 1): machines 2 and 4 are past IdleTime.
    assert_eq!(removed, [listing[2].as_str(), listing[4].as_str()]);
}
