//! drover's own log, read as gitlab-runner's: `drover run` serves jobs on a docker runner and
//! a docker+machine runner (the fake docker-machine, TLS machines in front of the real
//! Engine), once per log format (`runner`, `text`, `json`); the captured stderr must parse
//! with no unknown line and rebuild every job and every machine, as `drover workload import`
//! and `drover compare --upstream-log` read it.

mod docker_engine;
mod executor_common;
mod provider_support;
mod run_machine_support;
mod run_support;
mod test_certs;

use std::time::Duration;

use drover::upstream_log::{self, ReadOptions};
use gitlab_sim::{JobState, Sim};
use run_machine_support::*;
use run_support::*;

const DOCKER_TOKEN: &str = "glrt-dockrlogs0000001";
const MACHINE_TOKEN: &str = "glrt-machnlogs0000001";

/// Both runners in one config: the docker runner first, then the docker+machine one.
fn config(sim: &Sim, port: u16) -> String {
    let docker = docker_config(
        sim,
        DOCKER_TOKEN,
        2,
        "[machine.shutdown_drain]\n  enabled = true",
    );
    let machine = machine_config(sim, MACHINE_TOKEN, port, 2, 1);
    let runner = machine
        .find("[[runners]]")
        .map(|i| &machine[i..])
        .expect("machine runner section");
    format!("{docker}\n{runner}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drover_run_logs_in_each_format_rebuild_every_job_and_machine() {
    let Some(setup) = machine_world().await else {
        return;
    };
    for format in ["runner", "text", "json"] {
        eprintln!("--- log format {format}");
        serve_and_read(&setup, format).await;
    }
}

async fn serve_and_read(setup: &MachineWorld, format: &str) {
    let sim = Sim::start().await.expect("simulator");
    sim.add_runner(DOCKER_TOKEN);
    sim.add_runner(MACHINE_TOKEN);
    let dir = tempfile::Builder::new()
        .prefix("drover-test-logs-")
        .tempdir()
        .expect("tempdir");
    let mut drover = Drover::start_in(
        dir,
        &config(&sim, setup.port),
        &env(&setup.world),
        &["--log-format", format],
    );
    let mut ids = Vec::new();
    for i in 0..2 {
        ids.push(sim.enqueue_for(DOCKER_TOKEN, job(&[&format!("echo docker-{i}")])));
        ids.push(sim.enqueue_for(MACHINE_TOKEN, job(&[&format!("echo machine-{i}")])));
    }
    ids.push(sim.enqueue_for(DOCKER_TOKEN, job(&["echo failing", "exit 3"])));
    for &id in &ids {
        let v = finished(&sim, &drover, id, Duration::from_secs(180)).await;
        assert!(
            matches!(v.state, JobState::Success | JobState::Failed),
            "{id}: {:?}",
            v.state
        );
    }
    drover.signal(libc::SIGQUIT);
    let status = drover.wait_exit(Duration::from_secs(120));
    assert_eq!(exit_code(status), 0, "{}", drover.log());
    assert_eq!(machines(&setup.world), Vec::<String>::new());

    let log = drover.log();
    let path = drover.dir.path().join("drover.log");
    let (collected, stats) =
        upstream_log::collect(&[path], ReadOptions::default()).expect("read drover's log");
    eprintln!(
        "{format}: {} lines, {} ignored, {} unknown {:?}, formats {:?}",
        stats.lines,
        stats.ignored_lines,
        stats.unknown_lines,
        stats.unknown_messages,
        stats.formats
    );
    assert_eq!(
        stats.unknown_lines, 0,
        "{format}: unknown lines {:?}\n{log}",
        stats.unknown_messages
    );
    assert_eq!(stats.incomplete_lines, 0, "{format}:\n{log}");
    let want_format = if format == "runner" { "runner" } else { format };
    assert!(
        stats.formats.keys().all(|f| f == want_format),
        "{format}: {:?}",
        stats.formats
    );
    assert_eq!(
        collected.restarts.len(),
        1,
        "{format}: one Runtime platform"
    );
    // Every job: picked up, ended with its status; machine jobs on a machine, cleaned up.
    for &id in &ids {
        let v = sim.job(id).expect("job");
        let up = collected
            .job(id as u64)
            .unwrap_or_else(|| panic!("{format}: job {id} not rebuilt\n{log}"));
        assert!(up.picked_at.is_some(), "{format}: {up:?}");
        assert!(up.queued_at.is_some(), "{format}: {up:?}");
        assert!(up.done_at.is_some(), "{format}: {up:?}");
        let want = if v.state == JobState::Success {
            "success"
        } else {
            "script_failure"
        };
        assert_eq!(up.status.as_deref(), Some(want), "{format}: {up:?}");
        assert!(up.duration_s.is_some(), "{format}: {up:?}");
        if up.machine.is_some() {
            assert!(
                up.on_machine_at.is_some() && up.cleaned_at.is_some(),
                "{up:?}"
            );
        }
    }
    let machine_jobs: Vec<_> = collected
        .jobs
        .iter()
        .filter(|j| j.machine.is_some())
        .collect();
    assert_eq!(machine_jobs.len(), 2, "{format}: {:?}", collected.jobs);
    // Every machine: created and removed, with the reason; MaxBuilds 1 removes each used
    // machine at release, the drain removes the idle one.
    assert!(
        collected.machines.len() >= 2,
        "{format}: {:?}",
        collected.machines
    );
    for m in &collected.machines {
        assert!(!m.before_log, "{format}: {m:?}");
        assert!(m.create_started_at.is_some(), "{format}: {m:?}");
        assert!(m.created_at.is_some(), "{format}: {m:?}");
        assert!(m.creation_s.is_some(), "{format}: {m:?}");
        assert!(m.removed_at.is_some(), "{format}: {m:?}\n{log}");
        if !m.jobs.is_empty() {
            assert_eq!(
                m.removal_reason.as_deref(),
                Some("Too many builds"),
                "{format}: {m:?}"
            );
        }
    }
    // No raw control character other than colours reaches the file (stderr is not a terminal).
    assert!(
        !log.contains('\x1b'),
        "{format}: colours without a terminal"
    );
    assert!(!log.contains('\r'), "{format}");
}
