//! Upstream's labels on every container and volume the executor creates
//! (`com.gitlab.gitlab-runner.*`), so `clear-docker-cache` and operators' filters keep working.
//! Pure: builds maps from job facts.

use std::collections::HashMap;

/// The label prefix.
pub const PREFIX: &str = "com.gitlab.gitlab-runner.";

/// Facts every label set carries.
#[derive(Debug, Clone, Default)]
pub struct LabelFacts {
    /// Job ID.
    pub job_id: i64,
    /// Job URL.
    pub job_url: String,
    /// Commit.
    pub sha: String,
    /// Previous commit.
    pub before_sha: String,
    /// Ref.
    pub r#ref: String,
    /// Job timeout in seconds.
    pub timeout_secs: u64,
    /// Project ID.
    pub project_id: i64,
    /// The pipeline ID: the payload's when positive, else `CI_PIPELINE_ID` (may be empty).
    pub pipeline_id: String,
    /// Short runner token.
    pub runner_id: String,
    /// Runner system ID.
    pub system_id: String,
    /// The job's slot (`runner.local_id`, `project.runner_id`).
    pub slot: crate::executor::paths::Slot,
}

/// Formats seconds as a Go duration string (`3600` → `1h0m0s`).
pub fn go_duration(secs: u64) -> String {
    let (h, m, s) = (secs / 3600, (secs % 3600) / 60, secs % 60);
    if h > 0 {
        format!("{h}h{m}m{s}s")
    } else if m > 0 {
        format!("{m}m{s}s")
    } else {
        format!("{s}s")
    }
}

/// The label facts of a job: its payload's, the job URL from `CI_PROJECT_URL` (else the
/// repository URL without credentials and `.git`), the pipeline ID from the payload when
/// positive, else `CI_PIPELINE_ID` (possibly empty), the runner's short token and system ID,
/// and the job's slots (`runner.local_id`, `project.runner_id`).
pub fn job_facts(
    payload: &crate::job::JobPayload,
    vars: &crate::executor::script::variables::VarList,
    short_token: &str,
    system_id: &str,
    slot: crate::executor::paths::Slot,
    timeout_secs: u64,
) -> LabelFacts {
    let project_url = vars.value("CI_PROJECT_URL").unwrap_or_else(|| {
        let u = crate::executor::paths::url_without_credentials(&payload.git_info.repo_url);
        u.strip_suffix(".git").unwrap_or(&u).to_string()
    });
    LabelFacts {
        job_id: payload.id,
        job_url: format!("{project_url}/-/jobs/{}", payload.id),
        sha: payload.git_info.sha.clone(),
        before_sha: payload.git_info.before_sha.clone(),
        r#ref: payload.git_info.r#ref.clone(),
        timeout_secs,
        project_id: payload.job_info.project_id,
        pipeline_id: match payload.job_info.pipeline_id {
            id if id > 0 => id.to_string(),
            _ => vars.value("CI_PIPELINE_ID").unwrap_or_default(),
        },
        runner_id: short_token.to_string(),
        system_id: system_id.to_string(),
        slot,
    }
}

impl LabelFacts {
    /// The default labels plus `type=<kind>` and any extra prefixed labels.
    pub fn labels(&self, kind: &str, extra: &[(&str, &str)]) -> HashMap<String, String> {
        let mut m = HashMap::new();
        let mut put = |k: &str, v: String| {
            m.insert(format!("{PREFIX}{k}"), v);
        };
        put("job.id", self.job_id.to_string());
        put("job.url", self.job_url.clone());
        put("job.sha", self.sha.clone());
        put("job.before_sha", self.before_sha.clone());
        put("job.ref", self.r#ref.clone());
        put("job.timeout", go_duration(self.timeout_secs));
        put("project.id", self.project_id.to_string());
        put("project.runner_id", self.slot.project.to_string());
        put("pipeline.id", self.pipeline_id.clone());
        put("runner.id", self.runner_id.clone());
        put("runner.local_id", self.slot.runner.to_string());
        put("runner.system_id", self.system_id.clone());
        put("managed", "true".to_string());
        if !kind.is_empty() {
            put("type", kind.to_string());
        }
        for (k, v) in extra {
            put(k, (*v).to_string());
        }
        m
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(go_duration(3600), "1h0m0s");
        assert_eq!(go_duration(90), "1m30s");
        assert_eq!(go_duration(0), "0s");
    }

    #[test]
    fn labels_have_prefix_and_type() {
        let l = LabelFacts {
            job_id: 7,
            ..Default::default()
        }
        .labels("build", &[]);
        assert_eq!(l["com.gitlab.gitlab-runner.job.id"], "7");
        assert_eq!(l["com.gitlab.gitlab-runner.type"], "build");
        assert_eq!(l["com.gitlab.gitlab-runner.managed"], "true");
    }
}
