//! Upstream's pull-manager table (executors/docker/internal/pull/manager_test.go) run through
//! drover's [`Puller`] on a scripted Engine: each case lists the Engine calls upstream's mock
//! expects, in order, with their answers; the case agrees when drover makes exactly those
//! calls (no more, no fewer, same names and references) and ends as upstream's assertions say
//! (image ID, error, failure reason, job-log lines).
//!
//! drover's [`Puller::get`] is upstream's `GetDockerImage`; upstream's cases that call the
//! inner `pullDockerImage` directly are run through `get` with the `always` policy and a first
//! inspect that finds nothing, which is the path by which `GetDockerImage` reaches it.

use std::sync::Mutex;
use std::time::Duration;

use drover::executor::image::auth::AuthSources;
use drover::executor::image::platform::{self, Platform};
use drover::executor::image::{self, ImageEngine, ImageError, PullPolicy, Puller, ResolvedImage};
use drover::executor::trace::mask::Masker;
use drover::executor::trace::{MemorySink, Trace};
use drover::executor::FailureReason;

use super::script::Script;
use super::{block_on, Tally};

const FILE: &str = "executors/docker/internal/pull/manager_test.go";

/// One Engine call upstream's mock expects, with its answer.
#[derive(Debug, Clone)]
enum Call {
    /// Inspect `name`: `Ok(Some(id))` found with that ID, `Ok(None)` not found, `Err(text)`.
    Inspect(&'static str, Result<Option<&'static str>, &'static str>),
    /// Pull `reference`: `Ok(())` or the error text.
    Pull(&'static str, Result<(), &'static str>),
}

/// The scripted Engine: answers calls in script order and records what does not match.
struct Scripted {
    script: Script<Call>,
    pull_platforms: Mutex<Vec<Option<String>>>,
    inspect_platforms: Mutex<Vec<Option<String>>>,
}

impl Scripted {
    fn new(calls: &[Call]) -> Self {
        Scripted {
            script: Script::new(calls),
            pull_platforms: Mutex::default(),
            inspect_platforms: Mutex::default(),
        }
    }
}

fn image_with_id(name: &str, id: &str) -> ResolvedImage {
    ResolvedImage {
        name: name.to_string(),
        id: id.to_string(),
        reference: id.to_string(),
        platform: "linux/amd64".to_string(),
    }
}

impl ImageEngine for Scripted {
    async fn inspect(
        &self,
        name: &str,
        platform: Option<&Platform>,
    ) -> Result<Option<ResolvedImage>, String> {
        if let Ok(mut v) = self.inspect_platforms.lock() {
            v.push(platform.map(Platform::specifier));
        }
        match self.script.next() {
            Some(Call::Inspect(want, answer)) if want == name => answer
                .map(|o| o.map(|id| image_with_id(name, id)))
                .map_err(str::to_string),
            other => {
                self.script
                    .problem(format!("inspect {name:?}, expected {other:?}"));
                Ok(None)
            }
        }
    }

    async fn pull(
        &self,
        reference: &str,
        platform: Option<&Platform>,
        _credentials: Option<bollard::auth::DockerCredentials>,
    ) -> Result<(), String> {
        if let Ok(mut v) = self.pull_platforms.lock() {
            v.push(platform.map(Platform::specifier));
        }
        match self.script.next() {
            Some(Call::Pull(want, answer)) if want == reference => answer.map_err(str::to_string),
            other => {
                self.script
                    .problem(format!("pull {reference:?}, expected {other:?}"));
                Err("unexpected pull".to_string())
            }
        }
    }
}

/// What one `get` ended with: the image ID or the failure reason, and the job log.
struct Outcome {
    result: Result<String, Option<FailureReason>>,
    log: String,
}

/// Runs `f` with a fresh job log; returns its result and the log.
fn traced<R>(f: impl FnOnce(&mut Trace<'_>) -> R) -> (R, String) {
    let sink = MemorySink::default();
    let mut sink_w = sink.clone();
    let mut trace = Trace::new(&mut sink_w, Masker::new::<&str>(&[], &[]), 1 << 20, false);
    let r = f(&mut trace);
    trace.finish();
    drop(trace);
    (r, sink.text())
}

/// Runs `get`s on one pull manager over one script: (image, policies, platform) each.
fn run(calls: &[Call], gets: &[(&str, &[PullPolicy], &str)]) -> (Vec<Outcome>, Vec<String>) {
    let engine = Scripted::new(calls);
    let mut puller =
        Puller::new(&engine).with_backoff(Duration::from_millis(1), Duration::from_millis(1));
    let auth = AuthSources::default();
    let mut outcomes = Vec::new();
    for (name, policies, platform) in gets {
        let platform = Some(*platform).filter(|p| !p.is_empty());
        let (result, log) =
            traced(|trace| block_on(puller.get(name, policies, &auth, platform, trace)));
        outcomes.push(Outcome {
            result: result.map(|i| i.id).map_err(|e| match e {
                ImageError::Job(f) => Some(f.reason),
                ImageError::System(_) => None,
            }),
            log,
        });
    }
    (outcomes, engine.script.problems())
}

use FailureReason::*;
use PullPolicy::*;

const ALWAYS: &[PullPolicy] = &[Always];
const IF_NOT_PRESENT: &[PullPolicy] = &[IfNotPresent];
const NEVER: &[PullPolicy] = &[Never];
const ALWAYS_THEN_IF_NOT_PRESENT: &[PullPolicy] = &[Always, IfNotPresent];

/// An expected `get` outcome: the image ID, or an error (with its reason when upstream asserts
/// one).
#[derive(Debug, Clone, Copy, PartialEq)]
enum Want {
    Id(&'static str),
    Fails,
    FailsWith(FailureReason),
}

fn agrees(got: &Outcome, want: Want) -> bool {
    match (want, &got.result) {
        (Want::Id(id), Ok(got)) => got == id,
        (Want::Fails, Err(_)) => true,
        (Want::FailsWith(r), Err(Some(got))) => *got == r,
        _ => false,
    }
}

/// A scripted case: (name, calls, gets with their expected outcomes and required log lines).
type Case = (
    &'static str,
    &'static [Call],
    &'static [(
        &'static str,
        &'static [PullPolicy],
        &'static str,
        Want,
        &'static [&'static str],
    )],
);

const NOT_EXIST: &str = "open : file does not exist";
const TRANSIENT: &str = "wrapped error: request canceled while waiting for connection";
const TIMEOUT: &str = "Get \"https://gitlab.com/jwt/auth\": context deadline exceeded \
                       (Client.Timeout exceeded while awaiting headers)";
const SHA: &str = "real@sha256:b5bb9d8014a0f9b1d61e21e796d78dccdf1352f23cd32812f4850b878ae4944c";
const REMOTE: &str = "registry.domain.tld:5005/image/name:version";
const GITLAB: &str = "registry.gitlab.tld:1234/image/name:version";

const CASES: &[Case] = &[
    (
        "TestDockerForNamedImage/test",
        &[Call::Inspect("test", Ok(None)), Call::Pull("test:latest", Err(NOT_EXIST))],
        &[("test", ALWAYS, "", Want::Fails, &[])],
    ),
    (
        "TestDockerForNamedImage/tagged:tag",
        &[Call::Inspect("tagged:tag", Ok(None)), Call::Pull("tagged:tag", Err(NOT_EXIST))],
        &[("tagged:tag", ALWAYS, "", Want::Fails, &[])],
    ),
    (
        "TestDockerForNamedImage/digest",
        &[Call::Inspect(SHA, Ok(None)), Call::Pull(SHA, Err(NOT_EXIST))],
        &[(SHA, ALWAYS, "", Want::Fails, &[])],
    ),
    (
        "TestDockerForImagePullFailures/ImagePullBlocking unwrapped system failure",
        &[
            Call::Inspect("unwrapped-system:failure", Ok(None)),
            Call::Pull("unwrapped-system:failure", Err("this is a test")),
        ],
        &[("unwrapped-system:failure", ALWAYS, "", Want::FailsWith(ImagePullFailure), &[])],
    ),
    (
        "TestDockerForImagePullFailures/ImagePullBlocking wrapped system failure",
        &[
            Call::Inspect("wrapped-system:failure", Ok(None)),
            Call::Pull("wrapped-system:failure", Err("wrapped error: this is a test")),
        ],
        &[("wrapped-system:failure", ALWAYS, "", Want::FailsWith(ImagePullFailure), &[])],
    ),
    (
        "TestDockerForImagePullFailures/ImagePullBlocking two level wrapped system failure",
        &[
            Call::Inspect("two-level-wrapped-system:failure", Ok(None)),
            Call::Pull(
                "two-level-wrapped-system:failure",
                Err("wrapped error: wrapped error: this is a test"),
            ),
        ],
        &[(
            "two-level-wrapped-system:failure",
            ALWAYS,
            "",
            Want::FailsWith(ImagePullFailure),
            &[],
        )],
    ),
    (
        "TestDockerForImagePullFailures/ImagePullBlocking wrapped transient failure is retried then fails",
        &[
            Call::Inspect("wrapped-request-timeout:failure", Ok(None)),
            Call::Pull("wrapped-request-timeout:failure", Err(TRANSIENT)),
            Call::Pull("wrapped-request-timeout:failure", Err(TRANSIENT)),
            Call::Pull("wrapped-request-timeout:failure", Err(TRANSIENT)),
        ],
        &[(
            "wrapped-request-timeout:failure",
            ALWAYS,
            "",
            Want::FailsWith(RunnerExternalDependencyFailure),
            &[
                "Failed to pull image \"wrapped-request-timeout:failure\" (attempt #1), retrying: \
                 wrapped error: request canceled while waiting for connection",
                "(attempt #2), retrying",
            ],
        )],
    ),
    (
        "TestDockerForImagePullFailures/ImagePullBlocking two level wrapped transient failure is retried then fails",
        &[
            Call::Inspect("lwo-level-wrapped-request-timeout:failure", Ok(None)),
            Call::Pull("lwo-level-wrapped-request-timeout:failure", Err(TRANSIENT)),
            Call::Pull("lwo-level-wrapped-request-timeout:failure", Err(TRANSIENT)),
            Call::Pull("lwo-level-wrapped-request-timeout:failure", Err(TRANSIENT)),
        ],
        &[(
            "lwo-level-wrapped-request-timeout:failure",
            ALWAYS,
            "",
            Want::FailsWith(RunnerExternalDependencyFailure),
            &[],
        )],
    ),
    (
        "TestDockerForImagePullFailures/ImagePullBlocking unwrapped script failure",
        &[
            Call::Inspect("unwrapped-script:failure", Ok(None)),
            Call::Pull("unwrapped-script:failure", Err("this is a test")),
        ],
        &[("unwrapped-script:failure", ALWAYS, "", Want::FailsWith(ImagePullFailure), &[])],
    ),
    (
        "TestDockerForImagePullFailures/ImagePullBlocking wrapped script failure",
        &[
            Call::Inspect("wrapped-script:failure", Ok(None)),
            Call::Pull("wrapped-script:failure", Err("wrapped error: this is a test")),
        ],
        &[("wrapped-script:failure", ALWAYS, "", Want::FailsWith(ImagePullFailure), &[])],
    ),
    (
        "TestDockerPullRetriesTransientFailureThenSucceeds",
        &[
            Call::Inspect("flaky", Ok(None)),
            Call::Pull("flaky:latest", Err(TIMEOUT)),
            Call::Pull("flaky:latest", Ok(())),
            Call::Inspect("flaky", Ok(Some("image-id"))),
        ],
        &[("flaky", ALWAYS, "", Want::Id("image-id"), &[])],
    ),
    (
        "TestDockerPullDoesNotRetryNonTransientFailure",
        &[
            Call::Inspect("denied", Ok(None)),
            Call::Pull(
                "denied:latest",
                Err("pull access denied, repository does not exist or may require authorization"),
            ),
        ],
        &[("denied", ALWAYS, "", Want::FailsWith(RunnerConfigurationError), &[])],
    ),
    (
        "TestDockerForExistingImage",
        &[
            Call::Inspect("existing", Ok(None)),
            Call::Pull("existing:latest", Ok(())),
            Call::Inspect("existing", Ok(Some("image-id"))),
        ],
        &[("existing", ALWAYS, "", Want::Id("image-id"), &[])],
    ),
    (
        "TestDockerInspectAfterPullFailure/network-shaped error maps to RunnerExternalDependencyFailure",
        &[
            Call::Inspect("post-pull-inspect", Ok(None)),
            Call::Pull("post-pull-inspect:latest", Ok(())),
            Call::Inspect("post-pull-inspect", Err("dial tcp: lookup registry: no such host")),
        ],
        &[(
            "post-pull-inspect",
            ALWAYS,
            "",
            Want::FailsWith(RunnerExternalDependencyFailure),
            &[],
        )],
    ),
    (
        "TestDockerInspectAfterPullFailure/default error maps to ImagePullFailure",
        &[
            Call::Inspect("post-pull-inspect", Ok(None)),
            Call::Pull("post-pull-inspect:latest", Ok(())),
            Call::Inspect("post-pull-inspect", Err("daemon unavailable")),
        ],
        &[("post-pull-inspect", ALWAYS, "", Want::FailsWith(ImagePullFailure), &[])],
    ),
    (
        "TestDockerGetImageById",
        &[Call::Inspect("ID", Ok(Some("ID")))],
        &[("ID", ALWAYS, "", Want::Id("ID"), &[])],
    ),
    (
        "TestDockerPolicyModeNever",
        &[
            Call::Inspect("existing", Ok(Some("existing"))),
            Call::Inspect("not-existing", Ok(None)),
        ],
        &[
            ("existing", NEVER, "", Want::Id("existing"), &[]),
            ("not-existing", NEVER, "", Want::Fails, &[]),
        ],
    ),
    (
        "TestDockerPolicyModeIfNotPresentForExistingImage",
        &[Call::Inspect("existing", Ok(Some("image-id")))],
        &[("existing", IF_NOT_PRESENT, "", Want::Id("image-id"), &[])],
    ),
    (
        "TestDockerPolicyModeIfNotPresentForNotExistingImage",
        &[
            Call::Inspect("not-existing", Ok(None)),
            Call::Pull("not-existing:latest", Ok(())),
            Call::Inspect("not-existing", Ok(Some("image-id"))),
            Call::Inspect("not-existing", Ok(Some("image-id"))),
        ],
        &[
            ("not-existing", IF_NOT_PRESENT, "", Want::Id("image-id"), &[]),
            ("not-existing", IF_NOT_PRESENT, "", Want::Id("image-id"), &[]),
        ],
    ),
    (
        "TestDockerPolicyModeAlwaysForExistingImage",
        &[
            Call::Inspect("existing", Ok(Some("image-id"))),
            Call::Pull("existing:latest", Ok(())),
            Call::Inspect("existing", Ok(Some("image-id"))),
        ],
        &[("existing", ALWAYS, "", Want::Id("image-id"), &[])],
    ),
    (
        "TestDockerPolicyModeAlwaysForLocalOnlyImage",
        &[
            Call::Inspect("existing", Ok(Some("image-id"))),
            Call::Pull("existing:latest", Err("not found")),
        ],
        &[("existing", ALWAYS, "", Want::Fails, &[])],
    ),
    (
        "TestDockerGetExistingDockerImageIfPullFails",
        &[
            Call::Inspect("to-pull", Ok(Some("image-id"))),
            Call::Pull("to-pull:latest", Err(NOT_EXIST)),
            Call::Inspect("not-existing", Ok(None)),
            Call::Pull("not-existing:latest", Err(NOT_EXIST)),
        ],
        &[
            ("to-pull", ALWAYS, "", Want::Fails, &[]),
            ("not-existing", ALWAYS, "", Want::Fails, &[]),
        ],
    ),
    (
        "TestCombinedDockerPolicyModesAlwaysAndIfNotPresentForExistingImage",
        &[
            Call::Inspect("existing", Ok(Some("image-id"))),
            Call::Pull(
                "existing:latest",
                Err("received unexpected HTTP status: 502 Bad Gateway"),
            ),
            Call::Inspect("existing", Ok(Some("local-image-id"))),
        ],
        &[(
            "existing",
            ALWAYS_THEN_IF_NOT_PRESENT,
            "",
            Want::Id("local-image-id"),
            &[
                "WARNING: Failed to pull image with policy \"always\": received unexpected \
                 HTTP status: 502 Bad Gateway",
                "Attempt #2: Trying \"if-not-present\" pull policy",
                "Using locally found image version due to \"if-not-present\" pull policy",
            ],
        )],
    ),
    (
        "TestCombinedDockerPolicyModeAlwaysAndIfNotPresentForNonExistingImage",
        &[
            Call::Inspect("not-existing", Ok(None)),
            Call::Pull("not-existing:latest", Err(NOT_EXIST)),
            Call::Inspect("not-existing", Ok(None)),
            Call::Pull("not-existing:latest", Err(NOT_EXIST)),
        ],
        &[("not-existing", ALWAYS_THEN_IF_NOT_PRESENT, "", Want::Fails, &[])],
    ),
    (
        "TestPullPolicyWhenAlwaysIsSet",
        &[
            Call::Inspect(REMOTE, Ok(Some("not-this-image"))),
            Call::Pull(REMOTE, Ok(())),
            Call::Inspect(REMOTE, Ok(Some("this-image"))),
            Call::Inspect(REMOTE, Ok(Some("image"))),
            Call::Pull(REMOTE, Err("deny pulling")),
            Call::Inspect(GITLAB, Ok(Some("not-this-image"))),
            Call::Pull(GITLAB, Ok(())),
            Call::Inspect(GITLAB, Ok(Some("this-image"))),
            Call::Inspect(GITLAB, Ok(Some("image"))),
            Call::Pull(GITLAB, Err("deny pulling")),
        ],
        &[
            (REMOTE, ALWAYS, "", Want::Id("this-image"), &[]),
            (REMOTE, ALWAYS, "", Want::Fails, &[]),
            (GITLAB, ALWAYS, "", Want::Id("this-image"), &[]),
            (GITLAB, ALWAYS, "", Want::Fails, &[]),
        ],
    ),
    (
        "TestPullPolicyWhenIfNotPresentIsSet",
        &[
            Call::Inspect(REMOTE, Ok(Some("this-image"))),
            Call::Inspect(GITLAB, Ok(Some("this-image"))),
        ],
        &[
            (REMOTE, IF_NOT_PRESENT, "", Want::Id("this-image"), &[]),
            (GITLAB, IF_NOT_PRESENT, "", Want::Id("this-image"), &[]),
        ],
    ),
    (
        "TestPullPolicyWhenConfigIsAllowed (image)",
        &[Call::Inspect("existing", Ok(Some("existing")))],
        &[("existing", NEVER, "", Want::Id("existing"), &[])],
    ),
    (
        "TestDockerGetImagePlatformSuccess",
        &[
            Call::Inspect("test", Ok(None)),
            Call::Pull("test:latest", Ok(())),
            Call::Inspect("test", Ok(Some("arm64/v8"))),
        ],
        &[(
            "test",
            ALWAYS,
            "arm64/v8",
            Want::Id("arm64/v8"),
            &["Pulling docker image test for platform arm64/v8 ..."],
        )],
    ),
    (
        "TestGetDockerImageWithPlatform",
        &[
            Call::Inspect(REMOTE, Ok(Some("not-this-image"))),
            Call::Pull(REMOTE, Ok(())),
            Call::Inspect(REMOTE, Ok(Some("this-image"))),
        ],
        &[(REMOTE, ALWAYS, "foo/bar", Want::Id("this-image"), &[])],
    ),
];

fn scripted_cases(t: &mut Tally) {
    for (case, calls, gets) in CASES {
        let plain: Vec<(&str, &[PullPolicy], &str)> =
            gets.iter().map(|(n, p, pl, _, _)| (*n, *p, *pl)).collect();
        let (outcomes, problems) = run(calls, &plain);
        let mut wrong: Vec<String> = problems;
        for ((name, _, _, want, lines), got) in gets.iter().zip(&outcomes) {
            if !agrees(got, *want) {
                wrong.push(format!("{name}: got {:?}, want {want:?}", got.result));
            }
            for line in *lines {
                if !got.log.contains(line) {
                    wrong.push(format!("{name}: log lacks {line:?}:\n{}", got.log));
                }
            }
        }
        t.check(FILE, case, wrong.is_empty(), || wrong.join("; "));
    }
}

/// Cases about the effective policies, which upstream's pull manager computes before any
/// Engine call (drover: `effective_pull_policies_for`, called before `get`).
fn policy_cases(t: &mut Tally) {
    let list = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    type PolicyCase = (
        &'static str,
        &'static [&'static str],
        &'static [&'static str],
        &'static [&'static str],
        Result<&'static [&'static str], &'static str>,
    );
    const ALL: &[&str] = &["always", "if-not-present", "never"];
    // (case, job's policies, pull_policy, allowed_pull_policies, effective or the error text)
    let rows: &[PolicyCase] = &[
        (
            "TestDockerUnknownPolicyMode",
            &[],
            &["unknown"],
            &[],
            Err(""),
        ),
        (
            "TestPullPolicyPassedAsIfNotPresentForExistingAndConfigAlways",
            &["if-not-present"],
            &["always"],
            &["always", "if-not-present"],
            Ok(&["if-not-present"]),
        ),
        (
            "TestPullPolicyPassedAsIfNotPresentForNonExistingAndConfigAlways",
            &["if-not-present"],
            &["always"],
            &["always", "if-not-present"],
            Ok(&["if-not-present"]),
        ),
        (
            "TestPullPolicyPassedAsIfNotPresentButNotAllowedDefault",
            &["if-not-present"],
            &[],
            &[],
            Err(
                "invalid pull policy for image \"existing\": pull_policy ([if-not-present]) \
                 defined in GitLab pipeline config is not one of the allowed_pull_policies \
                 ([always])",
            ),
        ),
        (
            "TestPullPolicyPassedAsIfNotPresentButNotAllowed",
            &["if-not-present"],
            &[],
            &["never"],
            Err(
                "invalid pull policy for image \"existing\": pull_policy ([if-not-present]) \
                 defined in GitLab pipeline config is not one of the allowed_pull_policies \
                 ([never])",
            ),
        ),
        (
            "TestPullPolicyWhenConfigIsNotAllowed",
            &[],
            &["never", "if-not-present"],
            &["always"],
            Err(
                "invalid pull policy for image \"existing\": pull_policy ([never \
                 if-not-present]) defined in Runner config is not one of the \
                 allowed_pull_policies ([always])",
            ),
        ),
        (
            "TestPullPolicyWhenConfigIsAllowed (policies)",
            &[],
            &["never"],
            &["if-not-present", "never"],
            Ok(&["never"]),
        ),
        (
            "TestPullPolicyWhenConfigPullPolicyIsInvalid",
            &[],
            &["invalid"],
            &["always"],
            Err("unsupported pull_policy config: \"invalid\""),
        ),
        (
            "TestPullPolicyWhenConfigAllowedPullPoliciesIsInvalid",
            &[],
            &["always"],
            &["invalid"],
            Err("unsupported allowed_pull_policies config: \"invalid\""),
        ),
        // getPullPolicies alone: which list is requested (all three allowed, so the
        // intersection is the requested list itself).
        (
            "Test_manager_getPullPolicies/gitlab-ci.yaml only",
            &["if-not-present"],
            &[],
            ALL,
            Ok(&["if-not-present"]),
        ),
        (
            "Test_manager_getPullPolicies/config.toml only",
            &[],
            &["if-not-present"],
            ALL,
            Ok(&["if-not-present"]),
        ),
        (
            "Test_manager_getPullPolicies/both",
            &["if-not-present"],
            &["never"],
            ALL,
            Ok(&["if-not-present"]),
        ),
        (
            "Test_manager_getPullPolicies/not configured",
            &[],
            &[],
            ALL,
            Ok(&["always"]),
        ),
    ];
    for (case, job, config, allowed, want) in rows {
        let got = image::effective_pull_policies_for(
            "existing",
            &list(job),
            &list(config),
            &list(allowed),
        )
        .map(|v| v.iter().map(|p| p.as_str()).collect::<Vec<_>>())
        .map_err(|f| (f.reason, f.message));
        let ok = match (&got, want) {
            (Ok(g), Ok(w)) => g.as_slice() == *w,
            (Err((reason, _)), Err("")) => *reason == RunnerConfigurationError,
            (Err((reason, m)), Err(w)) => *reason == RunnerConfigurationError && m == w,
            _ => false,
        };
        t.check(FILE, case, ok, || format!("got {got:?}, want {want:?}"));
    }
}

/// containerd's platform specifiers as upstream's manager reads them.
fn platform_cases(t: &mut Tally) {
    for (os, want) in [
        ("linux", "linux"),
        ("windows", "windows"),
        ("darwin", "linux"),
        ("freebsd", "linux"),
        ("", "linux"),
    ] {
        let got = platform::container_os(os);
        t.check(
            FILE,
            &format!("TestNormalizeContainerOS/{os}"),
            got == want,
            || format!("got {got:?}, want {want:?}"),
        );
    }
    let parsed = |raw: &str| platform::parse(raw).ok().flatten();
    let got = parsed("arm64");
    t.check(
        FILE,
        "TestParsePlatformNeverReturnsDarwin",
        got.as_ref()
            .is_some_and(|p| ["linux", "windows"].contains(&p.platform.os.as_str())),
        || format!("got {got:?}"),
    );
    let got = parsed("linux/amd64");
    t.check(
        FILE,
        "TestParsePlatformDoesNotWarnWhenNotNormalized",
        got.as_ref()
            .is_some_and(|p| p.platform.os == "linux" && p.warning.is_none()),
        || format!("got {got:?}"),
    );
    // The inspect is platform-aware from Engine API 1.49 (an unknown version counts as
    // recent); without a platform asked for, no platform is passed at all (drover's scripted
    // Engine above sees `None`).
    for (case, version, want) in [
        (
            "TestInspectOptionsUnknownAPIVersionAssumesSupport",
            "",
            true,
        ),
        (
            "TestInspectOptionsSkipsPlatformBelowMinAPIVersion",
            "1.41",
            false,
        ),
        (
            "TestInspectOptionsIncludesPlatformAtOrAboveMinAPIVersion",
            "1.49",
            true,
        ),
    ] {
        let got = image::platform_aware_inspect(version);
        t.check(FILE, case, got == want, || {
            format!("got {got}, want {want}")
        });
    }
    let engine = Scripted::new(&[Call::Inspect("test-image", Ok(Some("id")))]);
    let mut puller = Puller::new(&engine);
    let (r, _) = traced(|trace| {
        block_on(puller.get(
            "test-image",
            IF_NOT_PRESENT,
            &AuthSources::default(),
            None,
            trace,
        ))
    });
    let seen = engine
        .inspect_platforms
        .lock()
        .map(|v| v.clone())
        .unwrap_or_default();
    t.check(
        FILE,
        "TestInspectOptionsNoPlatformRequested",
        r.is_ok() && seen == [None],
        || format!("result ok {}, inspect platforms {seen:?}", r.is_ok()),
    );
    // The platform is handed to the pull normalised (os/arch[/variant]).
    let engine = Scripted::new(&[
        Call::Inspect("test", Ok(None)),
        Call::Pull("test:latest", Ok(())),
        Call::Inspect("test", Ok(Some("id"))),
    ]);
    let mut puller = Puller::new(&engine);
    let (r, log) = traced(|trace| {
        block_on(puller.get(
            "test",
            ALWAYS,
            &AuthSources::default(),
            Some("darwin/arm64"),
            trace,
        ))
    });
    let sent = engine
        .pull_platforms
        .lock()
        .map(|v| v.clone())
        .unwrap_or_default();
    t.check(
        FILE,
        "TestParsePlatformWarnsWhenNormalized",
        parsed("darwin/arm64").is_some_and(|p| p.platform.os == "linux" && p.warning.is_some())
            && r.is_ok()
            && sent == [Some("linux/arm64".to_string())]
            && log.contains(
                "WARNING: Platform OS \"darwin\" in \"darwin/arm64\" is not a valid container OS; \
                 using \"linux\" instead",
            ),
        || format!("result ok {}, sent {sent:?}, log {log}", r.is_ok()),
    );
}

/// Credentials are resolved when a pull is due: a `credsStore` that is a path refuses the
/// pull; a missing helper skips its source with a warning and the pull goes on without
/// credentials.
fn auth_cases(t: &mut Tally) {
    let image = "registry.domain.tld:5005/image/name:version";
    let pull = |config: &str, calls: &[Call]| {
        let engine = Scripted::new(calls);
        let mut puller = Puller::new(&engine);
        let auth = AuthSources {
            docker_auth_config: Some(config.to_string()),
            ..Default::default()
        };
        let (r, log) = traced(|trace| block_on(puller.get(image, ALWAYS, &auth, None, trace)));
        let r = r.map(|i| i.id).map_err(|e| match e {
            ImageError::Job(f) => f.message,
            ImageError::System(s) => s.to_string(),
        });
        (r, log, engine.script.problems())
    };
    let (r, _, problems) = pull(
        r#"{"credsStore": "../../usr/bin/sudo"}"#,
        &[Call::Inspect(image, Ok(None))],
    );
    t.check(
        FILE,
        "TestResolveAuthConfigForImageErrorsOnPathTraversal",
        problems.is_empty() && r.as_ref().is_err_and(|m| m.contains("path traversal")),
        || format!("got {r:?}, engine {problems:?}"),
    );
    let (r, log, problems) = pull(
        r#"{"credsStore": "nonexistent-helper"}"#,
        &[
            Call::Inspect(image, Ok(None)),
            Call::Pull(image, Ok(())),
            Call::Inspect(image, Ok(Some("id"))),
        ],
    );
    let warned = log.lines().any(|l| {
        l.contains("$DOCKER_AUTH_CONFIG")
            && l.contains("Credentials from this source will not be used")
    });
    t.check(
        FILE,
        "TestResolveAuthConfigForImageWarnsMissingCredentialHelper",
        problems.is_empty() && r.is_ok() && warned && !log.contains("Authenticating with"),
        || format!("got {r:?}, engine {problems:?}, log {log}"),
    );
}

/// helpers/pull_policies: the intersection with `allowed_pull_policies` and the source named
/// in its error. Upstream's function also takes an empty requested list ("no pull policies",
/// "both empty"), which its Docker executor never passes (the requested list defaults to
/// `always`): those two are not applicable. An empty allowed list stands for
/// `allowed_pull_policies` not set, whose default is the config's `pull_policy`, so those rows
/// give the requested list as the config's.
fn pull_policies_table(t: &mut Tally) {
    const FILE: &str = "helpers/pull_policies/pull_policies_test.go";
    let list = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    type Row = (
        &'static str,
        &'static [&'static str],
        &'static [&'static str],
        Option<&'static [&'static str]>,
    );
    let rows: &[Row] = &[
        (
            "identical policies, ok",
            &["always", "never", "if-not-present"],
            &["always", "never", "if-not-present"],
            Some(&["always", "never", "if-not-present"]),
        ),
        (
            "no allowed pull policies, ok",
            &["always", "never", "if-not-present"],
            &[],
            Some(&["always", "never", "if-not-present"]),
        ),
        (
            "repeated pull policies, ok",
            &["always", "always", "if-not-present", "if-not-present"],
            &[],
            Some(&["always", "always", "if-not-present", "if-not-present"]),
        ),
        (
            "empty intersection, fail",
            &["always"],
            &["if-not-present"],
            None,
        ),
        (
            "non-empty intersection, ok",
            &["always", "never"],
            &["never", "if-not-present"],
            Some(&["never"]),
        ),
    ];
    for (case, requested, allowed, want) in rows {
        let (job, config) = if allowed.is_empty() {
            (list(&[]), list(requested))
        } else {
            (list(requested), list(&[]))
        };
        let got = image::effective_pull_policies(&job, &config, &list(allowed))
            .map(|v| v.iter().map(|p| p.as_str()).collect::<Vec<_>>())
            .ok();
        let ok = got.as_deref() == *want;
        t.check(
            FILE,
            &format!("Test_ComputeEffectivePullPolicies/{case}"),
            ok,
            || format!("got {got:?}, want {want:?}"),
        );
    }
    let all = &["always", "never", "if-not-present"][..];
    for (case, ci, executor, want) in [
        (
            "both, ci config prevails",
            all,
            all,
            "GitLab pipeline config",
        ),
        ("ci config only", all, all, "GitLab pipeline config"),
        ("executor config only", &[][..], all, "Runner config"),
        (
            "neither/default",
            &[][..],
            &[][..],
            "Runner config (default)",
        ),
    ] {
        let got = image::pull_policy_source(&list(ci), &list(executor));
        t.check(
            FILE,
            &format!("Test_GetPullPolicySource/{case}"),
            got == want,
            || format!("got {got:?}, want {want:?}"),
        );
    }
}

pub fn pull_manager_tables(t: &mut Tally) {
    pull_policies_table(t);
    scripted_cases(t);
    auth_cases(t);
    policy_cases(t);
    platform_cases(t);
}
