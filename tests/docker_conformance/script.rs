//! The call list of a scripted Engine: the calls upstream's mock expects, answered in order,
//! with a record of every call that did not match and of expected calls never made.

use std::collections::VecDeque;
use std::fmt::Debug;
use std::sync::Mutex;

pub struct Script<C> {
    calls: Mutex<VecDeque<C>>,
    problems: Mutex<Vec<String>>,
}

impl<C: Clone + Debug> Script<C> {
    pub fn new(calls: &[C]) -> Self {
        Script {
            calls: Mutex::new(calls.iter().cloned().collect()),
            problems: Mutex::new(Vec::new()),
        }
    }

    /// The next expected call, if any is left.
    pub fn next(&self) -> Option<C> {
        self.calls.lock().ok().and_then(|mut s| s.pop_front())
    }

    /// Records a call that did not match.
    pub fn problem(&self, p: String) {
        if let Ok(mut v) = self.problems.lock() {
            v.push(p);
        }
    }

    /// Unexpected calls, then expected calls never made.
    pub fn problems(&self) -> Vec<String> {
        let mut out = self.problems.lock().map(|v| v.clone()).unwrap_or_default();
        if let Ok(rest) = self.calls.lock() {
            out.extend(
                rest.iter()
                    .map(|c| format!("expected call not made: {c:?}")),
            );
        }
        out
    }
}
