//! Facts the manager sees, turned into upstream's metrics (`src/metrics` knows the names):
//! engine notices and the machine-state gauge, GitLab API responses per runner.

use std::time::Duration;

use crate::engine::{Counts, Notice, TargetLabels};
use crate::gitlab::{Endpoint, RequestObserver};
use crate::metrics::{AutoscalingMetrics, MachineAction, Metrics, RunnerMetrics};

use super::pool::NoticeObserver;

/// Engine notices → `gitlab_runner_autoscaling_*`.
pub struct AutoscalingObserver(pub AutoscalingMetrics);

impl NoticeObserver for AutoscalingObserver {
    fn notice(&self, notice: &Notice) {
        let (action, labels) = match notice {
            Notice::Created { labels, .. } => (MachineAction::Created, labels),
            Notice::CreationFailed { labels, .. } => (MachineAction::CreationFailed, labels),
            Notice::Used { labels, .. } => (MachineAction::Used, labels),
            Notice::Removed { labels, .. } => (MachineAction::Removed, labels),
            Notice::Reconciled { decision, .. } => {
                self.0.reconcile_decision(decision.as_str());
                return;
            }
            _ => return,
        };
        self.0.action(action, labels);
    }

    fn machine_states(&self, states: &[(TargetLabels, Counts)]) {
        self.0.set_machine_states(states.to_vec());
    }
}

/// One runner's GitLab API responses → `gitlab_runner_api_request_*`.
pub struct ApiObserver {
    /// The runner's metrics.
    pub runner: RunnerMetrics,
    /// The registry (for the retry counter).
    pub metrics: Metrics,
}

impl RequestObserver for ApiObserver {
    fn request(&self, endpoint: Endpoint, method: &str, status: u16, duration: Duration) {
        if endpoint.is_labelled_upstream() {
            self.runner
                .api_request(endpoint.as_str(), method, status, duration);
        }
    }

    fn attempts(&self, path: &str, method: &str, attempts: u32) {
        self.metrics.api_attempts(path, method, attempts);
    }
}
