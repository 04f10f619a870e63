//! Job routing for `drover run`: the manager moves facts between GitLab ([`source`]), the
//! autoscaling engine and the provider plugins ([`pool`]) and the Docker executor, following
//! upstream's run loop ([`runloop`]), signals and config reloads ([`lifecycle`]).
//!
//! Nothing here does scaling arithmetic (the engine decides), speaks GitLab's wire format
//! (`src/gitlab` does) or runs containers (the executor does).

pub mod gitlab_link;
pub mod lifecycle;
pub mod observe;
pub mod pool;
pub mod runloop;
pub mod source;
