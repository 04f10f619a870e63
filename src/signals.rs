//! Stop signals, for every command that runs jobs: the one place that says which signal
//! means what.
//!
//! [`StopSignals`] listens for SIGINT, SIGTERM, SIGQUIT and SIGHUP from the moment it is
//! installed (so none of them kills the process any more) and yields them by name. Two
//! policies read them:
//!
//! * [`one_job_policy`], for a single job run in the foreground (`exec-job`):
//!   [`cancel_on_signals`] applies it to a [`JobControl`]: the executor then stops the job and
//!   removes its containers and volumes within its clean-up budget, and the command exits
//!   non-zero;
//! * [`daemon_policy`], gitlab-runner's for `drover run` and `run-single` (gitlab-api.md
//!   §7.5–7.6): SIGQUIT graceful, SIGTERM/SIGINT forceful, SIGHUP reload. The manager's
//!   lifecycle applies it by cancelling its stop and interrupt tokens.

use std::io;
use std::sync::{Arc, Mutex};

use tokio::signal::unix::{signal, Signal, SignalKind};

use crate::executor::JobControl;
use crate::output::errln;

/// A stop signal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopSignal {
    /// SIGINT (Ctrl-C).
    Int,
    /// SIGTERM (`kill`, `docker stop`, systemd).
    Term,
    /// SIGQUIT.
    Quit,
    /// SIGHUP (the terminal went away; the daemon's reload).
    Hup,
}

impl StopSignal {
    /// `SIGTERM`, …
    pub fn name(self) -> &'static str {
        match self {
            StopSignal::Int => "SIGINT",
            StopSignal::Term => "SIGTERM",
            StopSignal::Quit => "SIGQUIT",
            StopSignal::Hup => "SIGHUP",
        }
    }
}

/// The four stop signals, caught from [`StopSignals::install`] on.
pub struct StopSignals {
    int: Signal,
    term: Signal,
    quit: Signal,
    hup: Signal,
}

impl StopSignals {
    /// Starts catching the signals (inside a tokio runtime).
    pub fn install() -> io::Result<Self> {
        Ok(StopSignals {
            int: signal(SignalKind::interrupt())?,
            term: signal(SignalKind::terminate())?,
            quit: signal(SignalKind::quit())?,
            hup: signal(SignalKind::hangup())?,
        })
    }

    /// The next signal received.
    pub async fn recv(&mut self) -> StopSignal {
        loop {
            let got = tokio::select! {
                s = self.int.recv() => s.map(|()| StopSignal::Int),
                s = self.term.recv() => s.map(|()| StopSignal::Term),
                s = self.quit.recv() => s.map(|()| StopSignal::Quit),
                s = self.hup.recv() => s.map(|()| StopSignal::Hup),
            };
            if let Some(s) = got {
                return s;
            }
            // A closed stream cannot happen while the runtime lives; wait for the others.
            tokio::task::yield_now().await;
        }
    }
}

/// What the `drover run` daemon does on a signal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DaemonAction {
    /// Stop requesting jobs and wait for the running ones (a second one is ignored).
    Graceful,
    /// Abort running jobs (`runner_interrupted`) within `shutdown_timeout`.
    Forceful,
    /// Reload the config file (ignored once shutdown began, and by `run-single`).
    Reload,
}

/// gitlab-runner's daemon policy (gitlab-api.md §7.5–7.6): SIGQUIT graceful, SIGTERM and
/// SIGINT forceful, SIGHUP reload.
pub fn daemon_policy(signal: StopSignal) -> DaemonAction {
    match signal {
        StopSignal::Quit => DaemonAction::Graceful,
        StopSignal::Term | StopSignal::Int => DaemonAction::Forceful,
        StopSignal::Hup => DaemonAction::Reload,
    }
}

/// What a foreground job does on a signal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobAction {
    /// Stop the user script; after_script and clean-up still run (GitLab's cancel).
    Cancel,
    /// Stop everything at once; clean-up still runs.
    Abort,
    /// Already aborting: clean-up is under way and bounded.
    Nothing,
}

/// The policy for one job in the foreground (`exec-job`): a first SIGINT or SIGQUIT cancels
/// gracefully (after_script runs), a first SIGTERM or SIGHUP aborts (as gitlab-runner's
/// forceful shutdown; a hung-up terminal cannot wait for after_script), and any further signal
/// aborts. Every path ends in clean-up within the executor's bounded budget.
pub fn one_job_policy(signal: StopSignal, earlier: usize) -> JobAction {
    match (earlier, signal) {
        (0, StopSignal::Int | StopSignal::Quit) => JobAction::Cancel,
        (0, _) | (1, _) => JobAction::Abort,
        _ => JobAction::Nothing,
    }
}

/// The first signal received, for the command's final message and exit code.
#[derive(Debug, Clone, Default)]
pub struct Received(Arc<Mutex<Option<StopSignal>>>);

impl Received {
    /// The first signal, if any arrived.
    pub fn first(&self) -> Option<StopSignal> {
        self.0.lock().ok().and_then(|g| *g)
    }

    fn note(&self, s: StopSignal) {
        if let Ok(mut g) = self.0.lock() {
            g.get_or_insert(s);
        }
    }
}

/// Applies [`one_job_policy`] to `control` for every signal, saying on stderr what happens.
/// Runs until the task is dropped.
pub async fn cancel_on_signals(mut signals: StopSignals, control: JobControl, received: Received) {
    let mut count = 0;
    loop {
        let s = signals.recv().await;
        received.note(s);
        match one_job_policy(s, count) {
            JobAction::Cancel => {
                errln!(
                    "drover: {}: cancelling the job gracefully (after_script still runs, then clean-up); send it again to abort",
                    s.name()
                );
                control.cancel.cancel();
            }
            JobAction::Abort => {
                errln!(
                    "drover: {}: aborting the job; removing its containers and volumes",
                    s.name()
                );
                control.abort.cancel();
            }
            JobAction::Nothing => errln!(
                "drover: {}: clean-up is already under way and ends within its time limit",
                s.name()
            ),
        }
        count += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_signal_ends_in_cancel_or_abort() {
        use StopSignal::*;
        assert_eq!(one_job_policy(Int, 0), JobAction::Cancel);
        assert_eq!(one_job_policy(Quit, 0), JobAction::Cancel);
        assert_eq!(one_job_policy(Term, 0), JobAction::Abort);
        assert_eq!(one_job_policy(Hup, 0), JobAction::Abort);
        for s in [Int, Term, Quit, Hup] {
            assert_eq!(one_job_policy(s, 1), JobAction::Abort);
            assert_eq!(one_job_policy(s, 2), JobAction::Nothing);
        }
    }

    #[test]
    fn the_daemon_quits_gracefully_on_sigquit_aborts_on_sigterm_and_sigint_and_reloads_on_sighup() {
        use StopSignal::*;
        assert_eq!(daemon_policy(Quit), DaemonAction::Graceful);
        assert_eq!(daemon_policy(Term), DaemonAction::Forceful);
        assert_eq!(daemon_policy(Int), DaemonAction::Forceful);
        assert_eq!(daemon_policy(Hup), DaemonAction::Reload);
    }
}
