//! executors/docker/services_test.go TestGetServiceDefinitions: the runner's services, then the
//! job's (checked against `allowed_services` unless the runner has the same image), then the
//! `services_limit` check, run through [`services::definitions`]. Upstream's texts start
//! drover's messages: `too many services requested: N, only M allowed`, and for a refused
//! service the job-log line upstream prints before its `disallowed image` error (`The "X"
//! image is not present on list of allowed services:`).

use drover::executor::script::variables::VarList;
use drover::executor::services::{self, ServiceDefinition};
use drover::executor::settings::{ConfigService, ServiceSettings};
use drover::executor::FailureReason;
use drover::job::Image;

use super::Tally;

const TABLE: &str = "executors/docker/services_test.go TestGetServiceDefinitions";

/// A runner service: (name, alias, command, entrypoint).
type Runner = (
    &'static str,
    &'static str,
    &'static [&'static str],
    &'static [&'static str],
);

/// An expected definition: (image, aliases, command, entrypoint).
type Def = (
    &'static str,
    &'static [&'static str],
    &'static [&'static str],
    Option<&'static [&'static str]>,
);

/// (case, runner services, job services, allowed_services, services_limit, definitions or the
/// error text).
type Case = (
    &'static str,
    &'static [Runner],
    &'static [&'static str],
    &'static [&'static str],
    Option<i64>,
    Result<&'static [Def], &'static str>,
);

const EXEC: &[&str] = &["executable", "param1", "param2"];
const ENTRY: &[&str] = &["executable", "param3", "param4"];

const CASES: &[Case] = &[
    (
        "all services with proper name and alias",
        &[
            ("name", "alias", EXEC, ENTRY),
            ("name2", "alias2", EXEC, &[]),
            ("name3", "alias3", &[], ENTRY),
        ],
        &[],
        &[],
        None,
        Ok(&[
            ("name", &["alias"], EXEC, Some(ENTRY)),
            ("name2", &["alias2"], EXEC, None),
            ("name3", &["alias3"], &[], Some(ENTRY)),
        ]),
    ),
    (
        "build service not in internal images but empty allowed services",
        &[("name", "alias", &[], &[])],
        &["name_not_in_internal"],
        &[],
        None,
        Ok(&[
            ("name", &["alias"], &[], None),
            ("name_not_in_internal", &[], &[], None),
        ]),
    ),
    (
        "build service not in internal images",
        &[("name", "", &[], &[])],
        &["name_not_in_internal"],
        &["name"],
        None,
        Err("The \"name_not_in_internal\" image is not present on list of allowed services:"),
    ),
    (
        "build service not in allowed services but in internal images",
        &[("name", "", &[], &[])],
        &["name"],
        &["allowed_name"],
        None,
        Ok(&[("name", &[], &[], None), ("name", &[], &[], None)]),
    ),
    (
        "empty service name",
        &[("", "", &[], &[])],
        &[],
        &[],
        None,
        Ok(&[("", &[], &[], None)]),
    ),
    (
        "requested 1 service, max 0",
        &[("name", "", &[], &[])],
        &[],
        &[],
        Some(0),
        Err("too many services requested: 1, only 0 allowed"),
    ),
    (
        "requested 1 service, max 1",
        &[("name", "", &[], &[])],
        &[],
        &[],
        Some(1),
        Ok(&[("name", &[], &[], None)]),
    ),
    (
        "requested 2 services, max 1",
        &[("name", "", &[], &[]), ("name", "", &[], &[])],
        &[],
        &[],
        Some(1),
        Err("too many services requested: 2, only 1 allowed"),
    ),
];

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

fn shape(d: &ServiceDefinition) -> (String, Vec<String>, Vec<String>, Option<Vec<String>>) {
    (
        d.image.clone(),
        d.aliases.clone(),
        d.command.clone(),
        d.entrypoint.clone(),
    )
}

pub fn service_definitions_table(t: &mut Tally) {
    for (case, runner, job, allowed, limit, want) in CASES {
        let settings = ServiceSettings {
            services: runner
                .iter()
                .map(|(name, alias, command, entrypoint)| ConfigService {
                    name: name.to_string(),
                    alias: alias.to_string(),
                    command: strings(command),
                    entrypoint: strings(entrypoint),
                    ..Default::default()
                })
                .collect(),
            allowed: strings(allowed),
            limit: *limit,
            ..Default::default()
        };
        let job: Vec<Image> = job
            .iter()
            .map(|name| serde_json::from_value(serde_json::json!({ "name": name })).expect("image"))
            .collect();
        let got = services::definitions(&settings, &job, &VarList::default());
        let agrees = match (&got, want) {
            (Ok(defs), Ok(want)) => {
                defs.iter().map(shape).collect::<Vec<_>>()
                    == want
                        .iter()
                        .map(|(i, a, c, e)| (i.to_string(), strings(a), strings(c), e.map(strings)))
                        .collect::<Vec<_>>()
            }
            (Err(e), Err(text)) => {
                e.reason == FailureReason::RunnerConfigurationError && e.message.starts_with(text)
            }
            _ => false,
        };
        t.check(TABLE, case, agrees, || {
            format!(
                "got {:?}, want {want:?}",
                got.as_ref()
                    .map(|d| d.iter().map(shape).collect::<Vec<_>>())
                    .map_err(|e| e.message.clone())
            )
        });
    }
}

/// services_test.go TestCreateFromServiceDefinition_AliasCollisionWarning: `nginx:latest` with
/// alias `shared`, third service of the job, after a service that holds `nginx` and `shared`:
/// one warning per alias in upstream's words, and no alias left, so it is not started.
pub fn alias_collision_case(t: &mut Tally) {
    let def = |image: &str| ServiceDefinition {
        image: image.to_string(),
        aliases: vec!["shared".to_string()],
        ..Default::default()
    };
    let mut taken = services::Aliases::default();
    let earlier = def("nginx");
    let _ = taken.claim(&services::parse_name(&earlier.image), &earlier, 0);
    let late = def("nginx:latest");
    let (aliases, warnings) = taken.claim(&services::parse_name(&late.image), &late, 2);
    let want = [
        r#"Skipping alias "nginx" for service "nginx:latest" (services[2]): alias is already in use by another service."#,
        r#"Skipping alias "shared" for service "nginx:latest" (services[2]): alias is already in use by another service."#,
    ];
    t.check(
        "executors/docker/services_test.go TestCreateFromServiceDefinition_AliasCollisionWarning",
        "",
        aliases.is_empty() && want.iter().all(|w| warnings.iter().any(|g| g == w)),
        || format!("aliases {aliases:?}, warnings {warnings:?}"),
    );
}

/// Whether `parts` occur in `text` in this order.
fn in_order(text: &str, parts: &[&str]) -> bool {
    let mut rest = text;
    parts.iter().all(|p| match rest.find(p) {
        Some(i) => {
            rest = &rest[i + p.len()..];
            true
        }
        None => false,
    })
}

/// services_test.go TestDockerWith…ServiceImagePullPolicy…: the service `alpine` (`alpine:latest`
/// once its name is parsed, as the executor pulls it) with its own `pull_policy` against the
/// config's `pull_policy` and `allowed_pull_policies`: accepted, or refused with upstream's
/// text (the image, then the policies in the order upstream's pattern names them).
pub fn service_pull_policy_table(t: &mut Tally) {
    type Case = (
        &'static str,
        &'static [&'static str],
        &'static [&'static str],
        &'static [&'static str],
        &'static [&'static str],
    );
    let cases: &[Case] = &[
        (
            "TestDockerWithNoDockerConfigAndWithServiceImagePullPolicyAlways",
            &[],
            &[],
            &["always"],
            &[],
        ),
        (
            "TestDockerWithDockerConfigAlwaysAndIfNotPresentAndWithServiceImagePullPolicyIfNotPresent",
            &["always", "if-not-present"],
            &[],
            &["if-not-present"],
            &[],
        ),
        (
            "TestDockerWithDockerConfigAlwaysButNotAllowedAndWithNoServiceImagePullPolicy",
            &["always"],
            &["if-not-present"],
            &[],
            &["always", " Runner config ", "if-not-present"],
        ),
        (
            "TestDockerWithDockerConfigAlwaysAndWithServiceImagePullPolicyIfNotPresent",
            &["always"],
            &["always"],
            &["if-not-present"],
            &["if-not-present", " GitLab pipeline config ", "always"],
        ),
    ];
    for (test, config, allowed, own, refusal) in cases {
        let name = services::parse_name("alpine");
        let got = drover::executor::image::effective_pull_policies_for(
            &name.image,
            &strings(own),
            &strings(config),
            &strings(allowed),
        );
        let agrees = match &got {
            Ok(_) => refusal.is_empty(),
            Err(e) => {
                !refusal.is_empty()
                    && e.message
                        .contains(r#"invalid pull policy for image "alpine:latest""#)
                    && in_order(&e.message, refusal)
            }
        };
        t.check(
            &format!("executors/docker/services_test.go {test}"),
            "",
            agrees,
            || format!("{got:?}"),
        );
    }
}
