//! docker+machine's autoscaling metrics (autoscale-semantics.md §11): every series carries the
//! constant label `executor="docker+machine"`. The manager feeds plain values: the engine's
//! `machine_states()` snapshot, one call per `Notice` that is an action, and the durations it
//! measured around the provider commands.

use std::sync::{Arc, Mutex};

use prometheus::core::{Collector, Desc};
use prometheus::proto::MetricFamily;
use prometheus::{Histogram, HistogramOpts, IntCounterVec, IntGaugeVec, Opts, Registry};

use super::MetricsError;
use crate::engine::{Counts, TargetLabels};

const EXECUTOR: &str = "docker+machine";
const TARGET_LABELS: [&str; 4] = [
    "target_zone",
    "target_region",
    "target_project",
    "target_machine_type",
];
const STATES_NAME: &str = "gitlab_runner_autoscaling_machine_states";
const STATES_HELP: &str = "docker+machine machines by state and target";

/// `…_machine_stopping_duration_seconds`, `…_machine_removal_duration_seconds` and
/// `…_machine_failed_creation_duration_seconds` buckets.
pub const MACHINE_DURATION_BUCKETS: [f64; 10] =
    [1.0, 3.0, 5.0, 10.0, 30.0, 50.0, 60.0, 80.0, 90.0, 120.0];

/// `…_machine_creation_duration_seconds` buckets: from 30 s, each 1.25 times the previous, 10
/// of them.
pub fn creation_buckets() -> Vec<f64> {
    let mut b = Vec::with_capacity(10);
    let mut v = 30.0_f64;
    for _ in 0..10 {
        b.push(v);
        v *= 1.25;
    }
    b
}

/// An action counted in `gitlab_runner_autoscaling_actions_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MachineAction {
    /// A creation succeeded (`Notice::Created`).
    Created,
    /// A creation failed (`Notice::CreationFailed`).
    CreationFailed,
    /// A machine started a job (`Notice::Used`).
    Used,
    /// A machine's record was deleted after removal (`Notice::Removed`).
    Removed,
}

impl MachineAction {
    /// The `action` label value.
    pub fn as_str(self) -> &'static str {
        match self {
            MachineAction::Created => "created",
            MachineAction::CreationFailed => "creation-failed",
            MachineAction::Used => "used",
            MachineAction::Removed => "removed",
        }
    }
}

/// The docker+machine metrics. Cheap to clone.
#[derive(Clone)]
pub struct AutoscalingMetrics {
    actions: IntCounterVec,
    reconcile: IntCounterVec,
    states: Arc<Mutex<Vec<(TargetLabels, Counts)>>>,
    creation: Histogram,
    stopping: Histogram,
    removal: Histogram,
    failed_creation: Histogram,
}

impl std::fmt::Debug for AutoscalingMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AutoscalingMetrics").finish_non_exhaustive()
    }
}

fn histogram(
    r: &Registry,
    name: &str,
    help: &str,
    buckets: Vec<f64>,
) -> Result<Histogram, MetricsError> {
    let h = Histogram::with_opts(
        HistogramOpts::new(name, help)
            .const_label("executor", EXECUTOR)
            .buckets(buckets),
    )?;
    r.register(Box::new(h.clone()))?;
    Ok(h)
}

fn target_values(l: &TargetLabels) -> [&str; 4] {
    [&l.zone, &l.region, &l.project, &l.machine_type]
}

impl AutoscalingMetrics {
    pub(crate) fn new(r: &Registry) -> Result<AutoscalingMetrics, MetricsError> {
        let mut action_labels = vec!["action"];
        action_labels.extend(TARGET_LABELS);
        let actions = IntCounterVec::new(
            Opts::new(
                "gitlab_runner_autoscaling_actions_total",
                "docker+machine machine actions: created, creation-failed, used, removed",
            )
            .const_label("executor", EXECUTOR),
            &action_labels,
        )?;
        r.register(Box::new(actions.clone()))?;
        // drover's own (upstream has no reconciliation): one count per decision.
        let reconcile = IntCounterVec::new(
            Opts::new(
                "drover_machine_reconcile_decisions_total",
                "Reconciliation decisions about machines no record tracks (orphan removal \
                 retries), by decision",
            )
            .const_label("executor", EXECUTOR),
            &["decision"],
        )?;
        r.register(Box::new(reconcile.clone()))?;
        let states = Arc::new(Mutex::new(Vec::new()));
        r.register(Box::new(StatesCollector::new(states.clone())?))?;
        let m = MACHINE_DURATION_BUCKETS.to_vec();
        Ok(AutoscalingMetrics {
            actions,
            reconcile,
            states,
            creation: histogram(
                r,
                "gitlab_runner_autoscaling_machine_creation_duration_seconds",
                "How long successful machine creations took",
                creation_buckets(),
            )?,
            stopping: histogram(
                r,
                "gitlab_runner_autoscaling_machine_stopping_duration_seconds",
                "How long machine stops took, failed attempts included",
                m.clone(),
            )?,
            removal: histogram(
                r,
                "gitlab_runner_autoscaling_machine_removal_duration_seconds",
                "How long machine removals took, failed attempts included",
                m.clone(),
            )?,
            failed_creation: histogram(
                r,
                "gitlab_runner_autoscaling_machine_failed_creation_duration_seconds",
                "How long failed machine creations took",
                m,
            )?,
        })
    }

    /// Counts an action on a machine with `labels`.
    pub fn action(&self, action: MachineAction, labels: &TargetLabels) {
        let [z, r, p, t] = target_values(labels);
        self.actions
            .with_label_values(&[action.as_str(), z, r, p, t])
            .inc();
    }

    /// Counts one reconciliation decision (`drover_machine_reconcile_decisions_total`).
    pub fn reconcile_decision(&self, decision: &str) {
        self.reconcile.with_label_values(&[decision]).inc();
    }

    /// Replaces the machine-state snapshot with the engine's `machine_states(now)` (the whole
    /// pool). An empty snapshot shows the 6 states at 0 with empty target labels.
    pub fn set_machine_states(&self, states: Vec<(TargetLabels, Counts)>) {
        *self.states.lock().unwrap_or_else(|p| p.into_inner()) = states;
    }

    /// A creation succeeded after `seconds`.
    pub fn creation_duration(&self, seconds: f64) {
        self.creation.observe(seconds);
    }

    /// A creation failed after `seconds`.
    pub fn failed_creation_duration(&self, seconds: f64) {
        self.failed_creation.observe(seconds);
    }

    /// A stop attempt ended (well or not) after `seconds`.
    pub fn stopping_duration(&self, seconds: f64) {
        self.stopping.observe(seconds);
    }

    /// A removal attempt ended (well or not) after `seconds`.
    pub fn removal_duration(&self, seconds: f64) {
        self.removal.observe(seconds);
    }
}

struct StatesCollector {
    states: Arc<Mutex<Vec<(TargetLabels, Counts)>>>,
    descs: Vec<Desc>,
}

impl StatesCollector {
    fn new(states: Arc<Mutex<Vec<(TargetLabels, Counts)>>>) -> Result<Self, MetricsError> {
        let descs = Self::vec()?.desc().into_iter().cloned().collect();
        Ok(StatesCollector { states, descs })
    }

    fn vec() -> prometheus::Result<IntGaugeVec> {
        let mut labels = vec!["state"];
        labels.extend(TARGET_LABELS);
        IntGaugeVec::new(
            Opts::new(STATES_NAME, STATES_HELP).const_label("executor", EXECUTOR),
            &labels,
        )
    }
}

impl Collector for StatesCollector {
    fn desc(&self) -> Vec<&Desc> {
        self.descs.iter().collect()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        let Ok(vec) = Self::vec() else {
            return Vec::new();
        };
        let mut snapshot = self
            .states
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        if snapshot.is_empty() {
            snapshot.push(Default::default());
        }
        for (labels, c) in &snapshot {
            let [z, r, p, t] = target_values(labels);
            for (state, n) in [
                ("acquired", c.acquired),
                ("creating", c.creating),
                ("idle", c.idle),
                ("used", c.used),
                ("removing", c.removing),
                ("stuck-on-removing", c.stuck_on_removing),
            ] {
                vec.with_label_values(&[state, z, r, p, t]).add(n);
            }
        }
        vec.collect()
    }
}
