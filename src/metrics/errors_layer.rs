//! `gitlab_runner_errors_total{level}`: a `tracing` layer that counts warning and error events,
//! as upstream's logger hook counts log lines at warning level and above.

use prometheus::{IntCounter, IntCounterVec};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::layer::{Context, Layer};

/// Counts every `WARN` event as `level="warning"` and every `ERROR` event as `level="error"`.
/// Events the subscriber's level filter drops are not counted, as upstream counts only lines it
/// writes. Get one from [`Metrics::errors_layer`](super::Metrics::errors_layer).
#[derive(Clone, Debug)]
pub struct ErrorsLayer {
    warning: IntCounter,
    error: IntCounter,
}

impl ErrorsLayer {
    pub(crate) fn new(errors: &IntCounterVec) -> ErrorsLayer {
        ErrorsLayer {
            warning: errors.with_label_values(&["warning"]),
            error: errors.with_label_values(&["error"]),
        }
    }
}

impl<S: Subscriber> Layer<S> for ErrorsLayer {
    fn on_event(&self, event: &Event<'_>, _ctx: Context<'_, S>) {
        match *event.metadata().level() {
            Level::ERROR => self.error.inc(),
            Level::WARN => self.warning.inc(),
            _ => {}
        }
    }
}
