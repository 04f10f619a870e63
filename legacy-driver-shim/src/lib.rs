//! `legacy-driver-shim`: a drover provider plugin that drives the archived `docker-machine`
//! executable exactly as GitLab Runner's docker+machine executor does.
//!
//! This crate owns one concern: machine lifecycle through docker-machine. It never decides how
//! many machines there should be (that is drover's autoscaling engine) and never runs a shell:
//! every option travels as its own argv element, so nothing in a config can inject a command.

#![warn(missing_docs)]

pub mod argv;
