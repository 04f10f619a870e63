//! Conformance with gitlab-runner's own test tables for the config, S3 cache settings and GitLab
//! client area: each row of upstream's tables is a case here, written as inputs and the
//! behaviour upstream expects, and run against drover's code. Prints
//! `config-api conformance: N cases, N agree, K deliberate differences` and fails on any case
//! that disagrees and is not a documented deliberate difference.
//!
//! Tables covered (upstream file, test):
//! * `cache/cacheconfig/cacheconfig_test.go`: AuthType, DualStack, Encryption, Endpoint;
//! * `network/retry_requester_test.go`: calculateWaitTime, ShouldRetryRequest, NormalizedURI,
//!   Do (scripted answers from a server in the test);
//! * `common/config_test.go`: StringOrArray_UnmarshalFlag, RunnerCredentials_SameAs,
//!   DockerMachine (idle settings in force at a time, through config.toml),
//!   DockerConfig_GetPullPolicies and _GetAllowedPullPolicies (through the effective policies),
//!   ParseVariable and InvalidParseVariable, ConfigParse (the docker rows),
//!   StringOrArray_UnmarshalTOML, Service_ToImageDefinition, RunnerSettings_IsFeatureFlagOn,
//!   Docker_UserIsAllowed, RunnerCredentials_HasToken, RunnerSettings_ComputeLabels,
//!   _ComputedLabels, _CombineLabels_MultipleCalls, Config_Validate, LoadConfig,
//!   LoadConfig_ExpandsEnvironmentVariables, RunnerConfig_ValidateMachineOptionsWithName,
//!   RunnerByName, RunnerByToken, RunnerByURLAndID, RunnerByNameAndToken,
//!   Config_SaveConfig_CustomBuildDir;
//! * `helpers/timeperiod/period_test.go`: InPeriod, InvalidTimezone, TimeperiodsWithTimezone
//!   (through an autoscaling section's `Periods` and `Timezone`);
//! * `network/gitlab_test.go`: RequestJob (outcome and health), UnregisterRunner,
//!   UnregisterRunnerManager, ResetToken, ResetTokenWithPAT, RegisterRunner, RegisterRunner_OnRunnerLimitHit,
//!   VerifyRunnerOnLegacyServer, VerifyRunner, UpdateJob, UpdateJobAsKeepAlive, UnknownPatchTrace,
//!   ForbiddenPatchTrace, JobFailedStatePatchTrace, PatchTraceCantConnect, PatchTrace,
//!   RangeMismatchPatchTrace, PatchTraceUpdatedTrace, AbortedPatchTrace,
//!   UpdateIntervalHeaderHandling, PatchTraceContentRangeAndLength,
//!   PatchTraceContentRangeHeaderValues, PatchTraceUrlParams, SetLastUpdate, RunnerVersion,
//!   AddCorrelationIDHeader;
//! * `network/trace_test.go` (the per-job trace against a server answering as the test's
//!   mock): IgnoreStatusChange, TouchJobAbort, TouchJobCancel, SendPatchAbort,
//!   JobFinishTraceUpdateRetry, JobDelayedTraceProcessingWithRejection, JobMaxTracePatchSize,
//!   JobFinishStatusUpdateRetry, JobIncrementalPatchSend, JobIncrementalStatusRefresh,
//!   CancelingJobIncrementalUpdate, UpdateIntervalChanges, JobChecksum, JobBytesize (not
//!   JobOutputLimit, in `tests/trace_conformance.rs`; not the runtime-environment-key and
//!   `FF_USE_DYNAMIC_TRACE_FORCE_SEND_INTERVAL` rows, features drover does not have);
//! * `network/gitlab_test.go` getFeatures_TwoPhaseJobCommit, getFeatures_JobInputs,
//!   RequestJob/RegisterRunner/UpdateJob_TransmitsTwoPhaseJobCommit,
//!   VerifyRunner_TransmitsRunnerInfo; `network/retry_tracker_test.go`: WithRetryTracker;
//! * `network/client_test.go`: UrlFixing, ClientHandleCharsetInContentType,
//!   307and308Redirections, EnsureUserAgentAlwaysSent, ClientInvalidSSL, ClientTLSCAFile,
//!   ClientCertificateInPredefinedDirectory, ClientInvalidTLSAuth, ClientTLSAuth,
//!   ClientTLSAuthCertificatesInPredefinedDirectory (against a TLS server in the test); `network/remote_job_state_response_test.go`:
//!   NewTracePatchResponse; `helpers/featureflags/flags_test.go`: IsOn, GetAll (the flag list
//!   and defaults);
//! * `cache/cache_test.go`: GenerateObjectName (the sharded rows of `FF_HASH_CACHE_KEYS`
//!   too), CacheOperations (download and upload URLs; not GoCloud URLs);
//! * `common/build_test.go`: GetPrepareTimeout, GetGetSourcesTimeout (the phase limits; the
//!   Build*Timeout runs are end-to-end tests in `tests/executor_engine.rs`).

mod test_certs;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use drover::cache::s3::{base_url, custom_endpoint, path_style, S3Cache};
use drover::config::cache::CacheS3Config;
use drover::gitlab::client::is_retried_status;
use drover::gitlab::{
    normalized_path, retry_wait, Client, ClientSettings, Info, JobCredentials, JobState, JobUpdate,
    RetryPolicy, TraceOutput,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// AuthType rows: case, ServerAddress, AccessKey, SecretKey, AuthenticationType, expected.
type AuthRow = (
    &'static str,
    &'static str,
    &'static str,
    &'static str,
    &'static str,
    Option<&'static str>,
);

/// Endpoint rows: case, ServerAddress, Insecure, PathStyle, BucketName, endpoint, path style.
type EndpointRow = (
    &'static str,
    &'static str,
    bool,
    Option<bool>,
    &'static str,
    Option<&'static str>,
    bool,
);

/// Scripted answers: status and headers.
type Script = Vec<(u16, Vec<(&'static str, String)>)>;

/// An answer: status, headers, body.
type Answer = (u16, Vec<(&'static str, String)>, String);

/// Scripted answers with bodies.
type BodyScript = Vec<Answer>;

/// What verify makes of an answer: the verdict, the runner ID and the token expiry sent.
type VerifyOutcome = (&'static str, i64, Option<String>);

/// RetryRequester_Do rows: case, the server's answers, final status, attempts.
type DoRow = (&'static str, Script, i32, u32);

/// DockerMachine rows: case, `[runners.machine]` body, (IdleCount, IdleTime) or a load error.
type MachineRow = (&'static str, String, Option<(i64, i64)>);

/// Pull-policy rows: case, the job's policies, pull_policy, allowed_pull_policies, the
/// effective policies or an error.
type PolicyRow = (
    &'static str,
    &'static [&'static str],
    &'static [&'static str],
    &'static [&'static str],
    Result<Vec<&'static str>, ()>,
);

/// Label pairs.
type Pairs = Vec<(&'static str, &'static str)>;

/// ComputeLabels rows: case, runner labels, global labels, computed labels.
type LabelRow = (&'static str, Pairs, Pairs, Pairs);

/// Config_Validate rows: case, global labels, the tested runner's labels, what the error names.
type ValidateRow = (&'static str, Pairs, Pairs, Option<&'static str>);

/// UpdateJob rows: case, status, headers, the state sent, expected state, cancel requested.
type UpdateRow = (
    &'static str,
    u16,
    Vec<(&'static str, String)>,
    JobState,
    drover::gitlab::UpdateState,
    bool,
);

/// One case's verdict.
enum Verdict {
    Agree,
    Differ(String),
}

/// The cases run so far, by upstream test.
#[derive(Default)]
struct Tally {
    cases: Vec<(String, Verdict)>,
}

/// Cases where drover differs on purpose, with the reason (also in README and CHANGELOG).
const DELIBERATE: &[(&str, &str)] = &[];

impl Tally {
    fn check<T: PartialEq + std::fmt::Debug>(&mut self, case: &str, got: T, want: T) {
        let verdict = if got == want {
            Verdict::Agree
        } else {
            Verdict::Differ(format!("got {got:?}, upstream {want:?}"))
        };
        self.cases.push((case.to_owned(), verdict));
    }

    /// Prints the tally and panics on a disagreement that is not deliberate.
    fn finish(self, area: &str) {
        let deliberate = |name: &str| DELIBERATE.iter().any(|(n, _)| *n == name);
        let agree = self
            .cases
            .iter()
            .filter(|(_, v)| matches!(v, Verdict::Agree))
            .count();
        let mut known = 0;
        let mut failures = Vec::new();
        for (name, v) in &self.cases {
            if let Verdict::Differ(why) = v {
                if deliberate(name) {
                    known += 1;
                } else {
                    failures.push(format!("{name}: {why}"));
                }
            }
        }
        println!(
            "{area} conformance: {} cases, {agree} agree, {known} deliberate differences",
            self.cases.len()
        );
        assert!(!self.cases.is_empty(), "no case ran: the tables are empty");
        assert!(
            failures.is_empty(),
            "cases that differ from upstream:\n{}",
            failures.join("\n")
        );
    }
}

fn s3(f: impl FnOnce(&mut CacheS3Config)) -> CacheS3Config {
    let mut c = CacheS3Config::default();
    f(&mut c);
    c
}

fn cacheconfig(t: &mut Tally) {
    // AuthType: (case, ServerAddress, AccessKey, SecretKey, AuthenticationType, expected).
    let auth: &[AuthRow] = &[
        ("Everything is empty", "", "", "", "", Some("iam")),
        (
            "Both AccessKey & SecretKey are empty",
            "s3.amazonaws.com",
            "",
            "",
            "",
            Some("iam"),
        ),
        (
            "SecretKey is empty",
            "s3.amazonaws.com",
            "TOKEN",
            "",
            "",
            Some("iam"),
        ),
        (
            "AccessKey is empty",
            "s3.amazonaws.com",
            "",
            "TOKEN",
            "",
            Some("iam"),
        ),
        (
            "ServerAddress is empty",
            "",
            "TOKEN",
            "TOKEN",
            "",
            Some("iam"),
        ),
        (
            "ServerAddress & AccessKey are empty",
            "",
            "",
            "TOKEN",
            "",
            Some("iam"),
        ),
        (
            "ServerAddress & SecretKey are empty",
            "",
            "TOKEN",
            "",
            "",
            Some("iam"),
        ),
        (
            "Nothing is empty",
            "s3.amazonaws.com",
            "TOKEN",
            "TOKEN",
            "",
            Some("access-key"),
        ),
        (
            "IAM set as auth type",
            "s3.amazonaws.com",
            "TOKEN",
            "TOKEN",
            "iam",
            Some("iam"),
        ),
        (
            "Root credentials set as auth type",
            "",
            "TOKEN",
            "TOKEN",
            "access-key",
            Some("access-key"),
        ),
        (
            "Explicitly set but lowercase auth type",
            "",
            "TOKEN",
            "TOKEN",
            "access-key",
            Some("access-key"),
        ),
        (
            "Explicitly set invalid auth type",
            "",
            "TOKEN",
            "TOKEN",
            "invalid",
            None,
        ),
    ];
    for (case, server, access, secret, kind, want) in auth {
        let c = s3(|c| {
            c.server_address = (*server).into();
            c.access_key = (*access).into();
            c.secret_key = (*secret).into();
            c.authentication_type = (*kind).into();
            c.bucket_name = "name".into();
            c.bucket_location = "us-east-1a".into();
        });
        t.check(&format!("AuthType/{case}"), c.auth_type(), *want);
    }

    // DualStack: the AWS endpoint is dual-stack unless `DualStack = false`.
    for (case, setting, want) in [
        ("Dual Stack omitted", None, true),
        ("Dual Stack set to true", Some(true), true),
        ("Dual Stack set to false", Some(false), false),
    ] {
        let c = s3(|c| c.dual_stack = setting);
        let url = base_url(&c, "eu-central-1");
        t.check(
            &format!("DualStack/{case}"),
            url.contains(".dualstack."),
            want,
        );
    }

    // Encryption: the headers a presigned upload is signed with.
    let arn = "aws:arn:::1234";
    let enc: &[(&str, &str, &str, &[&str])] = &[
        ("no encryption", "", "", &[]),
        (
            "S3 encryption",
            "S3",
            "",
            &["x-amz-server-side-encryption: AES256"],
        ),
        ("unknown encryption", "BLAH", "", &[]),
        (
            "AES256 encryption",
            "aes256",
            "",
            &["x-amz-server-side-encryption: AES256"],
        ),
        (
            "KMS encryption",
            "kms",
            arn,
            &[
                "x-amz-server-side-encryption: aws:kms",
                "x-amz-server-side-encryption-aws-kms-key-id: aws:arn:::1234",
            ],
        ),
        (
            "AWS:KMS encryption",
            "aws:kms",
            arn,
            &[
                "x-amz-server-side-encryption: aws:kms",
                "x-amz-server-side-encryption-aws-kms-key-id: aws:arn:::1234",
            ],
        ),
        (
            "DSSE-KMS encryption",
            "DSSE-KMS",
            arn,
            &[
                "x-amz-server-side-encryption: aws:kms:dsse",
                "x-amz-server-side-encryption-aws-kms-key-id: aws:arn:::1234",
            ],
        ),
        (
            "aws:kms:dsse encryption",
            "aws:kms:dsse",
            arn,
            &[
                "x-amz-server-side-encryption: aws:kms:dsse",
                "x-amz-server-side-encryption-aws-kms-key-id: aws:arn:::1234",
            ],
        ),
    ];
    for (case, sse, key, want) in enc {
        let c = s3(|c| {
            c.server_address = "minio.example.com".into();
            c.access_key = "a".into();
            c.secret_key = "s".into();
            c.bucket_name = "b".into();
            c.server_side_encryption = (*sse).into();
            c.server_side_encryption_key_id = (*key).into();
        });
        let got = S3Cache::new(&c, Duration::from_secs(60))
            .map(|s| s.upload("k", "k").headers[1..].to_vec())
            .map_err(|e| e.to_string());
        let want: Vec<String> = want.iter().map(|h| (*h).to_owned()).collect();
        t.check(&format!("Encryption/{case}"), got, Ok(want));
    }

    // Endpoint: (case, ServerAddress, Insecure, PathStyle, BucketName, endpoint, path style).
    let endpoints: &[EndpointRow] = &[
        ("no server address", "", false, None, "", None, false),
        (
            "bad hostname",
            "local\0host:8080",
            false,
            None,
            "",
            None,
            false,
        ),
        (
            "HTTPS server address",
            "minio.example.com:8080",
            false,
            None,
            "",
            Some("https://minio.example.com:8080"),
            true,
        ),
        (
            "HTTP server address",
            "minio.example.com:8080",
            true,
            None,
            "",
            Some("http://minio.example.com:8080"),
            true,
        ),
        (
            "AWS us-east-2 endpoint",
            "s3.us-east-2.amazonaws.com",
            false,
            None,
            "",
            Some("https://s3.us-east-2.amazonaws.com"),
            false,
        ),
        (
            "AWS us-east-2 endpoint with bucket",
            "my-bucket.s3.us-east-2.amazonaws.com",
            false,
            None,
            "my-bucket",
            Some("https://my-bucket.s3.us-east-2.amazonaws.com"),
            true,
        ),
        (
            "AWS FIPS endpoint",
            "s3-fips.us-west-1.amazonaws.com",
            false,
            None,
            "",
            Some("https://s3-fips.us-west-1.amazonaws.com"),
            false,
        ),
        (
            "Google endpoint",
            "storage.googleapis.com",
            false,
            None,
            "",
            Some("https://storage.googleapis.com"),
            false,
        ),
        (
            "Custom HTTPS server on standard port",
            "minio.example.com:443",
            false,
            Some(false),
            "",
            Some("https://minio.example.com"),
            false,
        ),
        (
            "Custom HTTP server on standard port",
            "minio.example.com:80",
            true,
            Some(false),
            "",
            Some("http://minio.example.com"),
            false,
        ),
        (
            "Custom HTTPS server on HTTP port",
            "minio.example.com:80",
            false,
            Some(false),
            "",
            Some("https://minio.example.com:80"),
            false,
        ),
        (
            "Custom HTTPS server with path style disabled",
            "minio.example.com:8080",
            false,
            Some(false),
            "",
            Some("https://minio.example.com:8080"),
            false,
        ),
    ];
    for (case, server, insecure, style, bucket, want_url, want_path) in endpoints {
        let c = s3(|c| {
            c.server_address = (*server).into();
            c.insecure = *insecure;
            c.path_style = *style;
            c.bucket_name = (*bucket).into();
        });
        // Upstream's endpoint URL is absent when unset or when it does not parse.
        let url = custom_endpoint(&c).filter(|e| reqwest::Url::parse(e).is_ok());
        t.check(
            &format!("Endpoint/{case}"),
            (url.as_deref(), path_style(&c)),
            (*want_url, *want_path),
        );
    }
}

fn retry_requester_pure(t: &mut Tally) {
    use http::header::{HeaderMap, HeaderValue};
    let now = chrono::Utc::now();
    let backoff = Duration::from_millis(100);
    let headers = |pairs: &[(&'static str, String)]| {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, HeaderValue::from_str(v).expect("header"));
        }
        h
    };
    let reset = (now + chrono::Duration::minutes(2))
        .format("%a, %d %b %Y %H:%M:%S GMT")
        .to_string();
    let cases: Vec<(&str, HeaderMap, Duration)> = vec![
        (
            "valid reset time",
            headers(&[("ratelimit-resettime", reset)]),
            Duration::from_secs(120),
        ),
        (
            "fallback to retry time",
            headers(&[
                ("ratelimit-resettime", "invalid time".into()),
                ("retry-after", "120".into()),
            ]),
            Duration::from_secs(120),
        ),
        (
            "valid retry time",
            headers(&[("retry-after", "120".into())]),
            Duration::from_secs(120),
        ),
        (
            "fallback to provided backoff",
            headers(&[
                ("ratelimit-resettime", "invalid time".into()),
                ("retry-after", "invalid time".into()),
            ]),
            Duration::from_millis(100),
        ),
    ];
    for (case, h, want) in cases {
        let got = retry_wait(&h, now, backoff);
        // Upstream allows a second either way (the reset time has whole seconds).
        let close = got.abs_diff(want) <= Duration::from_secs(1);
        t.check(&format!("calculateWaitTime/{case}"), close, true);
    }

    for (status, want) in [
        (408, true),
        (429, true),
        (500, true),
        (502, true),
        (503, true),
        (504, true),
        (515, true),
        (200, false),
        (308, false),
    ] {
        t.check(
            &format!("ShouldRetryRequest/{status}"),
            is_retried_status(status),
            want,
        );
    }

    for (path, want) in [
        ("/", "/"),
        ("/runners", "/runners"),
        ("/runners/verify", "/runners/verify"),
        ("/jobs/12345", "/jobs/{id}"),
        ("/jobs/12345/trace", "/jobs/{id}/trace"),
        ("/1", "/{id}"),
        ("/1/2/3", "/{id}/{id}/{id}"),
        ("/1/", "/{id}/"),
    ] {
        t.check(
            &format!("NormalizedURI/{path}"),
            normalized_path(path).as_str(),
            want,
        );
    }
}

/// A server that answers each request with the next scripted status and headers, recording
/// each request as received (request line, headers, body); past the script it answers 200.
async fn scripted(script: Script) -> (String, Arc<Mutex<Vec<String>>>) {
    scripted_bodies(
        script
            .into_iter()
            .map(|(status, headers)| (status, headers, String::new()))
            .collect(),
    )
    .await
}

/// [`scripted`] with a body for each answer.
async fn scripted_bodies(script: BodyScript) -> (String, Arc<Mutex<Vec<String>>>) {
    let script = Mutex::new(script.into_iter());
    serve(move |_| {
        script
            .lock()
            .expect("script")
            .next()
            .unwrap_or((200, Vec::new(), String::new()))
    })
    .await
}

/// A server that answers each request (request line, headers and body as received) with
/// what `respond` makes of it, recording every request.
async fn serve(
    respond: impl Fn(&str) -> Answer + Send + Sync + 'static,
) -> (String, Arc<Mutex<Vec<String>>>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    let heads = Arc::new(Mutex::new(Vec::new()));
    let seen = heads.clone();
    let respond = Arc::new(respond);
    tokio::spawn(async move {
        while let Ok((mut conn, _)) = listener.accept().await {
            let seen = seen.clone();
            let respond = respond.clone();
            tokio::spawn(async move {
                let mut buf = Vec::new();
                loop {
                    let mut chunk = [0u8; 16384];
                    let n = match conn.read(&mut chunk).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => n,
                    };
                    buf.extend_from_slice(&chunk[..n]);
                    let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
                        continue;
                    };
                    let head = String::from_utf8_lossy(&buf[..end]).to_lowercase();
                    let length: usize = head
                        .lines()
                        .find_map(|l| l.strip_prefix("content-length:"))
                        .and_then(|v| v.trim().parse().ok())
                        .unwrap_or(0);
                    if buf.len() < end + 4 + length {
                        continue;
                    }
                    let request = String::from_utf8_lossy(&buf[..end + 4 + length]).to_string();
                    buf.drain(..end + 4 + length);
                    let (status, headers, body) = respond(&request);
                    seen.lock().expect("requests").push(request);
                    let mut out =
                        format!("HTTP/1.1 {status} X\r\nContent-Length: {}\r\n", body.len());
                    for (k, v) in headers {
                        out.push_str(&format!("{k}: {v}\r\n"));
                    }
                    out.push_str("\r\n");
                    out.push_str(&body);
                    if conn.write_all(out.as_bytes()).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    (url, heads)
}

async fn retry_requester_do(t: &mut Tally) {
    let update = JobUpdate {
        state: JobState::Running,
        failure_reason: None,
        exit_code: 0,
        output: TraceOutput::default(),
    };
    let info = Info::registration();
    let creds = JobCredentials {
        id: 1,
        token: "job-token".into(),
    };
    let soon = || {
        (chrono::Utc::now() + chrono::Duration::seconds(1))
            .format("%a, %d %b %Y %H:%M:%S GMT")
            .to_string()
    };
    let cases: Vec<DoRow> = vec![
        ("success", vec![(200, vec![])], 200, 1),
        ("non retry-able status code", vec![(400, vec![])], 400, 1),
        ("retry-able status code", vec![(500, vec![])], 200, 2),
        (
            "with reset header",
            vec![(429, vec![("RateLimit-ResetTime", soon())])],
            200,
            2,
        ),
        (
            "invalid reset header",
            vec![(429, vec![("RateLimit-ResetTime", "invalid".into())])],
            200,
            2,
        ),
        (
            "with retry header",
            vec![(429, vec![("Retry-After", "1".into())])],
            200,
            2,
        ),
        (
            "with invalid retry header",
            vec![(429, vec![("Retry-After", "invalid".into())])],
            200,
            2,
        ),
        (
            "retries exhausted",
            vec![(429, vec![]), (429, vec![]), (429, vec![])],
            429,
            3,
        ),
    ];
    for (case, script, want_status, want_attempts) in cases {
        let (url, count) = scripted(script).await;
        let client = Client::new(&ClientSettings {
            url,
            retry: RetryPolicy {
                max_attempts: 3,
                base: Duration::from_millis(10),
                cap: Duration::from_millis(100),
            },
            ..ClientSettings::default()
        })
        .expect("client");
        let r = client.update_job(&creds, &info, &update).await;
        let attempts = count.lock().expect("count").len() as u32;
        t.check(
            &format!("RetryRequester_Do/{case}"),
            (r.status, attempts),
            (want_status, want_attempts),
        );
    }
    // "client error": the connection fails; one attempt, no retry.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!("http://{}", closed.local_addr().expect("addr"));
    drop(closed);
    let client = Client::new(&ClientSettings {
        url,
        ..ClientSettings::default()
    })
    .expect("client");
    let r = client.update_job(&creds, &info, &update).await;
    t.check("RetryRequester_Do/client error", r.status, -1);
}

fn config_tables(t: &mut Tally) {
    use drover::cli::register::comma_list;
    for (case, value, want) in [
        ("empty string", "", vec![]),
        ("single value", "if-not-present", vec!["if-not-present"]),
        (
            "comma separated values",
            "if-not-present,always",
            vec!["if-not-present", "always"],
        ),
        (
            "value with leading and trailing spaces",
            "  if-not-present , always ",
            vec!["if-not-present", "always"],
        ),
    ] {
        t.check(
            &format!("StringOrArray_UnmarshalFlag/{case}"),
            comma_list(&[value.to_owned()]),
            want.into_iter().map(str::to_owned).collect::<Vec<_>>(),
        );
    }

    use drover::cli::runners::same_credentials;
    let g = "https://gitlab.com";
    let e = "https://gitlab.example.com";
    for (case, (u1, t1), (u2, t2), want) in [
        (
            "same token and same URL",
            (g, "token123"),
            (g, "token123"),
            true,
        ),
        (
            "same token but different URL",
            (g, "token123"),
            (e, "token123"),
            false,
        ),
        (
            "different token but same URL",
            (g, "token123"),
            (g, "token456"),
            false,
        ),
        (
            "different token and different URL",
            (g, "token123"),
            (e, "token456"),
            false,
        ),
        (
            "same token, first URL is wildcard *",
            ("*", "token123"),
            (g, "token123"),
            true,
        ),
        (
            "same token, second URL is wildcard *",
            (g, "token123"),
            ("*", "token123"),
            true,
        ),
        (
            "same token, both URLs are wildcard *",
            ("*", "token123"),
            ("*", "token123"),
            true,
        ),
        (
            "same token, first URL is empty",
            ("", "token123"),
            (g, "token123"),
            true,
        ),
        (
            "same token, second URL is empty",
            (g, "token123"),
            ("", "token123"),
            true,
        ),
        (
            "same token, both URLs are empty",
            ("", "token123"),
            ("", "token123"),
            true,
        ),
        (
            "same token, empty and wildcard *",
            ("", "token123"),
            ("*", "token123"),
            true,
        ),
        (
            "different token, first URL is wildcard *",
            ("*", "token123"),
            (g, "token456"),
            false,
        ),
        (
            "different token, second URL is wildcard *",
            (g, "token123"),
            ("*", "token456"),
            false,
        ),
        (
            "same token, URLs differ only by trailing slash",
            (g, "token123"),
            ("https://gitlab.com/", "token123"),
            false,
        ),
        (
            "same token, URLs differ by protocol",
            ("http://gitlab.com", "token123"),
            (g, "token123"),
            false,
        ),
    ] {
        t.check(
            &format!("RunnerCredentials_SameAs/{case}"),
            same_credentials(u1, t1, u2, t2),
            want,
        );
    }
}

/// `TestDockerMachine`: the idle settings in force at 2020-05-05 20:00 local time, for a
/// `[runners.machine]` written as config.toml (deprecated off-peak keys are ignored; the last
/// active autoscaling section wins; an invalid period is a load error).
fn docker_machine(t: &mut Tally) {
    use chrono::TimeZone;
    let now = chrono::Local
        .with_ymd_and_hms(2020, 5, 5, 20, 0, 0)
        .single()
        .expect("a local time")
        .with_timezone(&chrono::Utc);
    let active = "[\"* * 20 * * * *\"]";
    let inactive = "[\"* * 22 * * * *\"]";
    let invalid = "[\"invalid period\"]";
    let section = |periods: &str, count: i64, time: i64| {
        format!("[[runners.machine.autoscaling]]\nPeriods = {periods}\nIdleCount = {count}\nIdleTime = {time}\n")
    };
    let offpeak = |periods: &str| {
        format!("OffPeakPeriods = {periods}\nOffPeakIdleCount = 2\nOffPeakIdleTime = 2000\n")
    };
    let base = "IdleCount = 1\nIdleTime = 1000\n";
    let cases: Vec<MachineRow> = vec![
        ("global config only", base.to_string(), Some((1, 1000))),
        (
            "offpeak active ignored",
            format!("{base}{}", offpeak(active)),
            Some((1, 1000)),
        ),
        (
            "offpeak inactive ignored",
            format!("{base}{}", offpeak(inactive)),
            Some((1, 1000)),
        ),
        (
            "offpeak invalid format ignored",
            offpeak(invalid),
            Some((0, 0)),
        ),
        (
            "autoscaling config active",
            format!("{base}{}", section(active, 2, 2000)),
            Some((2, 2000)),
        ),
        (
            "autoscaling config inactive",
            format!("{base}{}", section(inactive, 2, 2000)),
            Some((1, 1000)),
        ),
        (
            "last matching autoscaling config is selected",
            format!(
                "{base}{}{}",
                section(active, 2, 2000),
                section(active, 3, 3000)
            ),
            Some((3, 3000)),
        ),
        (
            "autoscaling overrides offpeak config",
            format!(
                "{base}{}{}{}{}",
                offpeak(active),
                section(active, 3, 3000),
                section(active, 4, 4000),
                section(inactive, 5, 5000)
            ),
            Some((4, 4000)),
        ),
        (
            "autoscaling invalid period config",
            format!("{base}{}", section(invalid, 3, 3000)),
            None,
        ),
    ];
    for (case, machine, want) in cases {
        let text = format!(
            "[[runners]]\nname = \"m\"\nurl = \"https://gitlab.example.com\"\ntoken = \"glrt-x\"\nexecutor = \"docker+machine\"\n[runners.machine]\nMachineDriver = \"none\"\nMachineName = \"m-%s\"\n{machine}"
        );
        let got = drover::config::load_str(&text, "case.toml").ok().map(|l| {
            let e = l.config.runners[0]
                .machine
                .as_ref()
                .expect("[runners.machine]")
                .effective_idle(now);
            (e.idle_count, e.idle_time)
        });
        t.check(&format!("DockerMachine/{case}"), got, want);
    }
}

/// The time-period tables: whether an autoscaling section with `periods` in `timezone` is in
/// force at `now` (`None`: the config does not load).
fn in_period(periods: &str, timezone: &str, now: chrono::DateTime<chrono::Utc>) -> Option<bool> {
    let text = format!(
        "[[runners]]\nname = \"m\"\nurl = \"https://gitlab.example.com\"\ntoken = \"glrt-x\"\nexecutor = \"docker+machine\"\n[runners.machine]\nMachineDriver = \"none\"\nMachineName = \"m-%s\"\n[[runners.machine.autoscaling]]\nPeriods = {periods}\nTimezone = \"{timezone}\"\nIdleCount = 7\n"
    );
    drover::config::load_str(&text, "case.toml").ok().map(|l| {
        l.config.runners[0]
            .machine
            .as_ref()
            .expect("[runners.machine]")
            .effective_idle(now)
            .active_section
            .is_some()
    })
}

fn time_periods(t: &mut Tally) {
    use chrono::TimeZone;
    let local = |secs: u32| {
        chrono::Local
            .with_ymd_and_hms(2017, 2, 22, 14, 59, secs)
            .single()
            .expect("a local time")
            .with_timezone(&chrono::Utc)
    };
    let wed = "[\"* 59 14 * * wed *\"]";
    for (case, now, want) in [
        ("at the minute", local(0), true),
        ("at its last second (upstream's quirk)", local(59), false),
        (
            "48 hours later",
            local(0) + chrono::Duration::hours(48),
            false,
        ),
        (
            "4 hours later",
            local(0) + chrono::Duration::hours(4),
            false,
        ),
        (
            "4 minutes later",
            local(0) + chrono::Duration::minutes(4),
            false,
        ),
    ] {
        t.check(
            &format!("InPeriod/{case}"),
            in_period(wed, "Local", now),
            Some(want),
        );
    }
    t.check(
        "InvalidTimezone",
        in_period("[]", "InvalidTimezone/String", local(0)),
        None,
    );
    let utc = |month: u32, hour: u32| {
        chrono::Utc
            .with_ymd_and_hms(2017, month, 1, hour, 30, 0)
            .single()
            .expect("a time")
    };
    let berlin = "[\"* * 10-17 * * * *\"]";
    for (case, now, want) in [
        ("January 16:30 UTC (17:30 CET)", utc(1, 16), true),
        ("July 16:30 UTC (18:30 CEST)", utc(7, 16), false),
        ("January 14:30 UTC", utc(1, 14), true),
        ("July 14:30 UTC", utc(7, 14), true),
        ("January 20:30 UTC", utc(1, 20), false),
        ("July 20:30 UTC", utc(7, 20), false),
    ] {
        t.check(
            &format!("TimeperiodsWithTimezone/{case}"),
            in_period(berlin, "Europe/Berlin", now),
            Some(want),
        );
    }
}

fn pull_policies(t: &mut Tally) {
    use drover::executor::image::effective_pull_policies;
    let list = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let names = |r: Result<Vec<drover::executor::image::PullPolicy>, _>| {
        r.map(|v| v.iter().map(|p| p.as_str()).collect::<Vec<_>>())
            .map_err(|_: drover::executor::JobFailure| ())
    };
    // (case, job's policies, pull_policy, allowed_pull_policies, effective or an error)
    let rows: [PolicyRow; 10] = [
        (
            "GetPullPolicies/nil pull_policy",
            &[],
            &[],
            &[],
            Ok(vec!["always"]),
        ),
        (
            "GetPullPolicies/empty pull_policy",
            &[],
            &[],
            &[],
            Ok(vec!["always"]),
        ),
        (
            "GetPullPolicies/empty string pull_policy",
            &[],
            &[""],
            &[],
            Err(()),
        ),
        (
            "GetPullPolicies/known elements in pull_policy",
            &[],
            &["always", "if-not-present", "never"],
            &[],
            Ok(vec!["always", "if-not-present", "never"]),
        ),
        (
            "GetPullPolicies/invalid pull_policy",
            &[],
            &["invalid"],
            &[],
            Err(()),
        ),
        (
            "GetAllowedPullPolicies/nil allowed_pull_policies",
            &[],
            &[],
            &[],
            Ok(vec!["always"]),
        ),
        (
            "GetAllowedPullPolicies/empty allowed_pull_policies",
            &[],
            &[],
            &[],
            Ok(vec!["always"]),
        ),
        (
            "GetAllowedPullPolicies/empty string allowed_pull_policies",
            &[],
            &[],
            &[""],
            Err(()),
        ),
        (
            "GetAllowedPullPolicies/known elements in allowed_pull_policies",
            &["never"],
            &[],
            &["always", "never"],
            Ok(vec!["never"]),
        ),
        (
            "GetAllowedPullPolicies/invalid allowed_pull_policies",
            &[],
            &[],
            &["invalid"],
            Err(()),
        ),
    ];
    for (case, job, config, allowed, want) in rows {
        let got = names(effective_pull_policies(
            &list(job),
            &list(config),
            &list(allowed),
        ));
        t.check(case, got, want);
    }
    use drover::executor::script::variables::parse_variable;
    t.check(
        "ParseVariable",
        parse_variable("key=value=value2"),
        Some(("key", "value=value2")),
    );
    t.check(
        "InvalidParseVariable",
        parse_variable("some_other_key"),
        None,
    );
}

fn phase_limits(t: &mut Tally) {
    use drover::config::GoDuration;
    use drover::executor::stage_limits::phase_limit;
    for key in ["prepare_timeout", "get_sources_timeout"] {
        let secs = |s: i64| Some(GoDuration::from_secs(s));
        let rows: [(&str, Option<GoDuration>, &str, Option<String>); 6] = [
            ("nil", None, "10m0s", None),
            ("is valid", secs(300), "5m0s", None),
            ("equals job timeout", secs(600), "10m0s", None),
            (
                "is zero",
                secs(0),
                "10m0s",
                Some(format!(
                    "{key} (0s) must be greater than 0; using job timeout (10m0s)"
                )),
            ),
            (
                "is negative",
                secs(-1),
                "10m0s",
                Some(format!(
                    "{key} (-1s) must be greater than 0; using job timeout (10m0s)"
                )),
            ),
            (
                "exceeds job timeout",
                secs(601),
                "10m0s",
                Some(format!(
                    "{key} (10m1s) exceeds job timeout (10m0s); using job timeout"
                )),
            ),
        ];
        for (case, set, want, warning) in rows {
            let got = phase_limit(key, set, 600);
            t.check(
                &format!("Get{key}/{key} {case}"),
                (got.limit.to_string(), got.warning),
                (want.to_owned(), warning),
            );
        }
    }
}

/// What a `TestConfigParse` row checks of a loaded config: the docker image, the services
/// (name, alias, environment) and the container labels.
type Parsed = (
    String,
    Vec<(String, String, Vec<String>)>,
    Vec<(String, String)>,
);

fn parsed(text: &str) -> Option<Parsed> {
    let loaded = drover::config::load_str(text, "case.toml").ok()?;
    let runner = loaded.config.runners.first()?;
    let docker = runner.docker.as_deref().cloned().unwrap_or_default();
    let services = docker
        .services
        .iter()
        .map(|s| (s.name.clone(), s.alias.clone(), s.environment.clone()))
        .collect();
    let labels = docker.container_labels.into_iter().collect();
    Some((docker.image, services, labels))
}

/// `common/config_test.go` tables about config.toml itself and the runner-side getters.
fn config_file_tables(t: &mut Tally) {
    let svc = |n: &str, a: &str, e: &[&str]| {
        (
            n.to_owned(),
            a.to_owned(),
            e.iter().map(|v| (*v).to_owned()).collect::<Vec<_>>(),
        )
    };
    let two = |a: (&str, &str), b: (&str, &str)| vec![svc(a.0, a.1, &[]), svc(b.0, b.1, &[])];
    let label = |k: &str, v: &str| vec![(k.to_owned(), v.to_owned())];
    let labels = |body: &str| {
        format!("[[runners]]\n[runners.docker]\nimage = \"image\"\n[runners.docker.container_labels]\n{body}\n")
    };
    let rows: Vec<(&str, String, Option<Parsed>)> = vec![
        (
            "as table with only name",
            "[[runners]]\n[[runners.docker.services]]\nname = \"svc1\"\n[[runners.docker.services]]\nname = \"svc2\"\n".into(),
            Some((String::new(), two(("svc1", ""), ("svc2", "")), vec![])),
        ),
        (
            "as table with only alias",
            "[[runners]]\n[[runners.docker.services]]\nalias = \"svc1\"\n[[runners.docker.services]]\nalias = \"svc2\"\n".into(),
            Some((String::new(), two(("", "svc1"), ("", "svc2")), vec![])),
        ),
        (
            "as table",
            "[[runners]]\n[[runners.docker.services]]\nname = \"svc1\"\nalias = \"svc1_alias\"\n[[runners.docker.services]]\nname = \"svc2\"\nalias = \"svc2_alias\"\n".into(),
            Some((
                String::new(),
                two(("svc1", "svc1_alias"), ("svc2", "svc2_alias")),
                vec![],
            )),
        ),
        (
            "as table int value name",
            "[[runners]]\n[[runners.docker.services]]\nname = 5\n".into(),
            None,
        ),
        (
            "as table int value alias",
            "[[runners]]\n[[runners.docker.services]]\nname = \"svc1\"\nalias = 5\n".into(),
            None,
        ),
        (
            "runners.docker and runners.docker.services",
            "[[runners]]\n[runners.docker]\nimage = \"image\"\n[[runners.docker.services]]\nname = \"svc1\"\n[[runners.docker.services]]\nname = \"svc2\"\n".into(),
            Some(("image".into(), two(("svc1", ""), ("svc2", "")), vec![])),
        ),
        (
            "runners.docker.services environment",
            "[[runners]]\n[runners.docker]\n[[runners.docker.services]]\nname = \"svc1\"\nenvironment = [\"ENV1=value1\", \"ENV2=value2\"]\n".into(),
            Some((
                String::new(),
                vec![svc("svc1", "", &["ENV1=value1", "ENV2=value2"])],
                vec![],
            )),
        ),
        (
            "Docker Container Labels with string key and value",
            labels("\"my.docker.TestContainerlabel1\" = \"TestContainerlabel-1\""),
            Some((
                "image".into(),
                vec![],
                label("my.docker.TestContainerlabel1", "TestContainerlabel-1"),
            )),
        ),
        (
            "Docker Container Labels with integer key and value",
            labels("5 = 5"),
            None,
        ),
        (
            "Docker Container Labels with integer value",
            labels("\"my.docker.TestContainerlabel1\" = 5"),
            None,
        ),
        (
            "Docker Container Labels with integer key",
            labels("5 = \"TestContainerlabel-1\""),
            Some(("image".into(), vec![], label("5", "TestContainerlabel-1"))),
        ),
    ];
    for (case, text, want) in rows {
        t.check(&format!("ConfigParse/{case}"), parsed(&text), want);
    }

    // StringOrArray_UnmarshalTOML, through `pull_policy` (`None`: the file does not load).
    for (case, value, want) in [
        ("no fields", None, Some(vec![])),
        ("empty string_or_array", Some("\"\""), Some(vec![""])),
        ("string", Some("\"always\""), Some(vec!["always"])),
        ("slice with invalid single value", Some("10"), None),
        (
            "valid slice with multiple values",
            Some("[\"unknown\", \"always\"]"),
            Some(vec!["unknown", "always"]),
        ),
        ("slice with mixed values", Some("[\"unknown\", 10]"), None),
        ("slice with invalid values", Some("[true, false]"), None),
    ] {
        let line = value
            .map(|v| format!("pull_policy = {v}\n"))
            .unwrap_or_default();
        let text = format!("[[runners]]\n[runners.docker]\nimage = \"i\"\n{line}");
        let got = drover::config::load_str(&text, "case.toml").ok().map(|l| {
            l.config.runners[0]
                .docker
                .as_ref()
                .map(|d| d.pull_policy.clone())
                .unwrap_or_default()
        });
        let want = want.map(|v| v.into_iter().map(str::to_owned).collect::<Vec<_>>());
        t.check(&format!("StringOrArray_UnmarshalTOML/{case}"), got, want);
    }

    // Service_ToImageDefinition, through the job's service definitions.
    use drover::executor::services::{definitions, ServiceDefinition};
    use drover::executor::settings::{ConfigService, ServiceSettings};
    let strings = |v: &[&str]| v.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
    let command = strings(&["executable", "param1", "param2"]);
    let entrypoint = strings(&["executable", "param3", "param4"]);
    let named = |name: &str| ConfigService {
        name: name.into(),
        ..Default::default()
    };
    let def = |image: &str, aliases: &[&str]| ServiceDefinition {
        image: image.into(),
        aliases: strings(aliases),
        ..Default::default()
    };
    let rows: Vec<(&str, ConfigService, ServiceDefinition)> = vec![
        ("empty service", ConfigService::default(), def("", &[])),
        ("only name", named("name"), def("name", &[])),
        (
            "only alias",
            ConfigService {
                alias: "alias".into(),
                ..Default::default()
            },
            def("", &["alias"]),
        ),
        (
            "name and alias",
            ConfigService {
                alias: "alias".into(),
                ..named("name")
            },
            def("name", &["alias"]),
        ),
        (
            "only aliases",
            ConfigService {
                alias: "alias-1 alias-2".into(),
                ..Default::default()
            },
            def("", &["alias-1", "alias-2"]),
        ),
        (
            "name and aliases",
            ConfigService {
                alias: "alias-1 alias-2".into(),
                ..named("name")
            },
            def("name", &["alias-1", "alias-2"]),
        ),
        (
            "command specified",
            ConfigService {
                command: command.clone(),
                ..named("name")
            },
            ServiceDefinition {
                command: command.clone(),
                ..def("name", &[])
            },
        ),
        (
            "entrypoint specified",
            ConfigService {
                entrypoint: entrypoint.clone(),
                ..named("name")
            },
            ServiceDefinition {
                entrypoint: Some(entrypoint.clone()),
                ..def("name", &[])
            },
        ),
        (
            "command and entrypoint specified",
            ConfigService {
                command: command.clone(),
                entrypoint: entrypoint.clone(),
                ..named("name")
            },
            ServiceDefinition {
                command: command.clone(),
                entrypoint: Some(entrypoint.clone()),
                ..def("name", &[])
            },
        ),
        (
            "environment specified",
            ConfigService {
                environment: strings(&["ENV1=value1", "ENV2=value2"]),
                ..named("name")
            },
            ServiceDefinition {
                variables: vec![
                    ("ENV1".into(), "value1".into()),
                    ("ENV2".into(), "value2".into()),
                ],
                ..def("name", &[])
            },
        ),
    ];
    let vars = drover::executor::script::variables::VarList::default();
    for (case, service, want) in rows {
        let settings = ServiceSettings {
            services: vec![service],
            ..Default::default()
        };
        let got = definitions(&settings, &[], &vars).map_err(|e| e.message);
        t.check(
            &format!("Service_ToImageDefinition/{case}"),
            got,
            Ok(vec![want]),
        );
    }

    // RunnerSettings_IsFeatureFlagOn.
    use drover::executor::script::variables::resolve_flag;
    use std::collections::BTreeMap;
    let custom = "TestRunnerSettings_IsFeatureFlagOn";
    let direct = "FF_USE_DIRECT_DOWNLOAD";
    for (case, config, name, want) in [
        ("feature flag not configured", vec![], custom, false),
        (
            "feature flag not configured but feature flag default is true",
            vec![],
            direct,
            true,
        ),
        ("feature flag on", vec![(custom, true)], custom, true),
        ("feature flag off", vec![(direct, false)], custom, false),
    ] {
        let config: BTreeMap<String, bool> =
            config.into_iter().map(|(k, v)| (k.to_owned(), v)).collect();
        t.check(
            &format!("RunnerSettings_IsFeatureFlagOn/{case}"),
            resolve_flag(&config, name, None),
            want,
        );
    }

    // Docker_UserIsAllowed: (case, job user, runner user, allowed_users, allowed).
    use drover::executor::containers::user_allowed;
    for (case, user, runner, allowed, want) in [
        ("no allowed users, neither specified", "", "", &[][..], true),
        (
            "no allowed users, runner user specified",
            "",
            "baba",
            &[],
            true,
        ),
        (
            "no allowed users, job user specified",
            "baba",
            "",
            &[],
            true,
        ),
        (
            "no allowed users, both specified",
            "yaga",
            "baba",
            &[],
            false,
        ),
        ("allowed users, neither specified", "", "", &["baba"], true),
        (
            "allowed users, runner user specified",
            "",
            "yaga",
            &["baba"],
            true,
        ),
        (
            "allowed users, job user specified",
            "baba",
            "yaga",
            &["baba"],
            true,
        ),
        (
            "allowed users, both specified",
            "yaga",
            "yaga",
            &["baba"],
            false,
        ),
    ] {
        let runner = (!runner.is_empty()).then_some(runner);
        t.check(
            &format!("Docker_UserIsAllowed/{case}"),
            user_allowed(runner, &strings(allowed), user),
            want,
        );
    }

    // RunnerCredentials_HasToken.
    use drover::manager::runloop::has_token;
    for (case, token, want) in [
        ("valid token", "abc123", true),
        ("empty string", "", false),
        ("single space", " ", false),
        ("multiple spaces", "   ", false),
        ("tab character", "\t", false),
        ("newline", "\n", false),
        ("mixed whitespace", " \t\n ", false),
        ("surrounded token", "  abc  ", true),
    ] {
        let runner = drover::config::RunnerConfig {
            token: token.into(),
            ..Default::default()
        };
        t.check(
            &format!("RunnerCredentials_HasToken/{case}"),
            has_token(&runner),
            want,
        );
    }
}

/// A `BTreeMap` of labels from pairs.
fn label_map(pairs: &[(&str, &str)]) -> std::collections::BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

/// A TOML table body of labels.
fn label_lines(pairs: &[(&str, &str)]) -> String {
    pairs
        .iter()
        .map(|(k, v)| format!("{k:?} = {v:?}\n"))
        .collect()
}

/// Labels, runner selection, machine options and loading tables of `common/config_test.go`.
fn labels_and_selection(t: &mut Tally) {
    use drover::gitlab::Info;
    // ComputeLabels: (case, runner labels, global labels, computed labels); the labels sent
    // to GitLab are the computed ones.
    let pg = [("env", "prod"), ("team", "backend")];
    let rows: Vec<LabelRow> = vec![
        (
            "nil labels and nil computed with empty global defaults",
            vec![],
            vec![],
            vec![],
        ),
        (
            "nil labels and nil computed with global defaults",
            vec![],
            pg.to_vec(),
            pg.to_vec(),
        ),
        (
            "empty labels with global defaults",
            vec![],
            pg.to_vec(),
            pg.to_vec(),
        ),
        (
            "runner labels override global defaults",
            vec![("env", "staging"), ("region", "us-west")],
            pg.to_vec(),
            vec![
                ("env", "staging"),
                ("team", "backend"),
                ("region", "us-west"),
            ],
        ),
        (
            "runner labels only, no global defaults",
            vec![("custom", "value"), ("runner", "specific")],
            vec![],
            vec![("custom", "value"), ("runner", "specific")],
        ),
        (
            "existing computed labels are overwritten",
            vec![("env", "staging")],
            vec![("team", "backend")],
            vec![("env", "staging"), ("team", "backend")],
        ),
        (
            "nil global defaults with existing labels",
            vec![("runner", "test")],
            vec![],
            vec![("runner", "test")],
        ),
        (
            "complex scenario with multiple overrides",
            vec![
                ("env", "staging"),
                ("version", "1.2.3"),
                ("team", "frontend"),
            ],
            vec![
                ("env", "prod"),
                ("team", "backend"),
                ("region", "us-east"),
                ("cost-center", "eng"),
            ],
            vec![
                ("env", "staging"),
                ("version", "1.2.3"),
                ("team", "frontend"),
                ("region", "us-east"),
                ("cost-center", "eng"),
            ],
        ),
        (
            "empty string values in labels",
            vec![("empty", ""), ("normal", "value")],
            vec![("global", "default"), ("empty", "global-value")],
            vec![("global", "default"), ("empty", ""), ("normal", "value")],
        ),
        (
            "labels with special characters in key",
            vec![
                ("key-with-dashes", "value1"),
                ("key_with_underscores", "value2"),
                ("key.with.dots", "value3"),
            ],
            vec![("key-with_different.characters", "value4")],
            vec![
                ("key-with-dashes", "value1"),
                ("key_with_underscores", "value2"),
                ("key.with.dots", "value3"),
                ("key-with_different.characters", "value4"),
            ],
        ),
    ];
    let computed = |runner: &[(&str, &str)], global: &[(&str, &str)]| {
        let r = drover::config::RunnerConfig {
            labels: label_map(runner),
            ..Default::default()
        };
        Info::for_runner(&r, &label_map(global)).labels
    };
    for (case, runner, global, want) in rows {
        t.check(
            &format!("RunnerSettings_ComputeLabels/{case}"),
            computed(&runner, &global),
            label_map(&want),
        );
    }
    // ComputedLabels: what was computed is what is sent (nil and empty alike: no labels).
    for (case, labels) in [
        ("nil computed labels", vec![]),
        ("empty computed labels", vec![]),
        ("single label", vec![("env", "prod")]),
        (
            "multiple labels",
            vec![("env", "prod"), ("team", "backend"), ("region", "us-west")],
        ),
    ] {
        t.check(
            &format!("RunnerSettings_ComputedLabels/{case}"),
            computed(&labels, &[]),
            label_map(&labels),
        );
    }
    // CombineLabels_MultipleCalls: a second computation starts afresh.
    let runner = [("runner", "test")];
    let first = computed(&runner, &pg);
    let second = computed(&runner, &[("env", "staging"), ("region", "us-east")]);
    t.check(
        "RunnerSettings_CombineLabels_MultipleCalls",
        (first, second),
        (
            label_map(&[("env", "prod"), ("team", "backend"), ("runner", "test")]),
            label_map(&[
                ("env", "staging"),
                ("region", "us-east"),
                ("runner", "test"),
            ]),
        ),
    );

    // Config_Validate: (case, global labels, tested runner's labels, what the error names).
    let numbers = [
        "one",
        "two",
        "three",
        "four",
        "five",
        "six",
        "seven",
        "eight",
        "nine",
        "ten",
        "eleven",
        "twelve",
        "thirteen",
        "fourteen",
        "fifteen",
        "sixteen",
        "seventeen",
        "eighteen",
        "nineteen",
        "twenty",
        "twenty-one",
        "twenty-two",
        "twenty-three",
        "twenty-four",
        "twenty-five",
        "twenty-six",
        "twenty-seven",
        "twenty-eight",
        "twenty-nine",
        "thirty",
        "thirty-one",
        "thirty-two",
        "thirty-three",
        "thirty-four",
    ];
    let many: Vec<(&str, &str)> = numbers.iter().map(|n| (*n, "1")).collect();
    let rows: Vec<ValidateRow> = vec![
        (
            "all labels are valid",
            vec![("env", "production")],
            vec![("privileged", "true")],
            None,
        ),
        (
            "invalid global label key",
            vec![("test/key", "test_value")],
            vec![],
            Some("lobal labels"),
        ),
        (
            "invalid global label value",
            vec![("test_key", "test/value")],
            vec![],
            Some("lobal labels"),
        ),
        (
            "invalid runner label key",
            vec![],
            vec![("test/key", "test_value")],
            Some("runner-tested"),
        ),
        (
            "invalid runner label value",
            vec![],
            vec![("test_key", "test/value")],
            Some("runner-tested"),
        ),
        (
            "too many labels",
            many[..17].to_vec(),
            many[17..].to_vec(),
            Some("runner-tested"),
        ),
    ];
    for (case, global, runner, want) in rows {
        let text = format!(
            "[labels]\n{}\n[[runners]]\nname = \"runner-always-valid\"\n[runners.labels]\nrunner = \"name\"\n[[runners]]\nname = \"runner-tested\"\n[runners.labels]\n{}",
            label_lines(&global),
            label_lines(&runner)
        );
        let got = match drover::config::load_str(&text, "case.toml") {
            Ok(_) => None,
            Err(e) => {
                let message = e.to_string();
                Some(
                    want.filter(|w| message.contains(w))
                        .map_or(message, str::to_owned),
                )
            }
        };
        t.check(
            &format!("Config_Validate/{case}"),
            got,
            want.map(str::to_owned),
        );
    }

    // LoadConfig.
    let load = |text: &str| drover::config::load_str(text, "case.toml");
    t.check(
        "LoadConfig/parse defaults",
        load("").ok().map(|l| {
            (
                l.config.runners.len(),
                l.config.connection_max_age_or_default().to_string(),
            )
        }),
        Some((0, "15m0s".to_owned())),
    );
    t.check(
        "LoadConfig/connection max age set",
        load("connection_max_age = \"1s\"\n").ok().map(|l| {
            (
                l.config.runners.len(),
                l.config.connection_max_age_or_default().to_string(),
            )
        }),
        Some((0, "1s".to_owned())),
    );
    t.check(
        "LoadConfig/invalid labels",
        load("[labels]\n\"invalid/key\" = \"valid_value\"\n[[runners]]\nname = \"labels-test\"\n[runners.labels]\nenv = \"prod\"\n").is_err(),
        true,
    );
    let global = [
        ("env", "prod"),
        ("test", "value"),
        ("test_label", "value"),
        ("test-label", "value"),
        ("test.label", "value"),
    ];
    let own = [
        ("shard", "default"),
        ("test", "override"),
        ("test_label", "override"),
        ("test-label", "override"),
        ("test.label", "override"),
    ];
    let text = format!(
        "concurrent = 1\n[labels]\n{}\n[[runners]]\nname = \"labels-test\"\n[runners.labels]\n{}",
        label_lines(&global),
        label_lines(&own)
    );
    let got = load(&text).ok().map(|l| {
        let r = &l.config.runners[0];
        (
            l.config.labels.clone(),
            r.labels.clone(),
            Info::for_runner(r, &l.config.labels).labels,
        )
    });
    let mut all = own.to_vec();
    all.push(("env", "prod"));
    t.check(
        "LoadConfig/valid labels",
        got,
        Some((label_map(&global), label_map(&own), label_map(&all))),
    );
    // LoadConfig_ExpandsEnvironmentVariables (names unique to this test).
    std::env::set_var("DROVER_CONF_TEST_RUNNER_URL", "https://gitlab.example.com");
    std::env::set_var("DROVER_CONF_TEST_RUNNER_TOKEN_1", "glrt-token-one");
    std::env::set_var("DROVER_CONF_TEST_RUNNER_TOKEN_2", "glrt-token-two");
    let text = "[[runners]]\nname = \"runner-1\"\nurl = \"$DROVER_CONF_TEST_RUNNER_URL\"\ntoken = \"${DROVER_CONF_TEST_RUNNER_TOKEN_1}\"\n[[runners]]\nname = \"runner-2\"\nurl = \"${DROVER_CONF_TEST_RUNNER_URL}\"\ntoken = \"$DROVER_CONF_TEST_RUNNER_TOKEN_2\"\n[[runners]]\nname = \"runner-literal\"\nurl = \"https://literal.example.com\"\ntoken = \"glrt-literal-token\"\n";
    let got = load(text).ok().map(|l| {
        l.config
            .runners
            .iter()
            .map(|r| (r.url.clone(), r.token.clone()))
            .collect::<Vec<_>>()
    });
    let pair = |u: &str, tk: &str| (u.to_owned(), tk.to_owned());
    t.check(
        "LoadConfig_ExpandsEnvironmentVariables",
        got,
        Some(vec![
            pair("https://gitlab.example.com", "glrt-token-one"),
            pair("https://gitlab.example.com", "glrt-token-two"),
            pair("https://literal.example.com", "glrt-literal-token"),
        ]),
    );

    // RunnerConfig_ValidateMachineOptionsWithName: (case, options or no machine section,
    // the option the error names).
    let opts = |v: &[&str]| {
        Some(
            v.iter()
                .map(|s| format!("{s:?}"))
                .collect::<Vec<_>>()
                .join(", "),
        )
    };
    for (case, options, want) in [
        (
            "valid options with %s",
            opts(&["--option=%s", "--another=%s-suffix"]),
            None,
        ),
        ("empty options", opts(&[]), None),
        ("nil options", None, None),
        ("nil machine config", None, None),
        (
            "invalid option without %s",
            opts(&["--option=value"]),
            Some("--option=value"),
        ),
        (
            "mixed valid and invalid",
            opts(&["--valid=%s", "--invalid=value"]),
            Some("--invalid=value"),
        ),
    ] {
        let machine = if case == "nil machine config" {
            "executor = \"docker\"\n".to_owned()
        } else {
            let line = options
                .map(|o| format!("MachineOptionsWithName = [{o}]\n"))
                .unwrap_or_default();
            format!("executor = \"docker+machine\"\n[runners.machine]\nMachineDriver = \"none\"\nMachineName = \"m-%s\"\n{line}")
        };
        let text = format!("[[runners]]\nname = \"m\"\nurl = \"https://gitlab.example.com\"\ntoken = \"glrt-x\"\n{machine}");
        let got = match load(&text) {
            Ok(_) => None,
            Err(e) => {
                let message = e.to_string();
                Some(
                    want.filter(|w| message.contains(&format!("{w:?}")))
                        .map_or(message, str::to_owned),
                )
            }
        };
        t.check(
            &format!("RunnerConfig_ValidateMachineOptionsWithName/{case}"),
            got,
            want.map(str::to_owned),
        );
    }

    // Config_SaveConfig_CustomBuildDir: a saved config keeps `[runners.custom_build_dir]` as
    // written and adds none (drover edits config.toml in place: here a token reset's write).
    let dir = tempfile::tempdir().expect("temporary directory");
    for (case, section, want) in [
        ("not explicitly set", "", None),
        (
            "explicitly enabled",
            "[runners.custom_build_dir]\n  enabled = true\n",
            Some(true),
        ),
        (
            "explicitly disabled",
            "[runners.custom_build_dir]\n  enabled = false\n",
            Some(false),
        ),
    ] {
        let path = dir.path().join(format!("{}.toml", case.replace(' ', "-")));
        let text = format!("[[runners]]\n  name = {case:?}\n  url = \"https://gitlab.example.com\"\n  token = \"glrt-old\"\n  executor = \"docker\"\n{section}");
        std::fs::write(&path, text).expect("write config");
        let saved = drover::cli::config_file::ConfigFile::open(&path, false)
            .and_then(|mut f| {
                f.runner_mut(0)?["token"] = toml_edit::value("glrt-new");
                f.save()
            })
            .map_err(|e| e.to_string())
            .and_then(|()| std::fs::read_to_string(&path).map_err(|e| e.to_string()));
        let got = saved.map(|text| {
            let enabled = text
                .split_once("[runners.custom_build_dir]")
                .map(|(_, rest)| rest.trim_start().starts_with("enabled = true"));
            (
                text.contains("glrt-new"),
                text.contains("custom_build_dir"),
                enabled,
            )
        });
        t.check(
            &format!("Config_SaveConfig_CustomBuildDir/{case}"),
            got,
            Ok((true, want.is_some(), want)),
        );
    }

    // RunnerBy*: the runners `unregister`, `verify` and `reset-token` act on.
    use drover::cli::config_file::Selection;
    let runner = |name: &str, token: &str, url: &str, id: i64| drover::config::RunnerConfig {
        name: name.into(),
        token: token.into(),
        url: url.into(),
        id,
        ..Default::default()
    };
    let g1 = "https://gitlab1.example.com/";
    let by_name = drover::config::Config {
        runners: vec![
            runner("runner1", "token1", g1, 1),
            runner("runner2", "token2", g1, 2),
        ],
        ..Default::default()
    };
    let by_token = drover::config::Config {
        runners: vec![runner("", "runner1", "", 0), runner("", "runner2", "", 0)],
        ..Default::default()
    };
    let select =
        |name: Option<&str>, token: Option<&str>, url: Option<&str>, id: Option<i64>| Selection {
            name: name.map(str::to_owned),
            token: token.map(str::to_owned),
            url: url.map(str::to_owned),
            id,
            all: false,
        };
    let rows: Vec<(&str, &drover::config::Config, Selection, Vec<usize>)> = vec![
        (
            "RunnerByName/finds runner by name",
            &by_name,
            select(Some("runner2"), None, None, None),
            vec![1],
        ),
        (
            "RunnerByName/does not find non-existent runner",
            &by_name,
            select(Some("runner3"), None, None, None),
            vec![],
        ),
        (
            "RunnerByToken/finds runner by token",
            &by_token,
            select(None, Some("runner2"), None, None),
            vec![1],
        ),
        (
            "RunnerByToken/does not find non-existent runner authentication token",
            &by_token,
            select(None, Some("runner3"), None, None),
            vec![],
        ),
        (
            "RunnerByURLAndID/finds runner by name",
            &by_name,
            select(None, None, Some(g1), Some(1)),
            vec![0],
        ),
        (
            "RunnerByURLAndID/does not find runner with wrong ID",
            &by_name,
            select(None, None, Some(g1), Some(3)),
            vec![],
        ),
        (
            "RunnerByURLAndID/does not find runner with wrong URL",
            &by_name,
            select(None, None, Some("https://gitlab2.example.com/"), Some(1)),
            vec![],
        ),
        (
            "RunnerByNameAndToken/finds runner by name and token",
            &by_name,
            select(Some("runner1"), Some("token1"), None, None),
            vec![0],
        ),
        (
            "RunnerByNameAndToken/does not find runner with wrong name",
            &by_name,
            select(Some("runner3"), Some("token1"), None, None),
            vec![],
        ),
        (
            "RunnerByNameAndToken/does not find runner with wrong token",
            &by_name,
            select(Some("runner1"), Some("token3"), None, None),
            vec![],
        ),
    ];
    for (case, config, selection, want) in rows {
        t.check(case, selection.pick(config, false), want);
    }
}

/// `network/client_test.go` TestUrlFixing, `helpers/featureflags` TestIsOn and
/// `cache/cache_test.go` TestGenerateObjectName and TestCacheOperations.
fn client_flags_and_cache_names(t: &mut Tally) {
    use drover::gitlab::client::api_base;
    for (given, fixed) in [
        (
            "https://gitlab.example.com/ci///",
            "https://gitlab.example.com",
        ),
        (
            "https://gitlab.example.com/ci/",
            "https://gitlab.example.com",
        ),
        (
            "https://gitlab.example.com/ci",
            "https://gitlab.example.com",
        ),
        ("https://gitlab.example.com/", "https://gitlab.example.com"),
        (
            "https://gitlab.example.com///",
            "https://gitlab.example.com",
        ),
        ("https://gitlab.example.com", "https://gitlab.example.com"),
        (
            "https://example.com/gitlab/ci/",
            "https://example.com/gitlab",
        ),
        (
            "https://example.com/gitlab/ci///",
            "https://example.com/gitlab",
        ),
        (
            "https://example.com/gitlab/ci",
            "https://example.com/gitlab",
        ),
        ("https://example.com/gitlab/", "https://example.com/gitlab"),
        (
            "https://example.com/gitlab///",
            "https://example.com/gitlab",
        ),
        ("https://example.com/gitlab", "https://example.com/gitlab"),
    ] {
        t.check(
            &format!("UrlFixing/{given}"),
            api_base(given).map(|u| u.to_string()).ok(),
            Some(format!("{fixed}/api/v4/")),
        );
    }

    // NewTracePatchResponse: the update interval a response asks for. Upstream keeps a
    // negative value and its trace updater ignores every value ≤ 0; drover drops it when read.
    use drover::gitlab::jobs::parse_update_interval;
    for (case, header, want) in [
        ("nil response", None, None),
        ("no remote update period in header", None, None),
        (
            "invalid remote update period in header",
            Some("invalid"),
            None,
        ),
        ("negative remote update period in header", Some("-10"), None),
        ("valid remote update period in header", Some("10"), Some(10)),
    ] {
        t.check(
            &format!("NewTracePatchResponse/{case}"),
            parse_update_interval(header),
            want.map(Duration::from_secs),
        );
    }

    // IsOn: a flag's value as written (FF_TEST_FEATURE defaults to false).
    use drover::executor::script::variables::resolve_flag;
    let none = std::collections::BTreeMap::new();
    for (case, value, want) in [
        ("empty value", "", false),
        ("non boolean value", "a", false),
        ("true value", "1", true),
        ("false value", "f", false),
    ] {
        t.check(
            &format!("IsOn/{case}"),
            resolve_flag(&none, "FF_TEST_FEATURE", Some(value)),
            want,
        );
    }

    use drover::cache::CacheRemote;
    use drover::config::cache::CacheConfig;
    use drover::executor::script::cache::Remote;
    let config = |path: &str, shared: bool| CacheConfig {
        cache_type: "s3".into(),
        path: path.into(),
        shared,
        s3: Some(s3(|c| {
            c.server_address = "127.0.0.1:9000".into();
            c.access_key = "a".into();
            c.secret_key = "s".into();
            c.bucket_name = "b".into();
            c.insecure = true;
        })),
        ..Default::default()
    };
    let name = |c: &CacheConfig, key: &str| {
        let (remote, _) =
            CacheRemote::from_config(Some(c), "longtoken", 10, Duration::from_secs(3600));
        remote.object_name(key)
    };
    let own = "runner/longtoken/project/10/key";
    for (case, key, path, shared, want) in [
        ("default usage", "key", "", false, Some(own.to_owned())),
        ("empty key", "", "", false, None),
        (
            "short path is set",
            "key",
            "whatever",
            false,
            Some(format!("whatever/{own}")),
        ),
        (
            "multiple segment path is set",
            "key",
            "some/other/path/goes/here",
            false,
            Some(format!("some/other/path/goes/here/{own}")),
        ),
        ("path is empty", "key", "", false, Some(own.to_owned())),
        (
            "shared flag is set to true",
            "key",
            "",
            true,
            Some("project/10/key".to_owned()),
        ),
        (
            "shared flag is set to false",
            "key",
            "",
            false,
            Some(own.to_owned()),
        ),
        (
            "path traversal but within base path",
            "../10/key",
            "",
            false,
            Some(own.to_owned()),
        ),
        (
            "path traversal resolves to empty key",
            "../10",
            "",
            false,
            None,
        ),
        (
            "path traversal escapes project namespace",
            "../10-outside",
            "",
            false,
            None,
        ),
    ] {
        t.check(
            &format!("GenerateObjectName/{case}"),
            name(&config(path, shared), key),
            want,
        );
    }
    // The sharded rows (FF_HASH_CACHE_KEYS): the hash's first two characters as a folder.
    use drover::executor::script::cache::object_key;
    let hash = "d03a852ba491ba611e907b1ef60ad5c4516a05b8f3aae6abb77f42bc60325aed";
    let sharded = format!("d0/{hash}");
    for (case, path, shared, want) in [
        (
            "sharded key uses first two chars as prefix",
            "",
            false,
            format!("runner/longtoken/project/10/{sharded}"),
        ),
        (
            "sharded key with path prefix",
            "builds",
            false,
            format!("builds/runner/longtoken/project/10/{sharded}"),
        ),
        (
            "sharded key with shared runner",
            "",
            true,
            format!("project/10/{sharded}"),
        ),
    ] {
        t.check(
            &format!("GenerateObjectName/{case}"),
            object_key(hash, true).and_then(|o| name(&config(path, shared), &o)),
            Some(want),
        );
    }

    // CacheOperations: whether a download and an upload URL are given.
    let unknown = CacheConfig {
        cache_type: "test".into(),
        ..Default::default()
    };
    let s3_config = config("", false);
    for (case, c, key, want) in [
        ("no-config", None, "key", false),
        ("key-not-specified", Some(&s3_config), "", false),
        ("adapter-doesnt-exists", Some(&unknown), "key", false),
        ("adapter-exists", Some(&s3_config), "key", true),
    ] {
        let (remote, _) = CacheRemote::from_config(c, "shorttoken", 10, Duration::from_secs(3600));
        t.check(
            &format!("CacheOperations/{case}/GetDownloadURL"),
            remote.download(key).is_some(),
            want,
        );
        t.check(
            &format!("CacheOperations/{case}/GetUploadURL"),
            remote.upload(key, key).is_some(),
            want,
        );
    }
}

/// A client of a scripted server, with short retry waits.
async fn scripted_client(script: Script) -> Client {
    let (url, _) = scripted(script).await;
    Client::new(&ClientSettings {
        url,
        retry: RetryPolicy {
            max_attempts: 3,
            base: Duration::from_millis(10),
            cap: Duration::from_millis(100),
        },
        ..ClientSettings::default()
    })
    .expect("client")
}

/// `network/gitlab_test.go`: UpdateJob, UpdateJobAsKeepAlive, the PATCH outcomes and
/// UpdateIntervalHeaderHandling, against a server answering as upstream's test handlers do.
async fn gitlab_updates(t: &mut Tally) {
    use drover::gitlab::UpdateState;
    let info = Info::registration();
    let creds = JobCredentials {
        id: 10,
        token: "token".into(),
    };
    let update = |state: JobState| JobUpdate {
        state,
        failure_reason: None,
        exit_code: 0,
        output: TraceOutput::default(),
    };
    let status = |v: &str| vec![("Job-Status", v.to_owned())];
    // (case, the answer, the update sent, expected state, cancel requested)
    let rows: Vec<UpdateRow> = vec![
        ("UpdateJob/Update continues when running", 200, vec![], JobState::Running, UpdateState::Succeeded, false),
        ("UpdateJob/Update aborts if the access is forbidden", 403, vec![], JobState::Success, UpdateState::Abort, false),
        // Upstream's test server refuses an invalid state or failure reason with 400.
        ("UpdateJob/Update fails for badly formatted request", 400, vec![], JobState::Running, UpdateState::Failed, false),
        ("UpdateJob/Update aborts for unknown job", 404, vec![], JobState::Success, UpdateState::Abort, false),
        (
            "UpdateJob/Update returns accepted, but not completed if server returns `202 StatusAccepted`",
            202,
            vec![],
            JobState::Success,
            UpdateState::Accepted,
            false,
        ),
        (
            "UpdateJob/Update returns reset content requested if server returns `412 Precondition Failed`",
            412,
            vec![],
            JobState::Success,
            UpdateState::TraceValidationFailed,
            false,
        ),
        ("UpdateJob/Update should continue when script fails", 200, vec![], JobState::Failed, UpdateState::Succeeded, false),
        ("UpdateJob/Update fails for invalid failure reason", 400, vec![], JobState::Failed, UpdateState::Failed, false),
        ("UpdateJobAsKeepAlive/Update should continue when running", 200, vec![], JobState::Running, UpdateState::Succeeded, false),
        (
            "UpdateJobAsKeepAlive/Update should be aborted when Job-Status=canceled",
            200,
            status("canceled"),
            JobState::Running,
            UpdateState::Abort,
            false,
        ),
        (
            "UpdateJobAsKeepAlive/Update should continue when Job-Status=failed",
            200,
            status("failed"),
            JobState::Running,
            UpdateState::Abort,
            false,
        ),
        (
            "UpdateJobAsKeepAlive/Update should continue when Job-Status=canceling",
            200,
            status("canceling"),
            JobState::Running,
            UpdateState::Succeeded,
            true,
        ),
    ];
    for (case, code, headers, state, want, cancel) in rows {
        let client = scripted_client(vec![(code, headers)]).await;
        let r = client.update_job(&creds, &info, &update(state)).await;
        t.check(case, (r.state, r.cancel_requested), (want, cancel));
    }

    let patch = bytes::Bytes::from_static(b"trace trace trace");
    for (case, code, headers, want) in [
        ("UnknownPatchTrace", 404, vec![], UpdateState::NotFound),
        ("ForbiddenPatchTrace", 403, vec![], UpdateState::Abort),
        (
            "JobFailedStatePatchTrace",
            202,
            status("failed"),
            UpdateState::Abort,
        ),
    ] {
        let client = scripted_client(vec![(code, headers)]).await;
        let r = client.patch_trace(&creds, 0, patch.clone(), false).await;
        t.check(case, r.state, want);
    }
    let closed = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!("http://{}", closed.local_addr().expect("addr"));
    drop(closed);
    let client = Client::new(&ClientSettings {
        url,
        ..ClientSettings::default()
    })
    .expect("client");
    let r = client.patch_trace(&creds, 0, patch.clone(), false).await;
    t.check("PatchTraceCantConnect", r.state, UpdateState::Failed);

    // UpdateIntervalHeaderHandling: upstream returns the header's seconds as given and its
    // trace updater ignores values ≤ 0; drover drops those when it reads them.
    for (case, header, want) in [
        ("header set to negative integer", Some("-10"), None),
        ("header set to zero", Some("0"), None),
        ("header set to positive integer", Some("10"), Some(10)),
        ("header set to invalid format", Some("some text"), None),
        ("empty header", Some(""), None),
        ("header not set", None, None),
    ] {
        let headers = || {
            header
                .map(|v| vec![("X-GitLab-Trace-Update-Interval", v.to_owned())])
                .unwrap_or_default()
        };
        let want = want.map(Duration::from_secs);
        let client = scripted_client(vec![(404, headers())]).await;
        let r = client
            .update_job(&creds, &info, &update(JobState::Success))
            .await;
        t.check(
            &format!("UpdateIntervalHeaderHandling/{case}/UpdateJob"),
            r.update_interval,
            want,
        );
        let client = scripted_client(vec![(202, headers())]).await;
        let r = client.patch_trace(&creds, 0, patch.clone(), false).await;
        t.check(
            &format!("UpdateIntervalHeaderHandling/{case}/PatchTrace"),
            r.update_interval,
            want,
        );
    }
}

/// `network/gitlab_test.go` RequestJob: what a job request gives and whether the runner stays
/// healthy (only a 403 and a client error count against it).
async fn gitlab_request_job(t: &mut Tally) {
    use drover::gitlab::{JobRequest, JobRequestOutcome};
    let info = Info::registration();
    let job = serde_json::json!({
        "id": 10,
        "token": "job-token",
        "allow_git_fetch": false,
        "job_info": {"name": "test", "stage": "test", "project_id": 1, "project_name": "test"},
        "git_info": {"repo_url": "https://gitlab.example.com/test/test-project.git",
                     "ref": "main", "sha": "abcdef", "ref_type": "branch"},
        "image": {"name": "alpine", "executor_opts": {"docker": {"powpow": "x"}}},
        "services": [{"name": "redis", "executor_opts": {"docker": {"powpow": "x"}}}],
        "steps": [{"name": "script", "script": ["true"], "timeout": 3600, "when": "on_success"}],
        "variables": [],
    })
    .to_string();
    let json = || vec![("Content-Type", "application/json".to_owned())];
    let retry_after = || vec![("Retry-After", "1".to_owned())];
    let rows: Vec<(&str, BodyScript, &str, bool)> = vec![
        ("valid token", vec![(201, json(), job.clone())], "job", true),
        (
            "no jobs token",
            vec![(204, vec![], String::new())],
            "no job",
            true,
        ),
        (
            "invalid token",
            vec![(403, vec![], String::new())],
            "forbidden",
            false,
        ),
        (
            "unsupported executor options",
            vec![(201, json(), job.clone())],
            "job",
            true,
        ),
        (
            "service unavailable",
            vec![(503, retry_after(), String::new()); 3],
            "failed",
            true,
        ),
        (
            "too many requests",
            vec![(429, retry_after(), String::new()); 3],
            "failed",
            true,
        ),
    ];
    let kind = |o: &JobRequestOutcome| match o {
        JobRequestOutcome::Job(_) => "job",
        JobRequestOutcome::NoJob => "no job",
        JobRequestOutcome::Forbidden => "forbidden",
        JobRequestOutcome::Failed(_) => "failed",
        JobRequestOutcome::ClientError(_) => "client error",
    };
    let healthy = |o: &JobRequestOutcome| {
        !matches!(
            o,
            JobRequestOutcome::Forbidden | JobRequestOutcome::ClientError(_)
        )
    };
    for (case, script, want, want_healthy) in rows {
        let (url, _) = scripted_bodies(script).await;
        let client = Client::new(&ClientSettings {
            url,
            retry: RetryPolicy {
                max_attempts: 3,
                base: Duration::from_millis(10),
                cap: Duration::from_millis(100),
            },
            ..ClientSettings::default()
        })
        .expect("client");
        let r = client
            .request_job(&JobRequest {
                token: "glrt-valid",
                info: &info,
                system_id: "s_0123456789ab",
                session: None,
                runner_name: "valid",
            })
            .await;
        t.check(
            &format!("GitLabClient_RequestJob/{case}"),
            (kind(&r.outcome), healthy(&r.outcome)),
            (want, want_healthy),
        );
    }
    // "invalid url": the client cannot be made; a client error, unhealthy.
    let made = Client::new(&ClientSettings {
        url: "invalid".into(),
        ..ClientSettings::default()
    });
    t.check("GitLabClient_RequestJob/invalid url", made.is_err(), true);
}

/// A client of a scripted server with bodies, or of an address that cannot be parsed.
async fn body_client(script: Option<BodyScript>) -> Result<Client, String> {
    let url = match script {
        Some(script) => scripted_bodies(script).await.0,
        None => "broken".to_owned(),
    };
    Client::new(&ClientSettings {
        url,
        ..ClientSettings::default()
    })
    .map_err(|e| e.to_string())
}

/// `network/gitlab_test.go` UnregisterRunner, VerifyRunnerOnLegacyServer and VerifyRunner:
/// the answers of upstream's test handlers (204/200 for a valid token, 403 for an invalid one,
/// 400 otherwise), and what the runner makes of them.
async fn gitlab_runner_calls(t: &mut Tally) {
    let answer = |status: u16| Some(vec![(status, vec![], String::new())]);
    for (case, script, want) in [
        ("valid token", answer(204), true),
        ("invalid token", answer(403), false),
        ("other token", answer(400), false),
        ("empty token", answer(400), false),
        ("broken credentials", None, false),
    ] {
        let ok = match body_client(script).await {
            Ok(c) => c.unregister_runner("token").await.is_ok(),
            Err(_) => false,
        };
        t.check(&format!("GitLabClient_UnregisterRunner/{case}"), ok, want);
    }

    // UnregisterRunnerManager: the handler answers 204 for a valid token (a glrt token with
    // the right system ID), 403 for an invalid one and 400 otherwise.
    for (case, script, want) in [
        ("valid token", answer(204), true),
        ("valid glrt token", answer(204), true),
        ("invalid token", answer(403), false),
        ("other token", answer(400), false),
        ("broken credentials", None, false),
    ] {
        let ok = match body_client(script).await {
            Ok(c) => c
                .unregister_manager("token", "s_some_system_id")
                .await
                .is_ok(),
            Err(_) => false,
        };
        t.check(&format!("UnregisterRunnerManager/{case}"), ok, want);
    }

    // ResetToken: the new token and its expiry, or nothing.
    let reset = |token: &str, expires: Option<&str>| {
        Some(vec![(
            201,
            vec![("Content-Type", "application/json".to_owned())],
            serde_json::json!({"token": token, "token_expires_at": expires}).to_string(),
        )])
    };
    for (case, script, want) in [
        (
            "valid token",
            reset("reset-token", None),
            Some(("reset-token", None)),
        ),
        (
            "expiring token",
            reset("reset-expiring-token", Some("2684-10-16T13:25:59Z")),
            Some(("reset-expiring-token", Some("2684-10-16T13:25:59+00:00"))),
        ),
        ("invalid token", answer(403), None),
        ("other token", answer(400), None),
    ] {
        let got = match body_client(script).await {
            Ok(c) => c
                .reset_token("token")
                .await
                .ok()
                .map(|r| (r.token, r.token_expires_at.map(|e| e.to_rfc3339()))),
            Err(_) => None,
        };
        let want = want.map(|(tk, e)| (tk.to_owned(), e.map(str::to_owned)));
        t.check(&format!("GitlabClient_ResetToken/{case}"), got, want);
    }

    // ResetTokenWithPAT: the handler answers 201 for runner 12345 with the valid PAT and for
    // 54321 (with an expiry), 401 without a PAT, 403 for a wrong PAT, 404 for 77777 and 400
    // for other runners.
    for (case, id, pat, script, want) in [
        (
            "valid token with valid PAT",
            12345,
            "valid-pat",
            reset("valid", None),
            Some(("valid", None)),
        ),
        (
            "expiring token with valid PAT",
            54321,
            "valid-pat",
            reset("expiring", Some("2684-10-16T13:25:59Z")),
            Some(("expiring", Some("2684-10-16T13:25:59+00:00"))),
        ),
        ("valid token with empty PAT", 12345, "", answer(401), None),
        (
            "valid token with invalid PAT",
            12345,
            "invalid-pat",
            answer(403),
            None,
        ),
        (
            "invalid token with valid PAT",
            77777,
            "valid-pat",
            answer(404),
            None,
        ),
        (
            "other token with valid PAT",
            99999,
            "valid-pat",
            answer(400),
            None,
        ),
    ] {
        let got = match body_client(script).await {
            Ok(c) => c
                .reset_token_with_pat(id, pat)
                .await
                .ok()
                .map(|r| (r.token, r.token_expires_at.map(|e| e.to_rfc3339()))),
            Err(_) => None,
        };
        let want = want.map(|(tk, e)| (tk.to_owned(), e.map(str::to_owned)));
        t.check(&format!("GitLabClient_ResetTokenWithPAT/{case}"), got, want);
    }

    // RegisterRunner: the handler answers 201 with the ID and token (and the expiry for the
    // expiring token), 400 for a wrong description or an unknown token, 403 for an invalid one.
    let registered = |id: i64, token: &str, expires: Option<&str>| {
        Some(vec![(
            201,
            vec![("Content-Type", "application/json".to_owned())],
            serde_json::json!({"id": id, "token": token, "token_expires_at": expires}).to_string(),
        )])
    };
    type Registered = Option<(i64, String, Option<String>)>;
    let rows: Vec<(&str, Option<BodyScript>, Registered)> = vec![
        (
            "valid token",
            registered(12345, "valid", None),
            Some((12345, "valid".into(), None)),
        ),
        (
            "expiring token",
            registered(54321, "expiring", Some("2684-10-16T13:25:59Z")),
            Some((
                54321,
                "expiring".into(),
                Some("2684-10-16T13:25:59+00:00".into()),
            )),
        ),
        ("invalid description", answer(400), None),
        ("invalid token", answer(403), None),
        ("other token", answer(400), None),
        ("broken credentials", None, None),
    ];
    let params = drover::gitlab::RegisterParams {
        registration_token: "valid".into(),
        description: "test".into(),
        tag_list: vec!["tags".into()],
        run_untagged: true,
        locked: true,
        ..Default::default()
    };
    for (case, script, want) in rows {
        let got = match body_client(script).await {
            Ok(c) => c
                .register_runner(&params)
                .await
                .ok()
                .map(|r| (r.id, r.token, r.token_expires_at.map(|e| e.to_rfc3339()))),
            Err(_) => None,
        };
        t.check(&format!("GitLabClient_RegisterRunner/{case}"), got, want);
    }
    // RegisterRunner_OnRunnerLimitHit: GitLab's field message is in what the runner reports.
    for (case, body, want) in [
        (
            "runner namespace limit hit",
            r#"{"message":{"runner_namespaces.base":["Maximum number of ci registered group runners (3) exceeded"]}}"#,
            "runner_namespaces.base: Maximum number of ci registered group runners (3) exceeded",
        ),
        (
            "runner projects limit hit",
            r#"{"message":{"runner_projects.base":["Maximum number of ci registered project runners (3) exceeded"]}}"#,
            "runner_projects.base: Maximum number of ci registered project runners (3) exceeded",
        ),
    ] {
        let script = vec![(
            400,
            vec![("Content-Type", "application/json".to_owned())],
            body.to_owned(),
        )];
        let message = match body_client(Some(script)).await {
            Ok(c) => c
                .register_runner(&params)
                .await
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default(),
            Err(e) => e,
        };
        t.check(
            &format!("GitLabClient_RegisterRunner_OnRunnerLimitHit/{case}"),
            if message.contains(want) {
                want
            } else {
                &message
            },
            want,
        );
    }

    // ClientHandleCharsetInContentType: a JSON answer is read with or without a charset; any
    // other content type is refused (upstream's −1), seen through a token reset.
    for (case, content_type, want) in [
        ("with-charset", "application/json; charset=utf-8", true),
        ("without-charset", "application/json", true),
        ("without-json", "application/octet-stream", false),
        (
            "invalid-header",
            "application/octet-stream, test, a=b",
            false,
        ),
    ] {
        let script = vec![(
            201,
            vec![("Content-Type", content_type.to_owned())],
            r#"{"token":"glrt-new"}"#.to_owned(),
        )];
        let ok = match body_client(Some(script)).await {
            Ok(c) => c.reset_token("token").await.is_ok(),
            Err(_) => false,
        };
        t.check(
            &format!("ClientHandleCharsetInContentType/{case}"),
            ok,
            want,
        );
    }

    // Verify: "alive"/"valid" with what GitLab sent, "removed" only for a 403, else the
    // runner is kept ("failed", "client error").
    let info = Info::registration();
    let verify = |script: Option<BodyScript>, token: &'static str| {
        let info = info.clone();
        async move {
            let client = match body_client(script).await {
                Ok(c) => c,
                Err(_) => return ("kept", 0, None),
            };
            match client.verify_runner(token, &info, "s_0123456789ab").await {
                Ok(c) => ("verified", c.id, c.token_expires_at.map(|e| e.to_rfc3339())),
                Err(e) if e.status() == 403 => ("removed", 0, None),
                Err(_) => ("kept", 0, None),
            }
        }
    };
    let plain = || {
        Some(vec![(
            200,
            vec![("Content-Type", "plain/text".to_owned())],
            String::new(),
        )])
    };
    let creds = |token: &str| {
        Some(vec![(
            200,
            vec![("Content-Type", "application/json".to_owned())],
            serde_json::json!({"id": 54321, "token": token,
                               "token_expires_at": "2684-10-16T13:25:59Z"})
            .to_string(),
        )])
    };
    let expires = Some("2684-10-16T13:25:59+00:00".to_owned());
    let bad = |status: u16| Some(vec![(status, vec![], String::new())]);
    let rows: Vec<(&str, Option<BodyScript>, &'static str, VerifyOutcome)> = vec![
        (
            "VerifyRunnerOnLegacyServer/valid token",
            plain(),
            "valid",
            ("verified", 0, None),
        ),
        (
            "VerifyRunnerOnLegacyServer/valid glrt token",
            plain(),
            "glrt-valid",
            ("verified", 0, None),
        ),
        (
            "VerifyRunnerOnLegacyServer/invalid token",
            bad(403),
            "invalid",
            ("removed", 0, None),
        ),
        (
            "VerifyRunnerOnLegacyServer/other token",
            bad(400),
            "other",
            ("kept", 0, None),
        ),
        (
            "VerifyRunnerOnLegacyServer/broken credentials",
            None,
            "broken",
            ("kept", 0, None),
        ),
        (
            "VerifyRunner/valid token",
            creds("valid"),
            "valid",
            ("verified", 54321, expires.clone()),
        ),
        (
            "VerifyRunner/valid glrt token",
            creds("glrt-valid"),
            "glrt-valid",
            ("verified", 54321, expires.clone()),
        ),
        (
            "VerifyRunner/invalid token",
            bad(403),
            "invalid",
            ("removed", 0, None),
        ),
        (
            "VerifyRunner/other token",
            bad(400),
            "other",
            ("kept", 0, None),
        ),
        (
            "VerifyRunner/broken credentials",
            None,
            "broken",
            ("kept", 0, None),
        ),
    ];
    for (case, script, token, want) in rows {
        t.check(case, verify(script, token).await, want);
    }
}

/// A header of a recorded request (`None` when absent).
fn head_header(request: &str, name: &str) -> Option<String> {
    request
        .lines()
        .skip(1)
        .take_while(|l| !l.is_empty())
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.trim()
                .eq_ignore_ascii_case(name)
                .then(|| v.trim().to_owned())
        })
}

/// `network/gitlab_test.go` PatchTraceContentRangeAndLength, PatchTraceContentRangeHeaderValues
/// and PatchTraceUrlParams: what a PATCH sends and what its result says.
async fn gitlab_patch_requests(t: &mut Tally) {
    use drover::gitlab::UpdateState;
    let creds = JobCredentials {
        id: 1,
        token: "patch-token".into(),
    };
    // (case, trace, Job-Status answered, (Content-Range, Content-Length) sent or no request,
    //  (state, offset, cancel requested))
    type PatchRow = (
        &'static str,
        &'static [u8],
        &'static str,
        Option<(&'static str, &'static str)>,
        (UpdateState, Option<u64>, bool),
    );
    let rows: [PatchRow; 4] = [
        (
            "0 bytes",
            b"",
            "running",
            None,
            (UpdateState::Succeeded, Some(0), false),
        ),
        (
            "1 byte",
            b"1",
            "running",
            Some(("0-0", "1")),
            (UpdateState::Succeeded, Some(1), false),
        ),
        (
            "2 bytes",
            b"12",
            "running",
            Some(("0-1", "2")),
            (UpdateState::Succeeded, Some(2), false),
        ),
        (
            "2 bytes canceling job",
            b"12",
            "canceling",
            Some(("0-1", "2")),
            (UpdateState::Succeeded, Some(2), true),
        ),
    ];
    for (case, trace, status, want_sent, want) in rows {
        let (url, heads) = scripted(vec![(202, vec![("Job-Status", status.to_owned())])]).await;
        let client = Client::new(&ClientSettings {
            url,
            ..ClientSettings::default()
        })
        .expect("client");
        let r = client
            .patch_trace(&creds, 0, bytes::Bytes::from_static(trace), false)
            .await;
        let sent = heads.lock().expect("heads").first().map(|h| {
            (
                head_header(h, "content-range").unwrap_or_default(),
                head_header(h, "content-length").unwrap_or_default(),
            )
        });
        let want_sent = want_sent.map(|(r, l)| (r.to_owned(), l.to_owned()));
        t.check(
            &format!("PatchTraceContentRangeAndLength/{case}"),
            (sent, (r.state, r.offset, r.cancel_requested)),
            (want_sent, want),
        );
    }

    let content = bytes::Bytes::from_static(b"trace trace trace");
    let (url, heads) = scripted(vec![(202, vec![]), (202, vec![]), (202, vec![])]).await;
    let client = Client::new(&ClientSettings {
        url,
        ..ClientSettings::default()
    })
    .expect("client");
    let r = client.patch_trace(&creds, 0, content.clone(), false).await;
    let range = heads
        .lock()
        .expect("heads")
        .first()
        .and_then(|h| head_header(h, "content-range"));
    t.check(
        "PatchTraceContentRangeHeaderValues",
        (range, r.state),
        (
            Some(format!("0-{}", content.len() - 1)),
            UpdateState::Succeeded,
        ),
    );
    for debug in [false, true] {
        let r = client.patch_trace(&creds, 0, content.clone(), debug).await;
        let line = heads
            .lock()
            .expect("heads")
            .last()
            .and_then(|h| h.lines().next().map(str::to_owned));
        t.check(
            &format!("PatchTraceUrlParams/debug_trace={debug}"),
            (line, r.state),
            (
                Some(format!(
                    "PATCH /api/v4/jobs/1/trace?debug_trace={debug} HTTP/1.1"
                )),
                UpdateState::Succeeded,
            ),
        );
    }
}

/// `network/gitlab_test.go` SetLastUpdate, RunnerVersion and AddCorrelationIDHeader.
async fn gitlab_request_details(t: &mut Tally) {
    use drover::gitlab::JobRequest;
    let info = Info::registration();
    let (url, requests) = scripted(vec![
        (204, vec![("X-GitLab-Last-Update", "queue-v1".to_owned())]),
        (204, vec![]),
    ])
    .await;
    let client = Client::new(&ClientSettings {
        url,
        ..ClientSettings::default()
    })
    .expect("client");
    let request = JobRequest {
        token: "test-token",
        info: &info,
        system_id: "s_0123456789ab",
        session: None,
        runner_name: "r",
    };
    client.request_job(&request).await;
    client.request_job(&request).await;
    let last_updates: Vec<Option<String>> = requests
        .lock()
        .expect("requests")
        .iter()
        .map(|r| {
            let body = r.split_once("\r\n\r\n").map(|(_, b)| b).unwrap_or_default();
            serde_json::from_str::<serde_json::Value>(body)
                .ok()
                .and_then(|v| {
                    v.get("last_update")
                        .and_then(|l| l.as_str())
                        .map(str::to_owned)
                })
                .filter(|l| !l.is_empty())
        })
        .collect();
    t.check(
        "SetLastUpdate",
        last_updates,
        vec![None, Some("queue-v1".to_owned())],
    );

    // RunnerVersion: the info sent names the runner, its version, revision, platform and
    // architecture, with the executor, shell and computed labels.
    let runner = drover::config::RunnerConfig {
        executor: "my-executor".into(),
        shell: "my-shell".into(),
        labels: label_map(&[("testing", "testing")]),
        ..Default::default()
    };
    let info = Info::for_runner(&runner, &label_map(&[("123", "123")]));
    let v = serde_json::to_value(&info).expect("info as JSON");
    let filled = ["name", "version", "revision", "platform", "architecture"]
        .iter()
        .filter(|k| {
            v.get(**k)
                .and_then(|x| x.as_str())
                .is_some_and(|x| !x.is_empty())
        })
        .count();
    t.check(
        "RunnerVersion",
        (
            filled,
            info.executor.as_str(),
            info.shell.as_str(),
            info.labels.clone(),
        ),
        (
            5,
            "my-executor",
            "my-shell",
            label_map(&[("testing", "testing"), ("123", "123")]),
        ),
    );

    // AddCorrelationIDHeader: every request carries a correlation ID, next to its own headers.
    let recorded = requests.lock().expect("requests").clone();
    for (case, request) in [
        ("header nil", recorded.first()),
        ("existing header", recorded.last()),
    ] {
        let got = request.map(|r| {
            (
                head_header(r, "x-request-id").is_some_and(|id| !id.is_empty()),
                head_header(r, "content-type"),
            )
        });
        t.check(
            &format!("AddCorrelationIDHeader/{case}"),
            got,
            Some((true, Some("application/json".to_owned()))),
        );
    }
}

#[tokio::test]
async fn config_and_api_tables_of_upstream() {
    let mut t = Tally::default();
    cacheconfig(&mut t);
    retry_requester_pure(&mut t);
    retry_requester_do(&mut t).await;
    config_tables(&mut t);
    phase_limits(&mut t);
    docker_machine(&mut t);
    time_periods(&mut t);
    pull_policies(&mut t);
    config_file_tables(&mut t);
    labels_and_selection(&mut t);
    client_flags_and_cache_names(&mut t);
    gitlab_updates(&mut t).await;
    gitlab_request_job(&mut t).await;
    gitlab_runner_calls(&mut t).await;
    gitlab_patch_requests(&mut t).await;
    gitlab_request_details(&mut t).await;
    trace_loop(&mut t).await;
    gitlab_patch_outcomes(&mut t).await;
    update_interval_changes(&mut t).await;
    client_transmissions(&mut t).await;
    client_tls(&mut t).await;
    t.finish("config-api");
}

/// Answers a trace run's requests: PATCHes from `patch` in order, `running` updates after the
/// pickup ack from `running`, final updates from `finals`; past a list, 202 for a PATCH and
/// 200 for an update.
#[derive(Default)]
struct TraceScript {
    patch: Vec<Answer>,
    running: Vec<Answer>,
    finals: Vec<Answer>,
}

/// A request of a trace run: method, `Content-Range` start, body, and the update's `state`.
#[derive(Debug, Clone, PartialEq)]
struct Sent {
    method: String,
    offset: Option<u64>,
    body: String,
    state: Option<String>,
}

fn sent(request: &str) -> Sent {
    let method = request
        .split_whitespace()
        .next()
        .unwrap_or_default()
        .to_owned();
    let body = request
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    let offset = head_header(request, "content-range")
        .and_then(|r| r.split_once('-').and_then(|(a, _)| a.parse().ok()));
    let state = serde_json::from_str::<serde_json::Value>(&body)
        .ok()
        .and_then(|v| v.get("state").and_then(|s| s.as_str()).map(str::to_owned));
    Sent {
        method,
        offset,
        body,
        state,
    }
}

/// The requests a trace run sent.
struct SentLog(Vec<Sent>);

impl SentLog {
    fn of(requests: &Mutex<Vec<String>>) -> SentLog {
        SentLog(
            requests
                .lock()
                .expect("requests")
                .iter()
                .map(|r| sent(r))
                .collect(),
        )
    }

    /// The PATCHes: offset and body.
    fn patches(&self) -> Vec<(u64, String)> {
        self.0
            .iter()
            .filter(|s| s.method == "PATCH")
            .map(|s| (s.offset.unwrap_or_default(), s.body.clone()))
            .collect()
    }

    /// The states of the updates, the pickup ack first.
    fn updates(&self) -> Vec<String> {
        self.0
            .iter()
            .filter(|s| s.method == "PUT")
            .map(|s| s.state.clone().unwrap_or_default())
            .collect()
    }

    /// The final updates' states.
    fn finals(&self) -> Vec<String> {
        self.updates()
            .into_iter()
            .filter(|s| s != "running")
            .collect()
    }
}

/// A running trace against a server answering from a [`TraceScript`].
struct TraceRun {
    trace: drover::gitlab::JobTrace,
    requests: Arc<Mutex<Vec<String>>>,
}

impl TraceRun {
    async fn start(script: TraceScript, opts: drover::gitlab::TraceOptions) -> TraceRun {
        let script = Mutex::new((
            script.patch.into_iter(),
            script.running.into_iter(),
            script.finals.into_iter(),
            false,
        ));
        let (url, requests) = serve(move |request| {
            let s = sent(request);
            let mut g = script.lock().expect("script");
            let (patch, running, finals, acked) = &mut *g;
            let ok = |status| (status, Vec::new(), String::new());
            match (s.method.as_str(), s.state.as_deref()) {
                ("PATCH", _) => patch.next().unwrap_or(ok(202)),
                (_, Some("running")) if !*acked => {
                    *acked = true;
                    ok(200)
                }
                (_, Some("running")) => running.next().unwrap_or(ok(200)),
                _ => finals.next().unwrap_or(ok(200)),
            }
        })
        .await;
        let client = Client::new(&ClientSettings {
            url,
            retry: RetryPolicy {
                max_attempts: 1,
                base: Duration::from_millis(5),
                cap: Duration::from_millis(5),
            },
            ..ClientSettings::default()
        })
        .expect("client");
        let job = drover::job::JobPayload::from_json(r#"{"id": 1, "token": "trace-token"}"#)
            .expect("payload");
        let trace = drover::gitlab::JobTrace::start(
            Arc::new(client),
            Arc::new(Info::registration()),
            &job,
            opts,
        )
        .await;
        TraceRun { trace, requests }
    }

    /// Waits (at most 5 s) until `cond` holds for the requests sent so far.
    async fn until(&self, cond: impl Fn(&SentLog) -> bool) -> bool {
        for _ in 0..500 {
            if cond(&SentLog::of(&self.requests)) {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        false
    }

    /// Writes `log`, finishes with success, and returns the report and all that was sent.
    async fn finish(self, log: &[u8]) -> (drover::gitlab::FinishReport, SentLog) {
        self.trace.writer().write_bytes(log);
        let report = tokio::time::timeout(
            Duration::from_secs(20),
            self.trace.finish(drover::gitlab::JobOutcome::success()),
        )
        .await
        .expect("the final update ends");
        (report, SentLog::of(&self.requests))
    }
}

/// Options for the trace rows: short intervals, so rounds take milliseconds.
fn trace_options(max_chunk: usize) -> drover::gitlab::TraceOptions {
    drover::gitlab::TraceOptions {
        update_interval: Duration::from_millis(10),
        force_send_interval: Duration::from_secs(60),
        final_backoff_base: Duration::from_millis(5),
        max_chunk,
        ..drover::gitlab::TraceOptions::default()
    }
}

fn answer(status: u16, headers: &[(&'static str, &str)]) -> Answer {
    (
        status,
        headers.iter().map(|(k, v)| (*k, (*v).to_owned())).collect(),
        String::new(),
    )
}

fn owned(v: &[(u64, &str)]) -> Vec<(u64, String)> {
    v.iter().map(|(o, b)| (*o, (*b).to_owned())).collect()
}

/// `network/trace_test.go`: the per-job trace's loop, against a server that answers as the
/// test's mock does. The mock's `PatchTraceResult{SentOffset: n}` for fewer bytes than were
/// sent is GitLab holding `n` bytes, which the wire says with `416` and `Range: 0-n` (a `202`
/// always means the whole patch arrived); `PatchFailed` and `UpdateFailed` are answers that
/// are neither retried nor final (400).
async fn trace_loop(t: &mut Tally) {
    use drover::gitlab::FinalState;

    // IgnoreStatusChange: one final state only (finish consumes the trace).
    let run = TraceRun::start(TraceScript::default(), trace_options(1 << 20)).await;
    let (r, log) = run.finish(b"").await;
    t.check(
        "IgnoreStatusChange",
        (r.state, log.finals()),
        (FinalState::Accepted, vec!["success".to_owned()]),
    );

    // TouchJobAbort / TouchJobCancel: a keep-alive answered with an abort (403) or with
    // `Job-Status: canceling`; the final update is still sent.
    for (case, keep_alive, want) in [
        ("TouchJobAbort", answer(403, &[]), (true, false)),
        (
            "TouchJobCancel",
            answer(200, &[("Job-Status", "canceling")]),
            (false, true),
        ),
    ] {
        let mut opts = trace_options(1 << 20);
        opts.force_send_interval = Duration::ZERO;
        let script = TraceScript {
            running: vec![keep_alive.clone()],
            finals: vec![keep_alive],
            ..TraceScript::default()
        };
        let run = TraceRun::start(script, opts).await;
        let (abort, graceful) = (run.trace.abort(), run.trace.graceful_cancel());
        let _ = tokio::time::timeout(Duration::from_secs(5), async {
            tokio::select! {
                _ = abort.cancelled() => {}
                _ = graceful.cancelled() => {}
            }
        })
        .await;
        let got = (abort.is_cancelled(), graceful.is_cancelled());
        let (_, log) = run.finish(b"").await;
        t.check(case, (got, log.finals().len()), (want, 1));
    }

    // incrementalUpdate: the keep-alive follows only a PATCH that succeeded; after one answered
    // 404 the tick ends there (with a zero force-send interval, every successful tick would
    // send one). The pickup ack is the only `running` update.
    let mut opts = trace_options(1 << 20);
    opts.force_send_interval = Duration::ZERO;
    let script = TraceScript {
        patch: vec![answer(404, &[]); 200],
        ..TraceScript::default()
    };
    let run = TraceRun::start(script, opts).await;
    run.trace.writer().write_bytes(b"Trace\n");
    let patched = run.until(|l| l.patches().len() >= 3).await;
    let running = SentLog::of(&run.requests)
        .updates()
        .into_iter()
        .filter(|s| s == "running")
        .count();
    let _ = run.finish(b"").await;
    t.check(
        "IncrementalUpdateNoTouchAfterNotFound",
        (patched, running),
        (true, 1),
    );

    // SendPatchAbort: a PATCH answered 403 aborts the job; the final flush tries once more,
    // then the final update is sent once.
    let script = TraceScript {
        patch: vec![answer(403, &[]), answer(403, &[])],
        finals: vec![answer(403, &[])],
        ..TraceScript::default()
    };
    let run = TraceRun::start(script, trace_options(1 << 20)).await;
    run.trace.writer().write_bytes(b"Trace\n");
    let abort = run.trace.abort();
    let aborted = tokio::time::timeout(Duration::from_secs(5), abort.cancelled())
        .await
        .is_ok();
    let (r, log) = run.finish(b"").await;
    t.check(
        "SendPatchAbort",
        (aborted, log.patches().len(), log.finals(), r.state),
        (true, 2, vec!["success".to_owned()], FinalState::Aborted),
    );

    // JobFinishTraceUpdateRetry: partial acceptance, a failure, a rewind; every patch starts
    // at the offset GitLab holds.
    let script = TraceScript {
        patch: vec![
            answer(416, &[("Range", "0-3")]),
            answer(400, &[]),
            answer(416, &[("Range", "0-9")]),
            answer(416, &[("Range", "0-6")]),
        ],
        ..TraceScript::default()
    };
    let run = TraceRun::start(script, trace_options(1 << 20)).await;
    let (r, log) = run.finish(b"My trace send").await;
    t.check(
        "JobFinishTraceUpdateRetry",
        (log.patches(), log.finals(), r.state),
        (
            owned(&[
                (0, "My trace send"),
                (3, "trace send"),
                (3, "trace send"),
                (9, "send"),
                (6, "ce send"),
            ]),
            vec!["success".to_owned()],
            FinalState::Accepted,
        ),
    );

    // JobDelayedTraceProcessingWithRejection: 10-byte patches; the final update is accepted
    // but not completed twice, then the checksum is refused (412) and the whole log is sent
    // again, then twice more pending, then accepted.
    let script = TraceScript {
        finals: vec![
            answer(202, &[]),
            answer(202, &[]),
            answer(412, &[]),
            answer(202, &[]),
            answer(202, &[]),
            answer(200, &[]),
        ],
        ..TraceScript::default()
    };
    let run = TraceRun::start(script, trace_options(10)).await;
    let (r, log) = run.finish(b"My trace send").await;
    t.check(
        "JobDelayedTraceProcessingWithRejection",
        (log.patches(), log.finals().len(), r.state),
        (
            owned(&[
                (0, "My trace s"),
                (10, "end"),
                (0, "My trace s"),
                (10, "end"),
            ]),
            6,
            FinalState::Accepted,
        ),
    );

    // JobMaxTracePatchSize: 5-byte patches.
    let run = TraceRun::start(TraceScript::default(), trace_options(5)).await;
    let (r, log) = run.finish(b"My trace send").await;
    t.check(
        "JobMaxTracePatchSize",
        (log.patches(), log.finals(), r.state),
        (
            owned(&[(0, "My tr"), (5, "ace s"), (10, "end")]),
            vec!["success".to_owned()],
            FinalState::Accepted,
        ),
    );

    // JobFinishStatusUpdateRetry: the final update fails 5 times, then is accepted.
    let script = TraceScript {
        finals: vec![answer(400, &[]); 5],
        ..TraceScript::default()
    };
    let run = TraceRun::start(script, trace_options(1 << 20)).await;
    let (r, log) = run.finish(b"").await;
    t.check(
        "JobFinishStatusUpdateRetry",
        (log.finals().len(), r.state),
        (6, FinalState::Accepted),
    );

    // JobIncrementalPatchSend: the loop sends the log before the job ends.
    let run = TraceRun::start(TraceScript::default(), trace_options(1 << 20)).await;
    run.trace.writer().write_bytes(b"123456789\n");
    let before_finish = run
        .until(|log| log.patches() == owned(&[(0, "123456789\n")]))
        .await;
    let (r, log) = run.finish(b"").await;
    t.check(
        "JobIncrementalPatchSend",
        (before_finish, log.patches().len(), log.finals(), r.state),
        (true, 1, vec!["success".to_owned()], FinalState::Accepted),
    );

    // JobIncrementalStatusRefresh: a `running` update reaches GitLab before the final one,
    // even when the job ends at once (drover's pickup ack is that update).
    let run = TraceRun::start(TraceScript::default(), trace_options(1 << 20)).await;
    let (_, log) = run.finish(b"").await;
    t.check(
        "JobIncrementalStatusRefresh",
        log.updates(),
        vec!["running".to_owned(), "success".to_owned()],
    );

    // CancelingJobIncrementalUpdate: after GitLab asks to cancel (on a keep-alive, with or
    // without the patch saying so), the rest of the log is still sent.
    for (case, patch_canceling) in [
        ("patch doesn't return canceling", false),
        ("patch returns canceling", true),
    ] {
        let mut opts = trace_options(10);
        opts.force_send_interval = Duration::ZERO;
        let first = if patch_canceling {
            answer(202, &[("Job-Status", "canceling")])
        } else {
            answer(202, &[])
        };
        let canceling = answer(200, &[("Job-Status", "canceling")]);
        let script = TraceScript {
            patch: vec![first, answer(202, &[("Job-Status", "canceling")])],
            running: vec![canceling; 50],
            ..TraceScript::default()
        };
        let run = TraceRun::start(script, opts).await;
        run.trace.writer().write_bytes(b"123456789\n987654321\n");
        let both = run.until(|log| log.patches().len() >= 2).await;
        let tokens = (
            run.trace.graceful_cancel().is_cancelled(),
            run.trace.abort().is_cancelled(),
        );
        let (r, log) = run.finish(b"").await;
        t.check(
            &format!("CancelingJobIncrementalUpdate/{case}"),
            (both, tokens, log.patches(), r.state),
            (
                true,
                (true, false),
                owned(&[(0, "123456789\n"), (10, "987654321\n")]),
                FinalState::Accepted,
            ),
        );
    }

    // JobChecksum and JobBytesize: the final update's checksum and size of the whole log.
    for (case, max_chunk, log_text, want) in [
        (
            "JobChecksum",
            22,
            "This is a basic log line",
            ("crc32:367dfeeb", 24),
        ),
        (
            "JobBytesize",
            100,
            "Build trace with secret and multi-byte \u{fc} character",
            ("crc32:0d7cf601", 51),
        ),
    ] {
        let run = TraceRun::start(TraceScript::default(), trace_options(max_chunk)).await;
        let (r, log) = run.finish(log_text.as_bytes()).await;
        let output = log
            .0
            .iter()
            .rev()
            .find(|s| s.method == "PUT")
            .and_then(|s| serde_json::from_str::<serde_json::Value>(&s.body).ok())
            .map(|v| {
                (
                    v["checksum"].as_str().unwrap_or_default().to_owned(),
                    v["output"]["bytesize"].as_u64().unwrap_or_default(),
                    v["output"]["checksum"]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned(),
                )
            });
        t.check(
            case,
            (output, r.checksum.clone(), r.bytesize),
            (
                Some((want.0.to_owned(), want.1, want.0.to_owned())),
                want.0.to_owned(),
                want.1,
            ),
        );
    }
}

/// A client of `url` with the default settings.
fn plain_client(url: String) -> Client {
    Client::new(&ClientSettings {
        url,
        ..ClientSettings::default()
    })
    .expect("client")
}

/// `network/gitlab_test.go` PatchTrace, RangeMismatchPatchTrace, PatchTraceUpdatedTrace and
/// AbortedPatchTrace: what one PATCH sends and what its answer means (state, the offset the
/// trace continues from, cancel requested).
async fn gitlab_patch_outcomes(t: &mut Tally) {
    use drover::gitlab::UpdateState;
    let content: &[u8] = b"trace trace trace";
    let creds = JobCredentials {
        id: 1,
        token: "token".into(),
    };
    let outcome = |r: &drover::gitlab::UpdateResult, start: u64| {
        (r.state, r.offset.unwrap_or(start), r.cancel_requested)
    };
    for status in ["running", "canceling"] {
        let cancel = status == "canceling";
        let (url, requests) =
            scripted(vec![(202, vec![("Job-Status", status.to_owned())]); 3]).await;
        let client = plain_client(url);
        let mut got = Vec::new();
        for (from, to) in [(0, 17), (3, 17), (3, 10)] {
            let r = client
                .patch_trace(
                    &creds,
                    from,
                    bytes::Bytes::copy_from_slice(&content[from as usize..to]),
                    false,
                )
                .await;
            got.push(outcome(&r, from));
        }
        let bodies: Vec<String> = SentLog::of(&requests)
            .patches()
            .into_iter()
            .map(|(_, b)| b)
            .collect();
        t.check(
            &format!("PatchTrace/{status}"),
            (got, bodies),
            (
                vec![
                    (UpdateState::Succeeded, 17, cancel),
                    (UpdateState::Succeeded, 17, cancel),
                    (UpdateState::Succeeded, 10, cancel),
                ],
                vec![
                    "trace trace trace".to_owned(),
                    "ce trace trace".to_owned(),
                    "ce trac".to_owned(),
                ],
            ),
        );

        // RangeMismatchPatchTrace: GitLab holds 10 bytes; patches past them get 416 (without
        // the job status), one from before them is taken.
        let (url, _) = serve(move |request| {
            let offset = sent(request).offset.unwrap_or_default();
            if offset > 10 {
                answer(416, &[("Range", "0-10")])
            } else {
                (202, vec![("Job-Status", status.to_owned())], String::new())
            }
        })
        .await;
        let client = plain_client(url);
        let mut got = Vec::new();
        for from in [11u64, 15, 5] {
            let r = client
                .patch_trace(
                    &creds,
                    from,
                    bytes::Bytes::copy_from_slice(&content[from as usize..]),
                    false,
                )
                .await;
            got.push(outcome(&r, from));
        }
        t.check(
            &format!("RangeMismatchPatchTrace/{status}"),
            got,
            vec![
                (UpdateState::RangeMismatch, 10, false),
                (UpdateState::RangeMismatch, 10, false),
                (UpdateState::Succeeded, 17, cancel),
            ],
        );
    }

    // PatchTraceUpdatedTrace: a growing log sent from the offset each answer gives; empty
    // patches are not sent.
    type Step = (
        &'static str,
        &'static str,
        Option<&'static str>,
        (u64, bool),
    );
    let steps: [Step; 7] = [
        ("test", "running", Some("0-3"), (4, false)),
        ("", "running", None, (4, false)),
        (" ", "running", Some("4-4"), (5, false)),
        ("test", "running", Some("5-8"), (9, false)),
        ("test", "canceling", Some("9-12"), (13, true)),
        (" ", "canceling", Some("13-13"), (14, true)),
        ("", "canceling", None, (14, false)),
    ];
    let status_now = Arc::new(Mutex::new("running"));
    let answer_status = status_now.clone();
    let (url, requests) = serve(move |_| {
        let s = *answer_status.lock().expect("status");
        (202, vec![("Job-Status", s.to_owned())], String::new())
    })
    .await;
    let client = plain_client(url);
    let mut log = String::new();
    let mut offset = 0u64;
    for (i, (update, status, range, want)) in steps.into_iter().enumerate() {
        *status_now.lock().expect("status") = status;
        log.push_str(update);
        let before = requests.lock().expect("requests").len();
        let r = client
            .patch_trace(
                &creds,
                offset,
                bytes::Bytes::copy_from_slice(&log.as_bytes()[offset as usize..]),
                false,
            )
            .await;
        let new: Vec<String> = requests.lock().expect("requests")[before..].to_vec();
        let sent_now = new
            .first()
            .map(|q| (head_header(q, "content-range"), sent(q).body));
        let got = (r.state, r.offset.unwrap_or(offset), r.cancel_requested);
        t.check(
            &format!("PatchTraceUpdatedTrace/patch-{}", i + 1),
            (got, sent_now),
            (
                (UpdateState::Succeeded, want.0, want.1),
                range.map(|r| (Some(r.to_owned()), update.to_owned())),
            ),
        );
        offset = r.offset.unwrap_or(offset);
    }

    // AbortedPatchTrace: `Job-Status` canceling asks for a cancel; canceled and failed abort.
    for (status, want) in [
        ("canceling", (UpdateState::Succeeded, 17, true)),
        ("canceled", (UpdateState::Abort, 0, false)),
        ("failed", (UpdateState::Abort, 0, false)),
    ] {
        let (url, _) = scripted(vec![(202, vec![("Job-Status", status.to_owned())])]).await;
        let client = plain_client(url);
        let r = client
            .patch_trace(&creds, 0, bytes::Bytes::copy_from_slice(content), false)
            .await;
        t.check(&format!("AbortedPatchTrace/{status}"), outcome(&r, 0), want);
    }
}

/// `network/trace_test.go` UpdateIntervalChanges: the interval GitLab asks for on a PATCH, a
/// keep-alive or the final update is taken (≤ 0 ignored, capped at 15 minutes), also on an
/// abort; the final update starts again from the default (the trace's configured interval;
/// 3 s unless set, as upstream's).
async fn update_interval_changes(t: &mut Tally) {
    let initial = Duration::from_millis(10);
    let max = Duration::from_secs(15 * 60);
    // (case, seconds asked, abort, after the patch and keep-alive, after the final update)
    let rows: [(&str, i64, bool, Duration, Duration); 5] = [
        ("negative interval requested", -10, false, initial, initial),
        ("zero interval requested", 0, false, initial, initial),
        (
            "positive interval requested",
            10,
            false,
            Duration::from_secs(10),
            Duration::from_secs(10),
        ),
        (
            "positive interval applied on a failure",
            10,
            true,
            Duration::from_secs(10),
            Duration::from_secs(10),
        ),
        (
            "over-limit interval requested",
            15 * 60 + 10,
            false,
            max,
            max,
        ),
    ];
    for (case, asked, abort, after, after_final) in rows {
        let asked = asked.to_string();
        let header = [("X-GitLab-Trace-Update-Interval", asked.as_str())];
        let (patch_status, put_status) = if abort { (403, 403) } else { (202, 200) };
        // sendPatch: the interval of the PATCH's answer.
        let script = TraceScript {
            patch: vec![answer(patch_status, &header)],
            ..TraceScript::default()
        };
        let run = TraceRun::start(script, trace_options(1 << 20)).await;
        let first = run.trace.update_interval();
        run.trace.writer().write_bytes(b"Test trace\n");
        run.until(|log| !log.patches().is_empty()).await;
        let got = wait_for_interval(&run, after).await;
        run.finish(b"").await;
        t.check(
            &format!("UpdateIntervalChanges/{case}/sendPatch"),
            (first, got),
            (initial, after),
        );
        // touchJob: the interval of a keep-alive's answer.
        let mut opts = trace_options(1 << 20);
        opts.force_send_interval = Duration::ZERO;
        let script = TraceScript {
            running: vec![answer(put_status, &header)],
            ..TraceScript::default()
        };
        let run = TraceRun::start(script, opts).await;
        run.until(|log| log.updates().len() >= 2).await;
        let got = wait_for_interval(&run, after).await;
        run.finish(b"").await;
        t.check(
            &format!("UpdateIntervalChanges/{case}/touchJob"),
            got,
            after,
        );
        // finalStatusUpdate: the interval of the final update's answer.
        let script = TraceScript {
            finals: vec![answer(put_status, &header)],
            ..TraceScript::default()
        };
        let run = TraceRun::start(script, trace_options(1 << 20)).await;
        let (r, _) = run.finish(b"").await;
        t.check(
            &format!("UpdateIntervalChanges/{case}/finalStatusUpdate"),
            r.update_interval,
            after_final,
        );
    }
}

/// The trace's update interval once it is `want`, or what it is after a second.
async fn wait_for_interval(run: &TraceRun, want: Duration) -> Duration {
    for _ in 0..100 {
        if run.trace.update_interval() == want {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    run.trace.update_interval()
}

/// `info.features.two_phase_job_commit` of the first recorded request.
fn two_phase_sent(requests: &Mutex<Vec<String>>) -> Option<Option<bool>> {
    requests
        .lock()
        .expect("requests")
        .first()
        .map(|q| body_json(q)["info"]["features"]["two_phase_job_commit"].as_bool())
}

/// The JSON body of a recorded request.
fn body_json(request: &str) -> serde_json::Value {
    serde_json::from_str(&sent(request).body).unwrap_or_default()
}

/// `network/gitlab_test.go` getFeatures_TwoPhaseJobCommit, getFeatures_JobInputs and the
/// Transmits* tests (job request, register, verify, update), `retry_tracker_test.go`
/// WithRetryTracker, `client_test.go` 307and308Redirections and EnsureUserAgentAlwaysSent,
/// `helpers/featureflags` GetAll.
async fn client_transmissions(t: &mut Tally) {
    use drover::gitlab::{JobRequest, JobRequestOutcome, UpdateState};
    let shell = drover::config::RunnerConfig {
        executor: "shell".into(),
        ..Default::default()
    };
    let info = Info::for_runner(&shell, &Default::default());
    let features = serde_json::to_value(&info).unwrap_or_default()["features"].clone();
    t.check(
        "GitLabClient_getFeatures_TwoPhaseJobCommit",
        features["two_phase_job_commit"].as_bool(),
        Some(true),
    );
    t.check(
        "GitLabClient_getFeatures_JobInputs",
        features["job_inputs"].as_bool(),
        Some(true),
    );
    let request = JobRequest {
        token: "valid-token",
        info: &info,
        system_id: "s_some_system_id",
        session: None,
        runner_name: "r",
    };

    // The job request, with 204: no job, healthy.
    let (url, requests) = scripted(vec![(204, vec![])]).await;
    let r = plain_client(url).request_job(&request).await;
    let sent_feature = two_phase_sent(&requests);
    t.check(
        "GitLabClient_RequestJob_TransmitsTwoPhaseJobCommit",
        (
            sent_feature,
            matches!(r.outcome, JobRequestOutcome::NoJob),
            r.is_healthy(),
        ),
        (Some(Some(true)), true, true),
    );

    // Register, with 201 and the new runner.
    let created = (
        201,
        vec![("Content-Type", "application/json".to_owned())],
        r#"{"id": 12345, "token": "valid-token"}"#.to_owned(),
    );
    let (url, requests) = scripted_bodies(vec![created.clone()]).await;
    let params = drover::gitlab::RegisterParams {
        registration_token: "valid-token".into(),
        description: "test".into(),
        ..Default::default()
    };
    let r = plain_client(url)
        .register_runner(&params)
        .await
        .ok()
        .map(|c| (c.id, c.token));
    let sent_feature = two_phase_sent(&requests);
    t.check(
        "GitLabClient_RegisterRunner_TransmitsTwoPhaseJobCommit",
        (sent_feature, r),
        (Some(Some(true)), Some((12345, "valid-token".to_owned()))),
    );

    // Verify: the executor's info, its features and the system ID travel with it.
    let mut ok = created;
    ok.0 = 200;
    let (url, requests) = scripted_bodies(vec![ok]).await;
    let r = plain_client(url)
        .verify_runner("valid-token", &info, "s_some_system_id")
        .await
        .ok()
        .map(|c| c.id);
    let sent_info = requests.lock().expect("requests").first().map(|q| {
        let v = body_json(q);
        (
            v["info"]["features"]["cancel_gracefully"].as_bool(),
            v["info"]["executor"].as_str().map(str::to_owned),
            v["system_id"].as_str().map(str::to_owned),
        )
    });
    t.check(
        "GitLabClient_VerifyRunner_TransmitsRunnerInfo",
        (sent_info, r),
        (
            Some((
                Some(true),
                Some("shell".to_owned()),
                Some("s_some_system_id".to_owned()),
            )),
            Some(12345),
        ),
    );

    // Update: the final state, with the features.
    let (url, requests) = scripted(vec![(200, vec![])]).await;
    let creds = JobCredentials {
        id: 123,
        token: "valid-token".into(),
    };
    let update = JobUpdate {
        state: JobState::Success,
        failure_reason: None,
        exit_code: 0,
        output: TraceOutput::default(),
    };
    let r = plain_client(url).update_job(&creds, &info, &update).await;
    let sent_feature = two_phase_sent(&requests);
    t.check(
        "GitLabClient_UpdateJob_TransmitsTwoPhaseJobCommit",
        (sent_feature, r.state),
        (Some(Some(true)), UpdateState::Succeeded),
    );

    // WithRetryTracker: the push-back flag is set exactly when a retried status was seen.
    let retry_now = || (429, vec![("Retry-After", "0".to_owned())]);
    for (case, script, want) in [
        (
            "first-try success leaves tracker false",
            vec![(204, vec![])],
            false,
        ),
        (
            "429 then success sets tracker",
            vec![retry_now(), (204, vec![])],
            true,
        ),
        (
            "503 then success sets tracker",
            vec![(503, vec![]), (204, vec![])],
            true,
        ),
        (
            "no tracker installed completes without panic",
            vec![retry_now(), (204, vec![])],
            true,
        ),
    ] {
        let (url, _) = scripted(script).await;
        let r = plain_client(url).request_job(&request).await;
        t.check(
            &format!("WithRetryTracker/{case}"),
            (matches!(r.outcome, JobRequestOutcome::NoJob), r.pushed_back),
            (true, want),
        );
    }

    // 307and308Redirections: the method and the body are sent again to the new location.
    // drover sends every body from memory, so upstream's piped body is the same case as its
    // byte buffer here.
    for code in [307u16, 308] {
        for (case, body) in [
            ("bytes buffer", "test payload"),
            ("piped data", "test payload"),
        ] {
            let (url, requests) = serve(move |request| {
                if request.starts_with("PATCH /redirected") {
                    answer(200, &[])
                } else {
                    answer(code, &[("Location", "/redirected")])
                }
            })
            .await;
            let r = plain_client(url)
                .patch_trace(
                    &creds,
                    0,
                    bytes::Bytes::copy_from_slice(body.as_bytes()),
                    false,
                )
                .await;
            let resent = requests
                .lock()
                .expect("requests")
                .iter()
                .map(|q| sent(q))
                .find(|s| s.method == "PATCH" && s.offset.is_some() && s.body == body)
                .is_some();
            let redirected = requests
                .lock()
                .expect("requests")
                .iter()
                .filter(|q| q.starts_with("PATCH /redirected"))
                .map(|q| sent(q).body)
                .collect::<Vec<_>>();
            t.check(
                &format!("307and308Redirections/code-{code}-{case}"),
                (resent, redirected, r.status),
                (true, vec![body.to_owned()], 200),
            );
        }
    }

    // "nil body": a call without a body (a token reset) follows the redirect the same way.
    for code in [307u16, 308] {
        let (url, requests) = serve(move |request| {
            if request.starts_with("POST /redirected") {
                (
                    201,
                    vec![("Content-Type", "application/json".to_owned())],
                    r#"{"token": "new-token"}"#.to_owned(),
                )
            } else {
                answer(code, &[("Location", "/redirected")])
            }
        })
        .await;
        let r = plain_client(url).reset_token_with_pat(1, "pat").await;
        let redirected: Vec<String> = requests
            .lock()
            .expect("requests")
            .iter()
            .filter(|q| q.starts_with("POST /redirected"))
            .map(|q| sent(q).body)
            .collect();
        t.check(
            &format!("307and308Redirections/code-{code}-nil body"),
            (redirected, r.ok().map(|c| c.token)),
            (vec![String::new()], Some("new-token".to_owned())),
        );
    }

    // EnsureUserAgentAlwaysSent: with and without a body.
    let (url, requests) = scripted(vec![(200, vec![]), (200, vec![])]).await;
    let client = plain_client(url);
    client
        .patch_trace(&creds, 0, bytes::Bytes::from_static(b"test"), false)
        .await;
    let _ = client.reset_token_with_pat(1, "pat").await;
    let agents: Vec<Option<String>> = requests
        .lock()
        .expect("requests")
        .iter()
        .map(|q| head_header(q, "user-agent"))
        .collect();
    for (i, case) in ["request reader is present", "request reader is empty"]
        .into_iter()
        .enumerate()
    {
        t.check(
            &format!("EnsureUserAgentAlwaysSent/{case}"),
            agents.get(i).cloned().flatten(),
            Some(drover::version::user_agent()),
        );
    }

    // GetAll: every flag upstream knows, with its default (gitlab-runner 19.4,
    // helpers/featureflags/flags.go).
    // `+` marks a flag that defaults to true; the `FF_` prefix is left out.
    let upstream_flags = "\
        TEST_FEATURE NETWORK_PER_BUILD USE_LEGACY_KUBERNETES_EXECUTION_STRATEGY \
        +USE_DIRECT_DOWNLOAD +USE_FASTZIP DISABLE_UMASK_FOR_DOCKER_EXECUTOR \
        ENABLE_BASH_EXIT_CODE_CHECK USE_WINDOWS_LEGACY_PROCESS_STRATEGY USE_LEGACY_BASH_EVAL \
        USE_POWERSHELL_PATH_RESOLVER USE_DYNAMIC_TRACE_FORCE_SEND_INTERVAL SCRIPT_SECTIONS \
        ENABLE_JOB_CLEANUP KUBERNETES_HONOR_ENTRYPOINT POSIXLY_CORRECT_ESCAPES \
        RESOLVE_FULL_TLS_CHAIN DISABLE_POWERSHELL_STDIN +USE_POD_ACTIVE_DEADLINE_SECONDS \
        USE_ADVANCED_POD_SPEC_CONFIGURATION +SECRET_RESOLVING_FAILS_IF_MISSING \
        PRINT_POD_EVENTS +USE_GIT_BUNDLE_URIS USE_GIT_NATIVE_CLONE \
        USE_DUMB_INIT_WITH_KUBERNETES_EXECUTOR USE_INIT_WITH_DOCKER_EXECUTOR \
        LOG_IMAGES_CONFIGURED_FOR_JOB +USE_DOCKER_AUTOSCALER_DIAL_STDIO \
        CLEAN_UP_FAILED_CACHE_EXTRACT USE_WINDOWS_JOB_OBJECT +TIMESTAMPS \
        DISABLE_AUTOMATIC_TOKEN_ROTATION USE_LEGACY_GCS_CACHE_ADAPTER \
        DISABLE_UMASK_FOR_KUBERNETES_EXECUTOR USE_LEGACY_S3_CACHE_ADAPTER \
        GIT_URLS_WITHOUT_TOKENS WAIT_FOR_POD_TO_BE_REACHABLE +MASK_ALL_DEFAULT_TOKENS \
        EXPORT_HIGH_CARDINALITY_METRICS USE_FLEETING_ACQUIRE_HEARTBEATS \
        +USE_EXPONENTIAL_BACKOFF_STAGE_RETRY +USE_ADAPTIVE_REQUEST_CONCURRENCY \
        +USE_GITALY_CORRELATION_ID USE_GIT_PROACTIVE_AUTH HASH_CACHE_KEYS \
        +ENABLE_JOB_INPUTS_INTERPOLATION USE_JOB_ROUTER SCRIPT_TO_STEP_MIGRATION \
        USE_PARALLEL_CACHE_TRANSFER USE_PARALLEL_ARTIFACT_TRANSFER CONCRETE \
        SUSPENDABLE_ENVIRONMENTS USE_NATIVE_CONTAINER_STOP";
    let theirs: std::collections::BTreeSet<(String, bool)> = upstream_flags
        .split_whitespace()
        .map(|f| match f.strip_prefix('+') {
            Some(name) => (format!("FF_{name}"), true),
            None => (format!("FF_{f}"), false),
        })
        .collect();
    let ours: std::collections::BTreeSet<(String, bool)> =
        drover::executor::script::variables::FEATURE_FLAG_DEFAULTS
            .iter()
            .map(|(n, d)| ((*n).to_owned(), *d))
            .collect();
    t.check("GetAll", (ours.len(), ours), (52, theirs));
}

/// A TLS server on 127.0.0.1 (its certificate signed by `ca.pem` in `dir`) answering every
/// request with `200 {}`, requiring a client certificate signed by the same CA when
/// `client_auth`; returns its URL.
async fn tls_server(dir: &std::path::Path, client_auth: bool) -> String {
    let read = |name: &str| std::fs::read(dir.join(name)).expect("certificate file");
    let certs = |name: &str| -> Vec<rustls::pki_types::CertificateDer<'static>> {
        rustls_pemfile::certs(&mut read(name).as_slice())
            .collect::<Result<_, _>>()
            .expect("PEM certificates")
    };
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .expect("TLS versions");
    let builder = if client_auth {
        let mut roots = rustls::RootCertStore::empty();
        for c in certs("ca.pem") {
            roots.add(c).expect("CA");
        }
        builder.with_client_cert_verifier(
            rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .expect("client verifier"),
        )
    } else {
        builder.with_no_client_auth()
    };
    let key = rustls_pemfile::private_key(&mut read("server-key.pem").as_slice())
        .expect("key PEM")
        .expect("a key");
    let config = builder
        .with_single_cert(certs("server-cert.pem"), key)
        .expect("server certificate");
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let url = format!(
        "https://127.0.0.1:{}",
        listener.local_addr().expect("addr").port()
    );
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                return;
            };
            tokio::spawn(answer_over_tls(acceptor.clone(), tcp));
        }
    });
    url
}

/// Reads one request over TLS and answers `200 {}`.
async fn answer_over_tls(acceptor: tokio_rustls::TlsAcceptor, tcp: tokio::net::TcpStream) {
    let Ok(mut tls) = acceptor.accept(tcp).await else {
        return;
    };
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
        match tls.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
    let _ = tls
        .write_all(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}")
        .await;
    let _ = tls.shutdown().await;
}

/// `network/client_test.go` ClientInvalidSSL, ClientTLSCAFile,
/// ClientCertificateInPredefinedDirectory, ClientInvalidTLSAuth, ClientTLSAuth and
/// ClientTLSAuthCertificatesInPredefinedDirectory: whether a call over TLS gets through (the
/// CA chain handed to jobs is not compared here).
async fn client_tls(t: &mut Tally) {
    let dir = tempfile::tempdir().expect("temporary directory");
    let d = dir.path();
    test_certs::make_ca(d, "ca");
    test_certs::leaf(
        d,
        "ca",
        "server-key.pem",
        "server-cert.pem",
        "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n",
    );
    test_certs::leaf(
        d,
        "ca",
        "key.pem",
        "cert.pem",
        "extendedKeyUsage=clientAuth\n",
    );
    // The predefined directory: <host>.crt, <host>.auth.crt, <host>.auth.key.
    let certs = d.join("certs");
    std::fs::create_dir(&certs).expect("certs directory");
    for (from, to) in [
        ("ca.pem", "127.0.0.1.crt"),
        ("cert.pem", "127.0.0.1.auth.crt"),
        ("key.pem", "127.0.0.1.auth.key"),
    ] {
        std::fs::copy(d.join(from), certs.join(to)).expect("copy");
    }
    let info = Info::registration();
    let through = |settings: ClientSettings| {
        let info = &info;
        async move {
            match Client::new(&settings) {
                Ok(c) => c
                    .verify_runner("token", info, "s_0123456789ab")
                    .await
                    .map(|_| ())
                    .map_err(|e| e.status()),
                Err(_) => Err(-100),
            }
        }
    };
    let plain = tls_server(d, false).await;
    let mutual = tls_server(d, true).await;
    let file = |name: &str| Some(d.join(name));
    let in_dir = |url: &str| {
        let runner = drover::config::RunnerConfig {
            url: url.to_owned(),
            ..Default::default()
        };
        ClientSettings::for_runner(&runner, Some(&certs))
    };
    let rows: Vec<(&str, ClientSettings, Result<(), i32>)> = vec![
        (
            "ClientInvalidSSL",
            ClientSettings {
                url: plain.clone(),
                ..ClientSettings::default()
            },
            Err(-1),
        ),
        (
            "ClientTLSCAFile",
            ClientSettings {
                url: plain.clone(),
                tls_ca_file: file("ca.pem"),
                ..ClientSettings::default()
            },
            Ok(()),
        ),
        (
            "ClientCertificateInPredefinedDirectory",
            in_dir(&plain),
            Ok(()),
        ),
        (
            "ClientInvalidTLSAuth",
            ClientSettings {
                url: mutual.clone(),
                tls_ca_file: file("ca.pem"),
                ..ClientSettings::default()
            },
            Err(-1),
        ),
        (
            "ClientTLSAuth",
            ClientSettings {
                url: mutual.clone(),
                tls_ca_file: file("ca.pem"),
                tls_cert_file: file("cert.pem"),
                tls_key_file: file("key.pem"),
                ..ClientSettings::default()
            },
            Ok(()),
        ),
        (
            "ClientTLSAuthCertificatesInPredefinedDirectory",
            in_dir(&mutual),
            Ok(()),
        ),
    ];
    for (case, settings, want) in rows {
        let got = through(settings).await;
        t.check(case, got, want);
    }
}
