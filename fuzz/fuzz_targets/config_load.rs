//! Fuzz target: arbitrary bytes into the config loader. Whatever the input, loading must
//! return `Ok` or a typed error whose message renders, never panic; a loaded config must
//! answer the effective-idle questions check-config asks.
#![no_main]

use chrono::{TimeZone, Utc};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    match drover::config::load_str(data, "fuzz.toml") {
        Ok(loaded) => {
            let now = Utc.with_ymd_and_hms(2026, 3, 2, 10, 0, 0).single().unwrap_or_default();
            for runner in &loaded.config.runners {
                if let Some(machine) = &runner.machine {
                    let _ = machine.effective_idle(now);
                    let _ = machine.idle_changes(now, 3, chrono::Duration::days(2));
                }
            }
            for w in &loaded.warnings {
                let _ = w.render("fuzz.toml", "warning");
            }
        }
        Err(e) => {
            let _ = e.to_string();
            let _ = e.errors();
        }
    }
});
