//! drover's own implementation of the `gitlab-runner-helper` commands the scripts call inside
//! the job's containers (`drover helper …`, behind `/usr/bin/gitlab-runner-helper` in drover's
//! helper image). Each command lives in its own module with upstream's behaviour, exit codes and
//! messages; the CLI (`src/cli/helper.rs`) only parses flags and maps results to exit codes.

pub mod archive;
pub mod artifacts;
pub mod cache;
pub mod health_check;
pub mod http;
