//! GitLab I/O: the runner ⇄ GitLab job API.
//!
//! The job payload's wire types live in [`crate::job`], the one job model that both this
//! module (which receives it) and the executor (which runs it) use; it is re-exported here as
//! `gitlab::job` for callers that think of it as GitLab's wire format. This module knows
//! nothing about machines, and the executor never imports it.

pub use crate::job;
