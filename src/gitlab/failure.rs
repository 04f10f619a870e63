//! Failure-reason negotiation (spec §6.6): send only what the job's
//! `features.failure_reasons` lists (plus the three always-accepted reasons), else the
//! compatibility mapping, else `unknown_failure`. Reasons are wire strings.

/// Reasons every GitLab accepts.
pub const ALWAYS_SUPPORTED: [&str; 3] = [
    "script_failure",
    "runner_system_failure",
    "job_execution_timeout",
];

/// The fallback for an older reason GitLab may not know.
fn compatible(reason: &str) -> Option<&'static str> {
    Some(match reason {
        "image_pull_failure" => "runner_system_failure",
        "runner_configuration_error" => "script_failure",
        "runner_external_dependency_failure" => "runner_system_failure",
        "runner_interrupted" | "job_canceled" => "unknown_failure",
        _ => return None,
    })
}

/// The reason to send for `reason` given the job's supported list. Empty means
/// `script_failure`.
pub fn negotiate(reason: &str, supported: &[String]) -> String {
    let reason = if reason.is_empty() {
        "script_failure"
    } else {
        reason
    };
    let ok = |r: &str| ALWAYS_SUPPORTED.contains(&r) || supported.iter().any(|s| s == r);
    if ok(reason) {
        return reason.to_owned();
    }
    match compatible(reason) {
        Some(mapped) if ok(mapped) => mapped.to_owned(),
        _ => "unknown_failure".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mapping() {
        let rails: Vec<String> = ["unknown_failure", "script_failure", "runner_interrupted"]
            .map(String::from)
            .to_vec();
        assert_eq!(negotiate("", &rails), "script_failure");
        assert_eq!(
            negotiate("job_execution_timeout", &[]),
            "job_execution_timeout"
        );
        assert_eq!(
            negotiate("image_pull_failure", &rails),
            "runner_system_failure"
        );
        assert_eq!(
            negotiate("runner_interrupted", &rails),
            "runner_interrupted"
        );
        assert_eq!(negotiate("runner_interrupted", &[]), "unknown_failure");
        assert_eq!(negotiate("job_canceled", &rails), "unknown_failure");
        assert_eq!(
            negotiate("runner_configuration_error", &[]),
            "script_failure"
        );
        assert_eq!(negotiate("made_up", &rails), "unknown_failure");
    }
}
