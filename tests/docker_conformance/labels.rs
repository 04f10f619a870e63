//! executors/docker/internal/labels/labels_test.go: the label set of a job's containers and
//! volumes (TestNewLabeler checks a Go type only: not applicable).

use std::collections::HashMap;

use drover::engine::naming::short_token;
use drover::executor::labels;
use drover::executor::paths::Slot;
use drover::executor::script::variables::{Var, VarList};
use drover::job::JobPayload;

use super::Tally;

const FILE: &str = "executors/docker/internal/labels/labels_test.go";

fn payload(pipeline_id: Option<i64>) -> JobPayload {
    let mut job_info = serde_json::json!({"project_id": 123456});
    if let Some(id) = pipeline_id {
        job_info["pipeline_id"] = id.into();
    }
    JobPayload::from_json(
        &serde_json::json!({
            "id": 12345, "token": "t", "job_info": job_info,
            "git_info": {
                "sha": "sha", "before_sha": "before-sha", "ref": "ref",
                "repo_url": "https://ci-job-token:ToKeN123@gitlab.example.com/namespace/project.git"
            },
            "steps": [{"name": "script", "script": ["true"]}]
        })
        .to_string(),
    )
    .expect("payload")
}

fn labels_of(
    payload: &JobPayload,
    vars: &VarList,
    extra: &[(&str, &str)],
) -> HashMap<String, String> {
    let facts = labels::job_facts(
        payload,
        vars,
        short_token("test-token"),
        "some-system-ID",
        Slot {
            runner: 123,
            project: 456,
        },
        payload.timeout_secs(),
    );
    facts.labels("", extra)
}

pub fn labels_tables(t: &mut Tally) {
    let p = payload(None);
    let got = labels_of(
        &p,
        &VarList::default(),
        &[("other.label1", "1"), ("other.label2", "2")],
    );
    let want: HashMap<String, String> = [
        ("job.id", "12345"),
        (
            "job.url",
            "https://gitlab.example.com/namespace/project/-/jobs/12345",
        ),
        ("job.sha", "sha"),
        ("job.before_sha", "before-sha"),
        ("job.ref", "ref"),
        ("job.timeout", "2h0m0s"),
        ("project.id", "123456"),
        ("project.runner_id", "456"),
        ("pipeline.id", ""),
        ("runner.id", "test-toke"),
        ("runner.local_id", "123"),
        ("runner.system_id", "some-system-ID"),
        ("managed", "true"),
        ("other.label1", "1"),
        ("other.label2", "2"),
    ]
    .iter()
    .map(|(k, v)| (format!("{}{k}", labels::PREFIX), v.to_string()))
    .collect();
    t.check(FILE, "TestLabels", got == want, || {
        format!("got {got:?}, want {want:?}")
    });
    let cases: &[(&str, Option<i64>, Option<&str>, &str)] = &[
        (
            "pipelineID in job payload only",
            Some(987654321),
            None,
            "987654321",
        ),
        (
            "pipelineID in job variable only",
            None,
            Some("123456789"),
            "123456789",
        ),
        (
            "pipelineID in job variable and job payload",
            Some(987654321),
            Some("123456789"),
            "987654321",
        ),
        ("pipelineID not present at all", None, None, ""),
    ];
    for (case, in_payload, in_variable, want) in cases {
        let vars = VarList {
            vars: in_variable
                .iter()
                .map(|v| Var {
                    key: "CI_PIPELINE_ID".into(),
                    value: v.to_string(),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        };
        let got = labels_of(&payload(*in_payload), &vars, &[("other", "label")]);
        let got = got.get(&format!("{}pipeline.id", labels::PREFIX));
        t.check(
            FILE,
            &format!("TestLabels_pipelineIDSupport/{case}"),
            got.map(String::as_str) == Some(*want),
            || format!("got {got:?}, want {want:?}"),
        );
    }
}
