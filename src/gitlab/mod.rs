//! GitLab I/O: the wire types of the runner ⇄ GitLab job API.
//!
//! This module only models what GitLab sends and expects; it does not run jobs (that is
//! [`crate::executor`]) and, for now, does no HTTP (the API client lands in its own issue).
//! The executor and `drover exec-job` read [`job::JobPayload`] from here.

pub mod job;
