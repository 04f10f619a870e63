//! Upstream's networks-manager tables (executors/docker/internal/networks/manager_test.go, and
//! the label check of manager_integration_test.go) run through drover's [`NetworkManager`] on
//! a scripted Engine: each case lists the Engine calls upstream's mock expects, in order, with
//! their answers; it agrees when drover makes exactly those calls and ends as upstream's
//! assertions say (network mode, error, MTU option, inspect answer).
//!
//! Upstream's cases set the manager's private state (`perBuild`, `buildNetwork`) directly;
//! here that state is reached through the manager's own calls: a per-build network is created
//! (scripted create and inspect) before the call under test.
//!
//! Not applicable (6 cases): TestNewDefaultManager checks a Go type; TestAdopt_* (4) cover
//! `Adopt`, which takes over the network of a suspended build when it is resumed (drover has
//! no suspend and resume); docker_test.go TestDockerCreateNetwork "networks manager not
//! created" checks a nil manager.

use std::collections::HashMap;
use std::sync::Mutex;

use drover::executor::labels;
use drover::executor::networks::{
    NetworkEngine, NetworkError, NetworkFacts, NetworkManager, NetworkRequest, NetworkSpec,
    MTU_OPTION,
};
use drover::executor::paths::Slot;
use drover::executor::script::variables::VarList;
use drover::executor::settings::DockerSettings;
use drover::job::JobPayload;

use super::script::Script;
use super::{block_on, Tally};

const FILE: &str = "executors/docker/internal/networks/manager_test.go";

/// The cases of the file that do not apply, with the reason (listed in the module doc).
pub const NOT_APPLICABLE: usize = 6;

/// One Engine call upstream's mock expects, with its answer.
#[derive(Debug, Clone)]
enum Call {
    /// NetworkCreate (any name): the ID, or the error text.
    Create(Result<&'static str, &'static str>),
    /// NetworkInspect `id`: the network (ID, name, IPv6), or the error text.
    Inspect(
        &'static str,
        Result<(&'static str, &'static str, bool), &'static str>,
    ),
    /// NetworkInspect `id`, answered with the network `id` and these attached containers.
    Attached(&'static str, &'static [&'static str]),
    /// NetworkRemove (any ID): `Ok` or the error text.
    Remove(Result<(), &'static str>),
    /// ContainerRemove (any ID): `Ok` or the error text.
    RemoveContainer(Result<(), &'static str>),
}

/// The scripted Engine: answers calls in script order, records what does not match and the
/// create requests it saw.
struct Scripted {
    script: Script<Call>,
    created: Mutex<Vec<NetworkSpec>>,
}

impl Scripted {
    fn new(calls: &[Call]) -> Self {
        Scripted {
            script: Script::new(calls),
            created: Mutex::default(),
        }
    }

    fn problems(&self) -> Vec<String> {
        self.script.problems()
    }

    fn created(&self) -> Vec<NetworkSpec> {
        self.created.lock().map(|v| v.clone()).unwrap_or_default()
    }
}

impl NetworkEngine for Scripted {
    async fn create(&self, spec: &NetworkSpec) -> Result<String, String> {
        if let Ok(mut v) = self.created.lock() {
            v.push(spec.clone());
        }
        match self.script.next() {
            Some(Call::Create(answer)) => answer.map(str::to_string).map_err(str::to_string),
            other => {
                self.script
                    .problem(format!("create {:?}, expected {other:?}", spec.name));
                Err("unexpected create".to_string())
            }
        }
    }

    async fn inspect(&self, id: &str) -> Result<Option<NetworkFacts>, String> {
        match self.script.next() {
            Some(Call::Inspect(want, answer)) if want == id => answer
                .map(|(id, name, enable_ipv6)| {
                    Some(NetworkFacts {
                        id: id.to_string(),
                        name: name.to_string(),
                        enable_ipv6,
                        containers: Vec::new(),
                    })
                })
                .map_err(str::to_string),
            Some(Call::Attached(want, containers)) if want == id => Ok(Some(NetworkFacts {
                id: id.to_string(),
                name: id.to_string(),
                enable_ipv6: false,
                containers: containers.iter().map(|c| c.to_string()).collect(),
            })),
            other => {
                self.script
                    .problem(format!("inspect {id:?}, expected {other:?}"));
                Err("unexpected inspect".to_string())
            }
        }
    }

    async fn remove(&self, id: &str) -> Result<(), String> {
        match self.script.next() {
            Some(Call::Remove(answer)) => answer.map_err(str::to_string),
            other => {
                self.script
                    .problem(format!("remove {id:?}, expected {other:?}"));
                Err("unexpected remove".to_string())
            }
        }
    }

    async fn remove_container(&self, id: &str) -> Result<(), String> {
        match self.script.next() {
            Some(Call::RemoveContainer(answer)) => answer.map_err(str::to_string),
            other => {
                self.script
                    .problem(format!("remove container {id:?}, expected {other:?}"));
                Err("unexpected container removal".to_string())
            }
        }
    }
}

/// The scripted calls that make a per-build network `test-network` (create, then inspect).
const MAKE: [Call; 2] = [
    Call::Create(Ok("test-network")),
    Call::Inspect("test-network", Ok(("test-network", "test-network", false))),
];

/// Upstream's build: token `test-token`, project 0, job 0, no runner or project slot, with
/// `FF_NETWORK_PER_BUILD` set to `flag`.
fn payload(flag: &str) -> JobPayload {
    JobPayload::from_json(
        &serde_json::json!({
            "id": 0, "token": "t", "job_info": {"project_id": 0},
            "git_info": {"repo_url": "http://gitlab.example.com/g/p.git"},
            "variables": [{"key": "FF_NETWORK_PER_BUILD", "value": flag, "public": true}],
            "steps": [{"name": "script", "script": ["true"]}]
        })
        .to_string(),
    )
    .expect("payload")
}

/// The request drover makes for that build with `settings`, as the executor makes it.
fn request(flag: &str, settings: &DockerSettings) -> NetworkRequest {
    let mut runner = drover::executor::RunnerSettings {
        token: "test-token".into(),
        ..Default::default()
    };
    runner.docker = settings.clone();
    runner.docker.image = "alpine".into();
    let p = payload(flag);
    let plan = drover::executor::plan::plan_job(&p, &runner, Slot::default()).expect("plan");
    let facts = labels::job_facts(&p, &plan.vars, &plan.short, "", Slot::default(), 3600);
    NetworkRequest::for_job(&runner.docker, plan.per_build_network, &facts)
}

fn settings(mode: &str, mtu: i64, ipv6: bool) -> DockerSettings {
    let mut s = DockerSettings {
        network_mode: (!mode.is_empty()).then(|| mode.to_string()),
        ..Default::default()
    };
    s.services.network_mtu = mtu;
    s.services.enable_ipv6 = ipv6;
    s
}

/// The outcome of a call, as upstream's assertions compare it.
#[derive(Debug, PartialEq)]
enum Outcome {
    /// The network mode (`""`: none, the default bridge).
    Mode(String),
    /// An error whose text holds this.
    Err(&'static str),
    /// The per-build network already exists.
    Exists,
}

fn outcome(r: Result<Option<String>, NetworkError>, want: &Outcome) -> Outcome {
    match r {
        Ok(mode) => Outcome::Mode(mode.unwrap_or_default()),
        Err(NetworkError::AlreadyCreated(_)) => Outcome::Exists,
        Err(e) => match want {
            Outcome::Err(s) if e.to_string().contains(s) => Outcome::Err(s),
            _ => Outcome::Mode(format!("error {e}")),
        },
    }
}

/// TestCreateNetwork: (case, network_mode, FF value, network already made, IPv6, calls,
/// outcome).
type CreateCase = (
    &'static str,
    &'static str,
    &'static str,
    bool,
    bool,
    &'static [Call],
    Outcome,
);

fn create_cases() -> Vec<CreateCase> {
    const NAME: &str = "runner-test-toke-0-0-0";
    vec![
        (
            "network specified",
            "default",
            "",
            false,
            false,
            &[],
            Outcome::Mode("default".into()),
        ),
        (
            "network create per build with network mode",
            "default",
            "true",
            false,
            false,
            &[],
            Outcome::Mode("default".into()),
        ),
        (
            "network per-build flag off",
            "",
            "false",
            false,
            false,
            &[],
            Outcome::Mode(String::new()),
        ),
        (
            "network create per-build network",
            "",
            "true",
            false,
            false,
            &MAKE,
            Outcome::Mode(NAME.into()),
        ),
        (
            "network create per-build network failure",
            "",
            "true",
            false,
            false,
            &[Call::Create(Err("test-network failed"))],
            Outcome::Err("test-network failed"),
        ),
        (
            "network create per-build inspect failure",
            "",
            "true",
            false,
            false,
            &[
                Call::Create(Ok("test-network")),
                Call::Inspect("test-network", Err("network-inspect-failed")),
            ],
            Outcome::Err("network-inspect-failed"),
        ),
        (
            "networkID already set",
            "",
            "true",
            true,
            false,
            &[],
            Outcome::Exists,
        ),
        (
            "IPv6 network created",
            "",
            "true",
            false,
            true,
            &[
                Call::Create(Ok("test-network")),
                Call::Inspect("test-network", Ok(("test-network", "test-network", true))),
            ],
            Outcome::Mode(NAME.into()),
        ),
    ]
}

fn create_table(t: &mut Tally) {
    for (case, mode, flag, existing, ipv6, calls, want) in create_cases() {
        let setup: &[Call] = if existing { &MAKE } else { &[] };
        let engine = Scripted::new(&[setup, calls].concat());
        let mut m = NetworkManager::new(&engine);
        let req = request(flag, &settings(mode, 0, ipv6));
        let got = block_on(async {
            if existing {
                let _ = m.create(&req).await;
            }
            m.create(&req).await
        });
        let got = outcome(got, &want);
        let ipv6_sent = engine.created().iter().all(|s| s.enable_ipv6 == ipv6);
        let problems = engine.problems();
        t.check(
            &format!("{FILE} TestCreateNetwork"),
            case,
            got == want && problems.is_empty() && ipv6_sent,
            || format!("got {got:?}, want {want:?}; IPv6 as asked: {ipv6_sent}; {problems:?}"),
        );
    }
}

/// TestCreateNetworkWithCustomMTU: (case, FF on, network_mtu, MTU option expected).
fn mtu_table(t: &mut Tally) {
    let cases: &[(&str, bool, i64, Option<&str>)] = &[
        (
            "feature-flag is enabled, with mtu",
            true,
            1402,
            Some("1402"),
        ),
        ("feature-flag is enabled, no mtu", true, 0, None),
        ("feature-flag disabled", false, 1234, None),
    ];
    for (case, on, mtu, want) in cases {
        let calls: &[Call] = if *on { &MAKE } else { &[] };
        let engine = Scripted::new(calls);
        let mut m = NetworkManager::new(&engine);
        let req = request(if *on { "true" } else { "" }, &settings("", *mtu, false));
        let ok = block_on(m.create(&req)).is_ok();
        let created = engine.created();
        let got: Option<String> = created
            .first()
            .and_then(|s| s.options.get(MTU_OPTION).cloned());
        let problems = engine.problems();
        t.check(
            &format!("{FILE} TestCreateNetworkWithCustomMTU"),
            case,
            ok && got.as_deref() == *want
                && created.len() == usize::from(*on)
                && problems.is_empty(),
            || format!("ok {ok}, MTU option {got:?}, want {want:?}; {problems:?}"),
        );
    }
}

/// TestInspectNetwork: (case, per-build network made, calls after it, answer).
fn inspect_table(t: &mut Tally) {
    type Case = (
        &'static str,
        bool,
        &'static [Call],
        Result<Option<(&'static str, &'static str)>, &'static str>,
    );
    // Upstream names the cases the other way round: "network per build" has none.
    let cases: &[Case] = &[
        ("network per build", false, &[], Ok(None)),
        (
            "no network per build",
            true,
            &[Call::Inspect(
                "test-network",
                Ok(("test-network", "test-network", false)),
            )],
            Ok(Some(("test-network", "test-network"))),
        ),
        (
            "network inspect failed",
            true,
            &[Call::Inspect("test-network", Err("failure"))],
            Err("failure"),
        ),
    ];
    for (case, per_build, calls, want) in cases {
        let setup: &[Call] = if *per_build { &MAKE } else { &[] };
        let engine = Scripted::new(&[setup, calls].concat());
        let mut m = NetworkManager::new(&engine);
        let flag = if *per_build { "true" } else { "" };
        let got = block_on(async {
            let _ = m.create(&request(flag, &settings("", 0, false))).await;
            m.inspect().await
        });
        let agrees = match (&got, want) {
            (Ok(None), Ok(None)) => true,
            (Ok(Some(n)), Ok(Some((id, name)))) => n.id == *id && n.name == *name,
            (Err(e), Err(w)) => e.contains(w),
            _ => false,
        };
        let problems = engine.problems();
        t.check(
            &format!("{FILE} TestInspectNetwork"),
            case,
            agrees && problems.is_empty(),
            || format!("got {got:?}, want {want:?}; {problems:?}"),
        );
    }
}

/// TestCleanupNetwork: (case, FF value, network_mode, calls after the create, error text).
fn cleanup_table(t: &mut Tally) {
    type Case = (
        &'static str,
        &'static str,
        &'static str,
        &'static [Call],
        Option<&'static str>,
    );
    let cases: &[Case] = &[
        ("network per-build flag off", "false", "", &[], None),
        (
            "network per-build flag on with defined network",
            "true",
            "default",
            &[],
            None,
        ),
        (
            "cleanup per-build network",
            "true",
            "",
            &[Call::Remove(Ok(()))],
            None,
        ),
        (
            "cleanup per-build error",
            "true",
            "",
            &[Call::Remove(Err("test-error"))],
            Some("test-error"),
        ),
    ];
    for (case, flag, mode, calls, want) in cases {
        let makes = *flag == "true" && mode.is_empty();
        let setup: &[Call] = if makes { &MAKE } else { &[] };
        let engine = Scripted::new(&[setup, calls].concat());
        let mut m = NetworkManager::new(&engine);
        let got = block_on(async {
            let _ = m.create(&request(flag, &settings(mode, 0, false))).await;
            m.cleanup().await
        });
        let agrees = match (&got, want) {
            (Ok(()), None) => true,
            (Err(e), Some(w)) => e.contains(w),
            _ => false,
        };
        let problems = engine.problems();
        t.check(
            &format!("{FILE} TestCleanupNetwork"),
            case,
            agrees && problems.is_empty(),
            || format!("got {got:?}, want error {want:?}; {problems:?}"),
        );
    }
}

/// manager_integration_test.go TestCreateNetworkLabels: the per-build network's name and
/// labels (the build's pipeline ID from `CI_PIPELINE_ID`, job 0 of project 0, token
/// `test-token`, no system ID).
fn labels_case(t: &mut Tally) {
    let payload = JobPayload::from_json(
        &serde_json::json!({
            "id": 0, "token": "t", "job_info": {"project_id": 0},
            "git_info": {
                "repo_url": "https://user:pass@gitlab.example.com/namespace/project.git",
                "ref": "main",
                "sha": "69b18e5ed3610cf646119c3e38f462c64ec462b7",
                "before_sha": "1ea27a9695f80d7816d9e8ce025d9b2df83d0dd7"
            },
            "variables": [
                {"key": "FF_NETWORK_PER_BUILD", "value": "true", "public": true},
                {"key": "CI_PIPELINE_ID", "value": "1", "public": true}
            ],
            "steps": [{"name": "script", "script": ["true"]}]
        })
        .to_string(),
    )
    .expect("payload");
    let mut runner = drover::executor::RunnerSettings {
        token: "test-token".into(),
        ..Default::default()
    };
    runner.docker.image = "alpine".into();
    let plan = drover::executor::plan::plan_job(&payload, &runner, Slot::default()).expect("plan");
    let vars: &VarList = &plan.vars;
    let facts = labels::job_facts(&payload, vars, &plan.short, "", Slot::default(), 7200);
    let req = NetworkRequest::for_job(&runner.docker, plan.per_build_network, &facts);
    let engine = Scripted::new(&MAKE);
    let mut m = NetworkManager::new(&engine);
    let mode = block_on(m.create(&req));
    let want: HashMap<String, String> = [
        ("job.before_sha", "1ea27a9695f80d7816d9e8ce025d9b2df83d0dd7"),
        ("job.id", "0"),
        (
            "job.url",
            "https://gitlab.example.com/namespace/project/-/jobs/0",
        ),
        ("job.ref", "main"),
        ("job.sha", "69b18e5ed3610cf646119c3e38f462c64ec462b7"),
        ("job.timeout", "2h0m0s"),
        ("managed", "true"),
        ("pipeline.id", "1"),
        ("project.id", "0"),
        ("project.runner_id", "0"),
        ("runner.id", "test-toke"),
        ("runner.local_id", "0"),
        ("runner.system_id", ""),
    ]
    .iter()
    .map(|(k, v)| (format!("com.gitlab.gitlab-runner.{k}"), v.to_string()))
    .collect();
    let got = engine.created().first().map(|s| s.labels.clone());
    let problems = engine.problems();
    t.check(
        "executors/docker/internal/networks/manager_integration_test.go TestCreateNetworkLabels",
        "labels",
        mode == Ok(Some("runner-test-toke-0-0-0".into()))
            && got.as_ref() == Some(&want)
            && problems.is_empty(),
        || format!("mode {mode:?}, labels {got:?}; {problems:?}"),
    );
}

/// executors/docker/docker_test.go TestDockerCreateNetwork: the executor's create and cleanup
/// of the job's network ([`NetworkManager::create`], then [`NetworkManager::teardown`]: inspect
/// for the containers still attached, remove them, remove the network). Upstream mocks the
/// manager; here its Engine calls are scripted. A cleanup error is upstream's only when the
/// network's removal fails (a failed inspect or container removal is logged and the cleanup
/// goes on). "networks manager not created" checks a nil manager: not applicable.
fn executor_network_table(t: &mut Tally) {
    // (case, FF value, calls, create fails, removal error expected).
    type Case = (&'static str, &'static str, &'static [Call], bool, bool);
    let cases: &[Case] = &[
        ("network not created", "false", &[], false, false),
        (
            "network created",
            "true",
            &[
                Call::Create(Ok("test-network")),
                Call::Inspect("test-network", Ok(("test-network", "test-network", false))),
                Call::Attached("test-network", &[]),
                Call::Remove(Ok(())),
            ],
            false,
            false,
        ),
        (
            "network creation failed",
            "true",
            &[Call::Create(Err("test-err"))],
            true,
            false,
        ),
        (
            "network inspect failed",
            "true",
            &[
                Call::Create(Ok("test-network")),
                Call::Inspect("test-network", Ok(("test-network", "test-network", false))),
                Call::Inspect("test-network", Err("test-err")),
            ],
            false,
            false,
        ),
        (
            "removing container failed",
            "true",
            &[
                Call::Create(Ok("test-network")),
                Call::Inspect("test-network", Ok(("test-network", "test-network", false))),
                Call::Attached("test-network", &["abc"]),
                Call::RemoveContainer(Err("test-err")),
                Call::Remove(Ok(())),
            ],
            false,
            false,
        ),
        (
            "network cleanup failed",
            "true",
            &[
                Call::Create(Ok("test-network")),
                Call::Inspect("test-network", Ok(("test-network", "test-network", false))),
                Call::Attached("test-network", &[]),
                Call::Remove(Err("test-err")),
            ],
            false,
            true,
        ),
    ];
    for (case, flag, calls, create_fails, removal_fails) in cases {
        let engine = Scripted::new(calls);
        let mut m = NetworkManager::new(&engine);
        let (created, problems) = block_on(async {
            let created = m.create(&request(flag, &settings("", 0, false))).await;
            (created, m.teardown().await)
        });
        let removal_failed = problems.iter().any(|p| p.starts_with("removing network"));
        let unexpected = engine.problems();
        t.check(
            "executors/docker/docker_test.go TestDockerCreateNetwork",
            case,
            created.is_err() == *create_fails
                && removal_failed == *removal_fails
                && unexpected.is_empty(),
            || format!("create {created:?}, cleanup problems {problems:?}; {unexpected:?}"),
        );
    }
}

pub fn networks_tables(t: &mut Tally) {
    create_table(t);
    mtu_table(t);
    inspect_table(t);
    cleanup_table(t);
    labels_case(t);
    executor_network_table(t);
}
