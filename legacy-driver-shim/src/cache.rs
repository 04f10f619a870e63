//! The can-connect cache: positive `config NAME` results are trusted for a while (upstream:
//! 5 minutes); negative results are never cached. Time comes in as an argument, so the cache
//! is tested without sleeping. `ops.rs` drives it.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Upstream's cache lifetime.
pub const DEFAULT_TTL: Duration = Duration::from_secs(300);

/// Positive connectivity results per machine.
#[derive(Debug)]
pub struct ConnectCache {
    ttl: Duration,
    seen: Mutex<HashMap<String, Instant>>,
}

impl ConnectCache {
    /// A cache trusting positives for `ttl` (zero disables it).
    pub fn new(ttl: Duration) -> Self {
        ConnectCache {
            ttl,
            seen: Mutex::new(HashMap::new()),
        }
    }

    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<String, Instant>> {
        self.seen.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether `name` connected less than the ttl before `now`.
    pub fn fresh(&self, name: &str, now: Instant) -> bool {
        match self.map().get(name) {
            Some(at) => now.saturating_duration_since(*at) < self.ttl,
            None => false,
        }
    }

    /// Records a positive result at `now`.
    pub fn record(&self, name: &str, now: Instant) {
        if !self.ttl.is_zero() {
            self.map().insert(name.to_string(), now);
        }
    }

    /// Forgets `name` (negative result, removal).
    pub fn forget(&self, name: &str) {
        self.map().remove(name);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positives_expire_and_can_be_forgotten() {
        let c = ConnectCache::new(DEFAULT_TTL);
        let t0 = Instant::now();
        assert!(!c.fresh("m", t0));
        c.record("m", t0);
        assert!(c.fresh("m", t0 + Duration::from_secs(299)));
        assert!(!c.fresh("m", t0 + Duration::from_secs(300)));
        c.forget("m");
        assert!(!c.fresh("m", t0));
        let off = ConnectCache::new(Duration::ZERO);
        off.record("m", t0);
        assert!(!off.fresh("m", t0));
    }
}
