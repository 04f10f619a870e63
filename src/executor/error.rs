//! The executor's typed outcome: a job failure (the job's own doing: its script, its image,
//! its settings) is kept apart from a system failure (the Engine or the runner broke), because
//! the manager reacts differently to each. Nothing here talks to Docker or GitLab.

use std::fmt;

/// The failure reason reported to GitLab (`failure_reason` of the final job update).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum FailureReason {
    /// The user script exited non-zero.
    ScriptFailure,
    /// Executor, Docker or internal errors.
    RunnerSystemFailure,
    /// The job (or a stage) ran out of time.
    JobExecutionTimeout,
    /// An image could not be pulled.
    ImagePullFailure,
    /// Bad configuration (for example a pull policy that is not allowed).
    RunnerConfigurationError,
    /// An external dependency failed (registry, git server).
    RunnerExternalDependencyFailure,
    /// The runner was shut down while the job ran.
    RunnerInterrupted,
    /// The job was cancelled.
    JobCanceled,
    /// Nothing else applies.
    UnknownFailure,
}

impl FailureReason {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            FailureReason::ScriptFailure => "script_failure",
            FailureReason::RunnerSystemFailure => "runner_system_failure",
            FailureReason::JobExecutionTimeout => "job_execution_timeout",
            FailureReason::ImagePullFailure => "image_pull_failure",
            FailureReason::RunnerConfigurationError => "runner_configuration_error",
            FailureReason::RunnerExternalDependencyFailure => "runner_external_dependency_failure",
            FailureReason::RunnerInterrupted => "runner_interrupted",
            FailureReason::JobCanceled => "job_canceled",
            FailureReason::UnknownFailure => "unknown_failure",
        }
    }

    /// The reason to send to a GitLab that accepts `supported` (the payload's
    /// `features.failure_reasons`), mapped as upstream does when GitLab does not know it.
    pub fn for_gitlab(self, supported: &[String]) -> FailureReason {
        let always = matches!(
            self,
            FailureReason::ScriptFailure
                | FailureReason::RunnerSystemFailure
                | FailureReason::JobExecutionTimeout
                | FailureReason::UnknownFailure
        );
        if always || supported.iter().any(|s| s == self.as_str()) {
            return self;
        }
        match self {
            FailureReason::ImagePullFailure | FailureReason::RunnerExternalDependencyFailure => {
                FailureReason::RunnerSystemFailure
            }
            FailureReason::RunnerConfigurationError => FailureReason::ScriptFailure,
            _ => FailureReason::UnknownFailure,
        }
    }
}

impl fmt::Display for FailureReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A failure caused by the job: its script, its image or its settings.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct JobFailure {
    /// Reason reported to GitLab.
    pub reason: FailureReason,
    /// The script's exit code, when a script failed.
    pub exit_code: Option<i32>,
    /// What happened, as printed in the trace ("exit code 3").
    pub message: String,
}

impl JobFailure {
    /// A script that exited with `code`.
    pub fn script(code: i32) -> Self {
        JobFailure {
            reason: FailureReason::ScriptFailure,
            exit_code: Some(code),
            message: format!("exit code {code}"),
        }
    }

    /// A failure with a reason and a message.
    pub fn new(reason: FailureReason, message: impl Into<String>) -> Self {
        JobFailure {
            reason,
            exit_code: None,
            message: message.into(),
        }
    }
}

/// A failure of the runner or the Engine, not of the job.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SystemError {
    /// The Docker endpoint could not be reached or set up.
    #[error(transparent)]
    Connect(#[from] super::connect::ConnectError),
    /// A Docker API call failed.
    #[error("docker: {action}: {source}")]
    Docker {
        /// What drover was doing.
        action: String,
        /// Bollard's error.
        #[source]
        source: bollard::errors::Error,
    },
    /// The Engine answered something drover cannot use.
    #[error("docker: {0}")]
    Engine(String),
    /// A stage's container was removed from outside while drover used it.
    #[error("docker: container {container} was not found or was removed while {action}")]
    ContainerVanished {
        /// The container ID.
        container: String,
        /// What drover was doing.
        action: String,
    },
}

/// Whether the Engine answered 404 (no such container, image or volume).
pub(crate) fn not_found(e: &bollard::errors::Error) -> bool {
    matches!(
        e,
        bollard::errors::Error::DockerResponseServerError {
            status_code: 404,
            ..
        }
    )
}

impl SystemError {
    /// Wraps a bollard error with what drover was doing.
    pub fn docker(action: impl Into<String>, source: bollard::errors::Error) -> Self {
        SystemError::Docker {
            action: action.into(),
            source,
        }
    }
}

/// How a job ended when it did not succeed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum JobError {
    /// The job failed (script failure, timeout, cancel, bad image or settings).
    #[error("job failed: {0}")]
    Failed(JobFailure),
    /// The runner or the Engine failed.
    #[error("job failed (system failure): {0}")]
    System(#[from] SystemError),
}

impl JobError {
    /// The failure reason for GitLab, before mapping to its supported list.
    pub fn reason(&self) -> FailureReason {
        match self {
            JobError::Failed(f) => f.reason,
            JobError::System(_) => FailureReason::RunnerSystemFailure,
        }
    }

    /// The script exit code, if a script failed.
    pub fn exit_code(&self) -> Option<i32> {
        match self {
            JobError::Failed(f) => f.exit_code,
            JobError::System(_) => None,
        }
    }
}

impl From<JobFailure> for JobError {
    fn from(f: JobFailure) -> Self {
        JobError::Failed(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unsupported_reasons_map_like_upstream() {
        let none: Vec<String> = vec![];
        assert_eq!(
            FailureReason::JobCanceled.for_gitlab(&none),
            FailureReason::UnknownFailure
        );
        assert_eq!(
            FailureReason::ImagePullFailure.for_gitlab(&none),
            FailureReason::RunnerSystemFailure
        );
        assert_eq!(
            FailureReason::RunnerConfigurationError.for_gitlab(&none),
            FailureReason::ScriptFailure
        );
        let some = vec!["runner_configuration_error".to_string()];
        assert_eq!(
            FailureReason::RunnerConfigurationError.for_gitlab(&some),
            FailureReason::RunnerConfigurationError
        );
    }
}
