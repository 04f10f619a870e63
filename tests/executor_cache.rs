//! Cache on the real Docker Engine, as uid 1000: a cache written by one job is restored by the
//! next from the local `/cache` volume (with a fallback key after a missing one); with
//! `[runners.cache.s3]` pointing at moto (a real S3-compatible server started here), the
//! archive is uploaded through presigned URLs and, after the local volumes are deleted,
//! restored from S3. Cache failures never fail the job; nothing is left behind.

mod docker_engine;
mod executor_common;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use drover::config::cache::{CacheConfig, CacheS3Config};
use drover::executor::RunnerSettings;
use executor_common::*;
use serde_json::json;

/// moto in server mode on a free loopback port, killed on drop.
struct Moto {
    child: Child,
    port: u16,
}

impl Moto {
    fn start() -> Moto {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .expect("free port");
        let child = Command::new("python3")
            .args([
                "-m",
                "moto.server",
                "-H",
                "127.0.0.1",
                "-p",
                &port.to_string(),
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start moto (fixtures/setup/cache-s3.sh installs it)");
        let deadline = Instant::now() + Duration::from_secs(30);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "moto did not start on port {port}"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        Moto { child, port }
    }

    /// A raw HTTP request to moto (it accepts unsigned requests); returns status line and body.
    fn request(&self, method: &str, path: &str) -> String {
        self.request_with_body(method, path, "")
    }

    /// A raw HTTP request with a body.
    fn request_with_body(&self, method: &str, path: &str, body: &str) -> String {
        let mut s = TcpStream::connect(("127.0.0.1", self.port)).expect("connect moto");
        write!(
            s,
            "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            self.port,
            body.len()
        )
        .unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        out
    }
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

const SCRIPT_WRITE: &[&str] = &[
    "mkdir -p vendor/deep && echo cached-content > vendor/deep/file.txt && echo other > vendor/other",
    "echo uid=$(id -u)",
];
const SCRIPT_READ: &[&str] = &["cat vendor/deep/file.txt", "ls vendor"];

fn cache_job(id: i64, script: &[&str], cache: serde_json::Value) -> drover::job::JobPayload {
    no_git_job(
        id,
        701,
        script,
        json!({
            "image": {"name": BUILD_IMAGE, "executor_opts": {"docker": {"user": "1000"}}},
            "cache": cache,
        }),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cache_is_restored_from_the_local_volume() {
    let _guard = engine_test!();
    let runner = settings("cachelocal");
    let short = short_token(&runner);
    // A key that needs sanitising: `deps%2Fv1/./` → `deps/v1`.
    let ran = run_job(
        &cache_job(
            51,
            SCRIPT_WRITE,
            json!([{"key": "deps%2Fv1/./", "paths": ["vendor/"]}]),
        ),
        &runner,
    )
    .await;
    assert!(ran.result.is_ok(), "{:?}\n{}", ran.result, ran.trace);
    assert!(ran.trace.contains("uid=1000"), "{}", ran.trace);
    assert!(
        ran.trace
            .contains("cache key \"deps%2Fv1/./\" sanitized to \"deps/v1\""),
        "{}",
        ran.trace
    );
    assert!(
        ran.trace.contains("Creating cache deps/v1..."),
        "{}",
        ran.trace
    );
    assert!(ran.trace.contains("Created cache"), "{}", ran.trace);
    assert!(
        !ran.trace.contains("Failed to create cache"),
        "{}",
        ran.trace
    );

    // The next job: a missing key first, then the fallback key restores it; pull only.
    let ran = run_job(
        &cache_job(
            52,
            SCRIPT_READ,
            json!([{"key": "missing", "fallback_keys": ["deps/v1"], "paths": ["vendor/"],
                    "policy": "pull"}]),
        ),
        &runner,
    )
    .await;
    assert!(ran.result.is_ok(), "{:?}\n{}", ran.result, ran.trace);
    let t = &ran.trace;
    let order = [
        "Checking cache for missing...",
        "Failed to extract cache",
        "Checking cache for deps/v1...",
        "Successfully extracted cache",
        "\ncached-content\n",
    ];
    let mut at = 0;
    for m in order {
        at += t[at..]
            .find(m)
            .unwrap_or_else(|| panic!("{m:?} missing after byte {at}:\n{t}"));
    }
    assert!(
        t.contains("Not uploading cache missing due to policy"),
        "{t}"
    );
    assert!(!t.contains("Creating cache"), "{t}");
    assert_clean_and_remove_reusable(&short);
}

/// Runs a job that writes the cache (uploaded to moto), checks the object is in the bucket,
/// removes the local cache volume, and runs a job that gets the cache back from moto. `base`
/// is where the presigned URLs must point (`http://host:port`).
async fn s3_round_trip(moto: &Moto, runner: &RunnerSettings, jobs: (i64, i64), base: &str) {
    let short = short_token(runner);
    let cache = json!([{"key": "deps", "paths": ["vendor/"]}]);
    let ran = run_job(&cache_job(jobs.0, SCRIPT_WRITE, cache.clone()), runner).await;
    assert!(ran.result.is_ok(), "{:?}\n{}", ran.result, ran.trace);
    assert!(ran.trace.contains("Created cache"), "{}", ran.trace);
    assert!(
        ran.trace
            .contains(&format!("Uploading cache.zip to {base}/")),
        "{}",
        ran.trace
    );
    // The credentials never reach the job: only presigned URLs, masked in the trace.
    assert!(!ran.trace.contains("drover-test-secret-key"));
    assert!(!ran.trace.contains("X-Amz-Signature="), "{}", ran.trace);
    let listing = moto.request("GET", "/drover-cache?list-type=2");
    let object = format!("ci/runner/{short}/project/701/deps");
    assert!(
        listing.contains(&object),
        "{object} not in bucket:\n{listing}"
    );

    // Delete the local cache volume: the next job downloads the archive from S3.
    assert_clean_and_remove_reusable(&short);
    let ran = run_job(&cache_job(jobs.1, SCRIPT_READ, cache), runner).await;
    assert!(ran.result.is_ok(), "{:?}\n{}", ran.result, ran.trace);
    let t = &ran.trace;
    assert!(
        t.contains(&format!("Downloading cache.zip from {base}/")),
        "{t}"
    );
    assert!(t.contains("Successfully extracted cache"), "{t}");
    assert!(t.contains("\ncached-content\n"), "{t}");
    assert_clean_and_remove_reusable(&short);
}

fn s3_runner(name: &str, s3: CacheS3Config) -> RunnerSettings {
    let mut runner = settings(name);
    runner.cache = Some(CacheConfig {
        cache_type: "s3".into(),
        path: "ci".into(),
        s3: Some(CacheS3Config {
            access_key: "AKIDDROVERTEST".into(),
            secret_key: "drover-test-secret-key".into(),
            bucket_name: "drover-cache".into(),
            insecure: true,
            ..s3
        }),
        ..Default::default()
    });
    runner
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cache_is_restored_from_s3_after_the_local_volumes_are_gone() {
    let _guard = engine_test!();
    let moto = Moto::start();
    assert!(moto
        .request("PUT", "/drover-cache")
        .starts_with("HTTP/1.1 200"));
    // A custom endpoint: path style.
    let runner = s3_runner(
        "caches3",
        CacheS3Config {
            server_address: format!("127.0.0.1:{}", moto.port),
            bucket_location: "us-east-1".into(),
            server_side_encryption: "S3".into(),
            ..Default::default()
        },
    );
    let base = format!("http://127.0.0.1:{}/drover-cache", moto.port);
    s3_round_trip(&moto, &runner, (53, 54), &base).await;
}

/// The AWS credential chain finds moto's instance profile through
/// `AWS_EC2_METADATA_SERVICE_ENDPOINT` (moto answers the IMDSv2 token and the
/// `iam/security-credentials` routes), and URLs signed with those temporary credentials (the
/// session token included) store and return an object in moto.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn iam_credentials_come_from_the_instance_metadata_service() {
    use drover::cache::aws_credentials::{default_chain, ChainInputs};
    use drover::cache::s3::S3Cache;
    let moto = Moto::start();
    assert!(moto
        .request("PUT", "/drover-iam")
        .starts_with("HTTP/1.1 200"));
    let inputs = ChainInputs {
        env: [
            (
                "AWS_EC2_METADATA_SERVICE_ENDPOINT",
                format!("http://127.0.0.1:{}/", moto.port),
            ),
            (
                "AWS_SHARED_CREDENTIALS_FILE",
                "/nonexistent/drover/credentials".to_owned(),
            ),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect(),
        home: None,
    };
    let found = default_chain(&inputs).await;
    let creds = found.as_ref().expect("instance profile credentials");
    assert_eq!(creds.source, "instance profile");
    assert_eq!(creds.access_key, "test-key");
    assert_eq!(creds.session_token.as_deref(), Some("test-session-token"));
    assert!(creds.expires.is_some(), "{creds:?}");

    // No AccessKey/SecretKey: upstream's rule picks IAM.
    let config = CacheS3Config {
        server_address: format!("127.0.0.1:{}", moto.port),
        bucket_name: "drover-iam".into(),
        insecure: true,
        ..Default::default()
    };
    assert_eq!(config.auth_type(), Some("iam"));
    let s3 = S3Cache::with_iam(&config, Duration::from_secs(300), Some(&found)).expect("S3 cache");
    let put = s3.upload("project/1/k", "k");
    assert!(
        put.url.contains("X-Amz-Credential=test-key%2F"),
        "{}",
        put.url
    );
    assert!(
        put.url.contains("X-Amz-Security-Token=test-session-token"),
        "{}",
        put.url
    );
    let got = put_then_get(&put, &s3.download("project/1/k").url, "iam-cached").await;
    assert_eq!(got, "iam-cached");

    // Nothing anywhere: the error says what each source answered.
    let mut nothing = inputs.clone();
    nothing
        .env
        .insert("AWS_EC2_METADATA_DISABLED".into(), "true".into());
    let e = default_chain(&nothing).await.unwrap_err();
    assert!(e.contains("AWS_EC2_METADATA_DISABLED is true"), "{e}");
    assert!(e.contains("/nonexistent/drover/credentials"), "{e}");
}

/// A whole job with an S3 cache that has no keys: the runner takes the instance profile's
/// credentials (from moto's metadata routes) and the cache goes to moto and comes back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cache_with_iam_credentials_round_trips_through_s3() {
    let _guard = engine_test!();
    let moto = Moto::start();
    assert!(moto
        .request("PUT", "/drover-cache")
        .starts_with("HTTP/1.1 200"));
    // The runner process's environment, as on an EC2 instance whose metadata service is moto.
    std::env::set_var(
        "AWS_EC2_METADATA_SERVICE_ENDPOINT",
        format!("http://127.0.0.1:{}", moto.port),
    );
    std::env::set_var(
        "AWS_SHARED_CREDENTIALS_FILE",
        "/nonexistent/drover/credentials",
    );
    let mut runner = s3_runner(
        "caches3iam",
        CacheS3Config {
            server_address: format!("127.0.0.1:{}", moto.port),
            ..Default::default()
        },
    );
    if let Some(s3) = runner.cache.as_mut().and_then(|c| c.s3.as_mut()) {
        s3.access_key.clear();
        s3.secret_key.clear();
    }
    let base = format!("http://127.0.0.1:{}/drover-cache", moto.port);
    s3_round_trip(&moto, &runner, (57, 58), &base).await;
}

/// An AWS endpoint outside us-east-1: virtual-hosted style (the bucket in the host name) and
/// the region in the signature, as upstream addresses it. The bucket's host name resolves to
/// moto through `extra_hosts`, in the job's and the helper's containers alike.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cache_goes_to_a_virtual_hosted_bucket_outside_us_east_1() {
    let _guard = engine_test!();
    let moto = Moto::start();
    let created = moto.request_with_body(
        "PUT",
        "/drover-cache",
        "<CreateBucketConfiguration><LocationConstraint>eu-central-1</LocationConstraint></CreateBucketConfiguration>",
    );
    assert!(created.starts_with("HTTP/1.1 200"), "{created}");
    let host = "s3.eu-central-1.amazonaws.com";
    let mut runner = s3_runner(
        "caches3vh",
        CacheS3Config {
            server_address: format!("{host}:{}", moto.port),
            bucket_location: "eu-central-1".into(),
            ..Default::default()
        },
    );
    runner.docker.extra_hosts = vec![format!("drover-cache.{host}:127.0.0.1")];
    let base = format!("http://drover-cache.{host}:{}", moto.port);
    s3_round_trip(&moto, &runner, (55, 56), &base).await;
}

/// A cache shared by protected and unprotected pipelines (one named volume as `/cache`, as an
/// operator may configure): a protected job writes `main-protected`; an unprotected job whose
/// `CACHE_FALLBACK_KEY` only sanitises to `main-protected` must not restore it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn protected_cache_is_not_restored_through_a_sanitised_fallback_key() {
    let _guard = engine_test!();
    let volume = "drover-test-cacheprot-shared";
    let _ = Command::new("docker")
        .args(["volume", "rm", "-f", volume])
        .output();
    let mut runner = settings("cacheprot");
    runner.docker.volumes = vec![format!("{volume}:/cache")];
    let short = short_token(&runner);
    let mut writer = cache_job(
        53,
        SCRIPT_WRITE,
        json!([{"key": "main-protected", "paths": ["vendor/"]}]),
    );
    writer.git_info.protected = Some(true);
    let ran = run_job(&writer, &runner).await;
    assert!(ran.result.is_ok(), "{:?}\n{}", ran.result, ran.trace);
    assert!(ran.trace.contains("Created cache"), "{}", ran.trace);

    for (id, fallback) in [(54, "main-protected/"), (55, "main-protected%2F")] {
        let mut reader = cache_job(
            id,
            &["cat vendor/deep/file.txt || echo no-cache-here"],
            json!([{"key": "other", "paths": ["vendor/"], "policy": "pull"}]),
        );
        reader.git_info.protected = Some(false);
        reader.variables.push(drover::job::JobVariable {
            key: "CACHE_FALLBACK_KEY".into(),
            value: fallback.into(),
            public: true,
            ..Default::default()
        });
        let ran = run_job(&reader, &runner).await;
        let t = &ran.trace;
        assert!(ran.result.is_ok(), "{:?}\n{t}", ran.result);
        assert!(
            t.contains(
                "CACHE_FALLBACK_KEY \"main-protected\" not allowed to end in \"-protected\""
            ),
            "{fallback}: {t}"
        );
        assert!(
            !t.contains("Checking cache for main-protected"),
            "{fallback}: {t}"
        );
        assert!(!t.contains("cached-content"), "{fallback}: {t}");
        assert!(t.contains("no-cache-here"), "{fallback}: {t}");
    }
    // The same shared cache is restored through an allowed key, so the refusal above is the
    // guard's and not a missing archive.
    let mut reader = cache_job(
        56,
        &["cat vendor/deep/file.txt || echo no-cache-here"],
        json!([{"key": "other", "fallback_keys": ["main-protected"], "paths": ["vendor/"],
                "policy": "pull"}]),
    );
    reader.git_info.protected = Some(false);
    let ran = run_job(&reader, &runner).await;
    assert!(ran.trace.contains("\ncached-content\n"), "{}", ran.trace);
    let _ = Command::new("docker")
        .args(["volume", "rm", "-f", volume])
        .output();
    assert_clean_and_remove_reusable(&short);
}

/// `CI_JOB_STATUS` is the script's outcome from after_script on, so a cache key built from it
/// names the outcome (`st-success`, `st-failed`), as upstream; before the script it is `running`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cache_keys_see_the_final_job_status() {
    let _guard = engine_test!();
    let runner = settings("cachestatus");
    let short = short_token(&runner);
    for (id, script, status) in [
        (57, vec!["mkdir -p vendor && echo x > vendor/f"], "success"),
        (
            58,
            vec!["mkdir -p vendor && echo x > vendor/f", "exit 4"],
            "failed",
        ),
    ] {
        let ran = run_job(
            &cache_job(
                id,
                &script,
                json!([{"key": "st-$CI_JOB_STATUS", "paths": ["vendor/"], "when": "always"}]),
            ),
            &runner,
        )
        .await;
        let t = &ran.trace;
        assert!(t.contains("Checking cache for st-running..."), "{t}");
        assert!(t.contains(&format!("Creating cache st-{status}...")), "{t}");
    }
    assert_clean_and_remove_reusable(&short);
}

/// Stores `body` through the presigned upload (its signed headers sent as they are) and
/// returns what the download URL gives back; both must succeed.
async fn put_then_get(
    put: &drover::executor::script::cache::Upload,
    get: &str,
    body: &str,
) -> String {
    let http = drover::helper::http::client(Duration::from_secs(30)).expect("HTTP client");
    let mut request = http.put(&put.url).body(body.to_owned());
    for h in &put.headers {
        let (k, v) = h.split_once(": ").expect("header");
        request = request.header(k, v);
    }
    let stored = request.send().await.expect("PUT to moto");
    assert!(stored.status().is_success(), "{:?}", stored.status());
    let got = http.get(get).send().await.expect("GET from moto");
    assert!(got.status().is_success(), "{:?}", got.status());
    got.text().await.expect("body")
}

/// The roles moto's STS has handed out: (role ARN, session policy, access key ID).
fn assumed_roles(moto: &Moto) -> Vec<(String, String, String)> {
    let answer = moto.request("GET", "/moto-api/data.json");
    let body = answer
        .split_once("\r\n\r\n")
        .map(|(_, b)| b)
        .unwrap_or_default();
    let data: serde_json::Value = serde_json::from_str(body).expect("moto's state as JSON");
    data["sts"]["AssumedRole"]
        .as_array()
        .map(|roles| {
            roles
                .iter()
                .map(|r| {
                    let s = |k: &str| r[k].as_str().unwrap_or_default().to_owned();
                    (s("role_arn"), s("policy"), s("access_key_id"))
                })
                .collect()
        })
        .unwrap_or_default()
}

/// `RoleARN` / `UploadRoleARN`: the runner assumes the role through STS (moto's, found through
/// `AWS_ENDPOINT_URL_STS` as the AWS SDK finds it) with a session policy for the one action on
/// the job's objects, signs the presigned URLs with the role's credentials (moto stores and
/// returns the object through them), and reuses the credentials for the next job. With only
/// `UploadRoleARN`, downloads keep the configured keys.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn role_arn_signs_with_the_roles_scoped_sts_credentials() {
    use drover::cache::CacheRemote;
    use drover::executor::script::cache::Remote;
    let moto = Moto::start();
    assert!(moto
        .request("PUT", "/drover-role")
        .starts_with("HTTP/1.1 200"));
    std::env::set_var(
        "AWS_ENDPOINT_URL_STS",
        format!("http://127.0.0.1:{}", moto.port),
    );
    let role = "arn:aws:iam::123456789012:role/drover-cache";
    let config = |role_arn: &str, upload_role_arn: &str| CacheConfig {
        cache_type: "s3".into(),
        s3: Some(CacheS3Config {
            server_address: format!("127.0.0.1:{}", moto.port),
            access_key: "AKIDBASEKEY".into(),
            secret_key: "base-secret".into(),
            bucket_name: "drover-role".into(),
            bucket_location: "eu-west-2".into(),
            insecure: true,
            role_arn: role_arn.into(),
            upload_role_arn: upload_role_arn.into(),
            ..Default::default()
        }),
        ..Default::default()
    };
    let both = config(role, "");
    let (remote, warnings) =
        CacheRemote::resolving_iam(Some(&both), "shorttok", 91, Duration::from_secs(1800)).await;
    assert!(warnings.is_empty(), "{warnings:?}");
    let handed_out = assumed_roles(&moto);
    assert_eq!(
        handed_out.len(),
        2,
        "one role session per direction: {handed_out:?}"
    );
    let policies: Vec<serde_json::Value> = handed_out
        .iter()
        .map(|(arn, policy, _)| {
            assert_eq!(arn, role);
            serde_json::from_str(policy).expect("session policy JSON")
        })
        .collect();
    let actions: Vec<&str> = policies
        .iter()
        .map(|p| p["Statement"][0]["Action"][0].as_str().unwrap_or_default())
        .collect();
    assert_eq!(actions, ["s3:GetObject", "s3:PutObject"]);
    for p in &policies {
        assert_eq!(
            p["Statement"][0]["Resource"],
            "arn:aws:s3:::drover-role/runner/shorttok/project/91/*"
        );
    }
    let (download_key, upload_key) = (&handed_out[0].2, &handed_out[1].2);
    let put = remote.upload("deps", "deps").expect("upload URL");
    assert!(
        put.url
            .contains(&format!("X-Amz-Credential={upload_key}%2F")),
        "signed with the upload session: {}",
        put.url
    );
    assert!(put.url.contains("X-Amz-Security-Token="), "{}", put.url);
    let get = remote.download("deps").expect("download URL");
    assert!(
        get.url
            .contains(&format!("X-Amz-Credential={download_key}%2F")),
        "signed with the download session: {}",
        get.url
    );
    assert_eq!(
        put_then_get(&put, &get.url, "role-cached").await,
        "role-cached"
    );

    // The next job of the project reuses both sessions.
    let (again, _) =
        CacheRemote::resolving_iam(Some(&both), "shorttok", 91, Duration::from_secs(1800)).await;
    assert_eq!(assumed_roles(&moto).len(), 2);
    assert!(again
        .upload("deps", "deps")
        .is_some_and(|u| u.url.contains(&format!("X-Amz-Credential={upload_key}%2F"))));

    // UploadRoleARN only: uploads through the role (a new session for another project),
    // downloads with the configured keys.
    let upload_only = config("", role);
    let (remote, warnings) = CacheRemote::resolving_iam(
        Some(&upload_only),
        "shorttok",
        92,
        Duration::from_secs(1800),
    )
    .await;
    assert!(warnings.is_empty(), "{warnings:?}");
    let handed_out = assumed_roles(&moto);
    assert_eq!(handed_out.len(), 3, "{handed_out:?}");
    let put = remote.upload("deps", "deps").expect("upload URL");
    assert!(
        put.url
            .contains(&format!("X-Amz-Credential={}%2F", handed_out[2].2)),
        "{}",
        put.url
    );
    let get = remote.download("deps").expect("download URL");
    assert!(
        get.url.contains("X-Amz-Credential=AKIDBASEKEY%2F"),
        "{}",
        get.url
    );
}

/// Without `BucketLocation`, the runner asks the bucket for its region (GetBucketLocation, as
/// upstream) and signs for it: a bucket moto created in eu-west-2 gets eu-west-2 URLs, one
/// created without a location us-east-1, and an endpoint that does not answer falls back to
/// us-east-1.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_bucket_location_is_detected_from_the_bucket() {
    use drover::cache::CacheRemote;
    use drover::executor::script::cache::Remote;
    let moto = Moto::start();
    let created = moto.request_with_body(
        "PUT",
        "/drover-where",
        "<CreateBucketConfiguration><LocationConstraint>eu-west-2</LocationConstraint></CreateBucketConfiguration>",
    );
    assert!(created.starts_with("HTTP/1.1 200"), "{created}");
    assert!(moto
        .request("PUT", "/drover-east")
        .starts_with("HTTP/1.1 200"));
    let closed = TcpListener::bind("127.0.0.1:0").expect("bind");
    let dead_port = closed.local_addr().expect("addr").port();
    drop(closed);
    for (bucket, port, region) in [
        ("drover-where", moto.port, "eu-west-2"),
        ("drover-east", moto.port, "us-east-1"),
        ("drover-where", dead_port, "us-east-1"),
    ] {
        let config = CacheConfig {
            cache_type: "s3".into(),
            s3: Some(CacheS3Config {
                server_address: format!("127.0.0.1:{port}"),
                access_key: "AKIDBASEKEY".into(),
                secret_key: "base-secret".into(),
                bucket_name: bucket.into(),
                insecure: true,
                ..Default::default()
            }),
            ..Default::default()
        };
        let (remote, warnings) =
            CacheRemote::resolving_iam(Some(&config), "shorttok", 93, Duration::from_secs(600))
                .await;
        assert!(warnings.is_empty(), "{warnings:?}");
        let url = remote.download("k").expect("download URL").url;
        assert!(
            url.contains(&format!("%2F{region}%2Fs3%2Faws4_request")),
            "{bucket} on port {port}: {url}"
        );
        if bucket == "drover-where" && port == moto.port {
            // Found once, remembered: with the bucket gone, a later job still signs for its
            // region instead of asking again (and falling back to us-east-1).
            assert!(moto
                .request("DELETE", "/drover-where")
                .starts_with("HTTP/1.1 204"));
            let (again, _) =
                CacheRemote::resolving_iam(Some(&config), "shorttok", 94, Duration::from_secs(600))
                    .await;
            let url = again.download("k").expect("download URL").url;
            assert!(url.contains("%2Feu-west-2%2Fs3%2Faws4_request"), "{url}");
        }
    }
}

/// `FF_HASH_CACHE_KEYS` toggled between two jobs of a project: the cache the first job
/// uploaded under its plain key is found by the second (flag on: the hashed, sharded object
/// does not exist yet) through the extractor's alternate URL, and the second job uploads it
/// under the hashed name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_toggled_hash_cache_keys_flag_finds_the_cache_under_its_other_name() {
    let _guard = engine_test!();
    let moto = Moto::start();
    assert!(moto
        .request("PUT", "/drover-cache")
        .starts_with("HTTP/1.1 200"));
    let runner = s3_runner(
        "cachehash",
        CacheS3Config {
            server_address: format!("127.0.0.1:{}", moto.port),
            bucket_location: "us-east-1".into(),
            ..Default::default()
        },
    );
    let short = short_token(&runner);
    let job = |id: i64, script: &[&str], hashed: bool| {
        no_git_job(
            id,
            701,
            script,
            json!({
                "image": {"name": BUILD_IMAGE, "executor_opts": {"docker": {"user": "1000"}}},
                "cache": [{"key": "deps", "paths": ["vendor/"]}],
                "variables": [{"key": "FF_HASH_CACHE_KEYS", "value": hashed.to_string(),
                               "public": true}],
            }),
        )
    };
    let ran = run_job(&job(57, SCRIPT_WRITE, false), &runner).await;
    assert!(ran.result.is_ok(), "{:?}\n{}", ran.result, ran.trace);
    assert!(ran.trace.contains("Created cache"), "{}", ran.trace);
    let plain = format!("ci/runner/{short}/project/701/deps");
    let hash = drover::executor::script::cache::hash_key("deps");
    let hashed = format!("ci/runner/{short}/project/701/{}/{hash}", &hash[..2]);
    let listing = moto.request("GET", "/drover-cache?list-type=2");
    assert!(
        listing.contains(&format!("<Key>{plain}</Key>")),
        "{listing}"
    );
    assert!(!listing.contains(&hashed), "{listing}");

    // Without the local volume, the flag on: the primary (hashed) object is missing.
    assert_clean_and_remove_reusable(&short);
    let ran = run_job(&job(58, SCRIPT_READ, true), &runner).await;
    assert!(ran.result.is_ok(), "{:?}\n{}", ran.result, ran.trace);
    let t = &ran.trace;
    assert!(t.contains("Checking cache for deps..."), "{t}");
    assert!(
        t.contains("Using the cache's alternate name: the primary is not available"),
        "{t}"
    );
    assert!(t.contains("Successfully extracted cache"), "{t}");
    assert!(t.contains("\ncached-content\n"), "{t}");
    assert!(t.contains("Created cache"), "{t}");
    let listing = moto.request("GET", "/drover-cache?list-type=2");
    assert!(
        listing.contains(&format!("<Key>{hashed}</Key>")),
        "{listing}"
    );
    assert_clean_and_remove_reusable(&short);
}
