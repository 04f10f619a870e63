//! In-machine execution: runs one job on a Docker Engine as upstream's Docker executor does.
//!
//! (API documentation in progress.)

pub mod build_settings;
pub mod connect;
pub mod error;
pub mod labels;
pub mod paths;
pub mod script;
pub mod settings;
pub mod trace;
