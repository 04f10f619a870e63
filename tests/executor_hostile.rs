//! Random and hostile job payloads through the executor's real code paths, without Docker:
//! payload parsing, the job plan (variables, expansion, paths, job-controlled settings, the
//! allowed and normalised image), every stage script, and the masked, size-limited trace fed
//! in random split writes. Nothing may panic; every output is bounded by its input (no
//! blow-up), every file path stays in its folder, and no registered secret survives masking.

use drover::executor::image::ImageRef;
use drover::executor::plan::plan_job;
use drover::executor::script::sources::{get_sources, SourcesInputs};
use drover::executor::script::user;
use drover::executor::trace::mask::{too_short_to_mask, Masker};
use drover::executor::trace::{MemorySink, Trace};
use drover::executor::RunnerSettings;
use drover::job::JobPayload;
use proptest::prelude::*;
use serde_json::{json, Value};

/// Strings an attacker would try: traversal, shell syntax, expansion syntax, control bytes,
/// markers, huge numbers, unicode.
fn hostile_string() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(String::new()),
        Just("../../../cache/x".to_string()),
        Just("..".to_string()),
        Just("/etc/passwd".to_string()),
        Just("$(touch /tmp/pwned)`id`;rm -rf /".to_string()),
        Just("${A}${B}$$A$".to_string()),
        Just("${".to_string()),
        Just("'\"\\\n\r\t\0".to_string()),
        Just("section_start:1:x\r\x1b[0K".to_string()),
        Just("registry.example.com/../busybox:test".to_string()),
        Just("9999999999999999999h".to_string()),
        Just("-1".to_string()),
        Just("1e400".to_string()),
        Just("glpat-abcdefghijklmnop".to_string()),
        Just("é日本\u{202e}".to_string()),
        "[ -~]{0,40}",
        any::<String>().prop_map(|s| s.chars().take(60).collect()),
    ]
}

fn hostile_int() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(json!(i64::MAX)),
        Just(json!(i64::MIN)),
        Just(json!(u64::MAX)),
        Just(json!(0)),
        Just(json!(-1)),
        Just(json!(1.5e300)),
        any::<i64>().prop_map(|i| json!(i)),
    ]
}

const KEYS: &[&str] = &[
    "GIT_STRATEGY",
    "GIT_CLONE_PATH",
    "GIT_DEPTH",
    "GIT_SUBMODULE_STRATEGY",
    "GIT_SUBMODULE_PATHS",
    "GIT_CHECKOUT",
    "GIT_CLEAN_FLAGS",
    "GIT_FETCH_EXTRA_FLAGS",
    "RUNNER_SCRIPT_TIMEOUT",
    "RUNNER_AFTER_SCRIPT_TIMEOUT",
    "GET_SOURCES_ATTEMPTS",
    "EXECUTOR_JOB_SECTION_ATTEMPTS",
    "CI_DEBUG_TRACE",
    "DOCKER_AUTH_CONFIG",
    "FF_MASK_ALL_DEFAULT_TOKENS",
    "A",
    "B",
    "../../../cache/x",
    "a b",
    "",
];

fn variable() -> impl Strategy<Value = Value> {
    (
        prop_oneof![
            proptest::sample::select(KEYS).prop_map(str::to_string),
            hostile_string()
        ],
        hostile_string(),
        any::<bool>(),
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(|(key, value, file, masked, raw)| {
            json!({"key": key, "value": value, "file": file, "masked": masked, "raw": raw})
        })
}

fn payload() -> impl Strategy<Value = Value> {
    (
        proptest::collection::vec(variable(), 0..12),
        hostile_int(),
        hostile_int(),
        hostile_string(),
        hostile_string(),
        proptest::collection::vec(hostile_string(), 0..4),
        hostile_string(),
        hostile_int(),
    )
        .prop_map(
            |(variables, timeout, depth, repo, image, script, token, project)| {
                json!({
                    "id": 1, "token": token,
                    "job_info": {"project_id": project, "name": "fuzz"},
                    "runner_info": {"timeout": timeout},
                    "git_info": {"repo_url": repo, "depth": depth, "ref": "main", "sha": "abc",
                                 "refspecs": ["+refs/heads/*:refs/remotes/origin/*"]},
                    "image": {"name": image},
                    "variables": variables,
                    "steps": [{"name": "script", "script": script},
                              {"name": "after_script", "script": script}],
                    "features": {"trace_sections": true}
                })
            },
        )
}

fn runner() -> RunnerSettings {
    let mut r = RunnerSettings {
        name: "fuzz".into(),
        token: "glrt-fuzzrunnertoken".into(),
        executor: "docker".into(),
        ..Default::default()
    };
    r.docker.image = "alpine:3".into();
    r.docker.allowed_images = vec!["registry.example.com/**".into(), "alpine:*".into()];
    r
}

/// Everything a job's scripts are made of, for the size bound.
fn input_size(p: &JobPayload, json: &str) -> usize {
    json.len()
        + p.variables
            .iter()
            .map(|v| v.value.len() + v.key.len())
            .sum::<usize>()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    /// Any bytes as a payload: an error or a payload, never a panic.
    #[test]
    fn any_bytes_parse_or_fail_cleanly(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        let text = String::from_utf8_lossy(&bytes);
        let _ = JobPayload::from_json(&text);
    }

    /// Hostile payloads through the plan and every stage script.
    #[test]
    fn hostile_payloads_plan_and_script_safely(value in payload()) {
        let text = value.to_string();
        let Ok(p) = JobPayload::from_json(&text) else { return Ok(()); };
        let _ = p.timeout_secs();
        let runner = runner();
        let Ok(plan) = plan_job(&p, &runner, Default::default()) else { return Ok(()); };
        // The image that runs is a valid, normalised reference that passed the allow list.
        let parsed = ImageRef::parse(&plan.image_name);
        prop_assert!(parsed.is_ok(), "{:?}", plan.image_name);
        // Every file variable's file is directly inside the temporary dir, or nowhere.
        for v in plan.vars.vars.iter().filter(|v| v.file) {
            if let Some(path) = plan.vars.file_path(&v.key) {
                let name = path.strip_prefix(&format!("{}/", plan.paths.tmp_dir));
                prop_assert!(name.is_some_and(|n| !n.contains('/') && n != ".."), "{path}");
            }
        }
        prop_assert!(plan.paths.build_dir.starts_with(&plan.paths.root_dir));
        let script: Vec<String> = p.steps.first().map(|s| s.script.clone()).unwrap_or_default();
        let sources = SourcesInputs {
            vars: &plan.vars,
            paths: &plan.paths,
            settings: &plan.settings,
            pre_get_sources: None,
            post_get_sources: None,
            user_agent: "drover fuzz",
            clean_git_config: None,
            auth: &drover::executor::script::sources::GitAuth {
                repo_url: &p.git_info.repo_url,
                token: &p.token,
                credentials_url: "https://gitlab.example.com",
                ..Default::default()
            },
        };
        let bodies = [
            user::prepare_script(&plan.paths, Some("machine"), &[]),
            get_sources(&p, &sources),
            user::step_script(&plan.vars, &plan.paths, None, &script, None, false),
            user::after_script(&plan.vars, &plan.paths, &script, false),
            user::cleanup_file_variables(
                &plan.vars,
                &plan.paths,
                Some("https://h"),
                drover::executor::script::sources::GitCleanup::new(&plan.settings, None),
            ),
        ];
        // Expansion is one pass over the unexpanded list, so a script is bounded by the
        // number of references times the longest value, far below this bound.
        let bound = 64 * 1024 + 64 * input_size(&p, &text);
        for b in &bodies {
            let s = b.finish(true);
            prop_assert!(s.len() <= bound, "script of {} bytes for input {}", s.len(), text.len());
        }
    }

    /// The trace: random secrets, random text with them, random split writes, a small
    /// output limit. No panic; output bounded by the limit; no maskable secret survives.
    #[test]
    fn split_writes_are_masked_and_bounded(
        secrets in proptest::collection::vec("[a-zA-Z0-9_\"\\\\-]{1,16}", 0..4),
        parts in proptest::collection::vec("[ -~\n]{0,30}", 1..10),
        cuts in proptest::collection::vec(1usize..17, 1..30),
        limit in 0usize..4096,
    ) {
        let mut text = String::new();
        for (i, part) in parts.iter().enumerate() {
            text.push_str(part);
            if let Some(s) = secrets.get(i % secrets.len().max(1)) {
                text.push_str(s);
            }
        }
        let mut sink = MemorySink::default();
        {
            let mut t = Trace::new(&mut sink, Masker::new(&secrets, &[]), limit, true);
            t.section_start("step_script", "Executing");
            let bytes = text.as_bytes();
            let mut at = 0;
            for c in cuts.iter().cycle() {
                if at >= bytes.len() {
                    break;
                }
                let end = (at + c).min(bytes.len());
                t.write(&bytes[at..end]);
                at = end;
            }
            t.section_end("step_script");
            t.flush();
        }
        let out = sink.text();
        let notice = 160 + limit.to_string().len();
        prop_assert!(out.len() <= limit + notice, "{} > {limit}", out.len());
        for s in secrets.iter().filter(|s| !too_short_to_mask(s)) {
            // A secret that is a substring of another masked one may vanish with it; it may
            // never appear whole in the output.
            prop_assert!(!out.contains(s.as_str()), "{s:?} in {out:?}");
        }
    }
}
