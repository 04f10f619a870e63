//! The cache stages (`restore_cache`, `archive_cache`, `archive_cache_on_failure`): upstream's
//! key sanitising, policies, `when`, fallback keys and `CACHE_FALLBACK_KEY`, the local archive
//! path relative to the project dir, and the helper commands (`cache-extractor`,
//! `cache-archiver`) with presigned URLs when a distributed cache is configured. Every helper
//! call sits inside if/else: a cache failure never fails the job. Pure.
//!
//! `FF_HASH_CACHE_KEYS` (upstream's, default off) names a cache by the SHA-256 of its key
//! (not sanitised), and its objects are sharded by the hash's first two characters. Whatever
//! the flag, each helper call also names the cache under the other scheme, so that a project
//! toggling the flag finds its cache: the archiver gets `--alternate-file` (renamed to the
//! primary file when only it exists) and `--check-url` (a HEAD of the upload's object), the
//! extractor `--alternate-url`/`--alternate-head-url` (the newer of the two objects wins).

use super::user::write_exports;
use super::variables::VarList;
use super::{quote, ScriptBody};
use crate::executor::paths::{normalize, JobPaths};
use crate::job::{Cache, JobPayload};

pub use crate::cache::remote::{Download, LocalOnly, Remote, Upload};

/// The feature flag that names caches by the SHA-256 of their key.
pub const HASH_FLAG: &str = "FF_HASH_CACHE_KEYS";

/// The lower-case hex SHA-256 of `key`: its name under `FF_HASH_CACHE_KEYS`.
pub fn hash_key(key: &str) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(key.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The object name of a cache named `name`: sharded (`ab/abcdef…`, the name's first two
/// characters as a folder) when the name is a hash, else the name. `None` for a sharded name
/// shorter than two characters, which upstream does not store.
pub fn object_key(name: &str, sharded: bool) -> Option<String> {
    if !sharded {
        return Some(name.to_string());
    }
    let shard = name.get(..2).filter(|s| s.len() == 2)?;
    Some(format!("{shard}/{name}"))
}

/// The names one cache key goes by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyNames {
    /// The key as the log shows it (sanitised unless hashed) and the upload's metadata.
    pub human: String,
    /// The local folder and object name under the current setting of `FF_HASH_CACHE_KEYS`.
    pub primary: String,
    /// The name under the other setting: the hash when the flag is off, the key when on.
    pub alternate: String,
    /// Whether the flag is on (the primary name is the hash, and sharded).
    pub hashed: bool,
}

impl KeyNames {
    /// The names of `human` with the flag on (`hashed`) or off.
    pub fn new(human: &str, hashed: bool) -> KeyNames {
        let hash = hash_key(human);
        let (primary, alternate) = if hashed {
            (hash, human.to_string())
        } else {
            (human.to_string(), hash)
        };
        KeyNames {
            human: human.to_string(),
            primary,
            alternate,
            hashed,
        }
    }

    /// The primary object's name (sharded when hashed).
    pub fn primary_object(&self) -> Option<String> {
        object_key(&self.primary, self.hashed)
    }

    /// The alternate object's name (sharded when the flag is off: the alternate is the hash).
    pub fn alternate_object(&self) -> Option<String> {
        object_key(&self.alternate, !self.hashed)
    }
}

/// Upstream's key sanitising. `%2f`/`%2F` become `/`, `%2e`/`%2E` become `.` and `\` becomes
/// `/` (one left-to-right pass); the path is resolved inside a virtual root (empty and `.`
/// segments dropped, `..` removes the segment before it and never climbs above the root); then
/// trailing whitespace is trimmed from the last segment, and a last segment left empty is
/// dropped and the trimming goes on with the one before it. Inner segments are kept as written
/// (`foo/ /bar` stays). `Ok("")` for an empty key; an error naming the key when nothing is
/// left. Unlike upstream, a key whose trimmed last segment is `.` or `..` (`foo/.. `) is refused
/// too: upstream would keep it, and `..` would point the archive outside the key's directory.
pub fn sanitize_key(raw: &str) -> Result<String, String> {
    if raw.is_empty() {
        return Ok(String::new());
    }
    let mut decoded = String::with_capacity(raw.len());
    let mut rest = raw;
    while let Some(c) = rest.chars().next() {
        let (out, used) = match rest.get(..3) {
            Some("%2f" | "%2F") => ('/', 3),
            Some("%2e" | "%2E") => ('.', 3),
            _ if c == '\\' => ('/', 1),
            _ => (c, c.len_utf8()),
        };
        decoded.push(out);
        rest = &rest[used..];
    }
    let resolved = normalize(&format!("/{decoded}"));
    let mut parts: Vec<&str> = resolved.split('/').filter(|s| !s.is_empty()).collect();
    while let Some(last) = parts.pop() {
        let trimmed = last.trim_end();
        if !trimmed.is_empty() {
            parts.push(trimmed);
            break;
        }
    }
    let refused = matches!(parts.last(), Some(&".") | Some(&"..")) || parts.is_empty();
    if refused {
        Err(format!("cache key {raw:?} could not be sanitized"))
    } else {
        Ok(parts.join("/"))
    }
}

/// The policy of a cache entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Policy {
    Pull,
    Push,
    PullPush,
}

/// The entry's policy after expansion; an unknown one is an error naming it and the key (as
/// upstream words it), which fails the stage.
fn policy(entry: &Cache, vars: &VarList, key: &str) -> Result<Policy, String> {
    match vars.expand(&entry.policy).as_str() {
        "" | "pull-push" => Ok(Policy::PullPush),
        "pull" => Ok(Policy::Pull),
        "push" => Ok(Policy::Push),
        other => Err(format!(
            "unknown cache policy {other} for {key} (use pull, push or pull-push)"
        )),
    }
}

/// A key after expansion and sanitising (none when `hashed`: `FF_HASH_CACHE_KEYS`), as
/// upstream prints it: a warning when sanitising changed it or could not make anything of it,
/// then, when `allowed` (the
/// `CACHE_FALLBACK_KEY` guard) lets it through but nothing is left, the notice
/// `Skipping cache <stage> due to empty cache key`. `None`: skip this key.
fn key_of(
    raw: &str,
    hashed: bool,
    stage: &str,
    b: &mut ScriptBody,
    allowed: impl FnOnce(&str, &mut ScriptBody) -> bool,
) -> Option<String> {
    // A hashed key names nothing on disk: it is used as it is.
    let sanitized = if hashed {
        Ok(raw.to_string())
    } else {
        sanitize_key(raw)
    };
    let key = match sanitized {
        Ok(k) => {
            if k != raw {
                b.warning(&format!("cache key {raw:?} sanitized to {k:?}"));
            }
            k
        }
        Err(e) => {
            b.warning(&e);
            String::new()
        }
    };
    if !allowed(&key, b) {
        return None;
    }
    if key.is_empty() {
        b.notice(&format!("Skipping cache {stage} due to empty cache key"));
        return None;
    }
    Some(key)
}

/// The key before sanitising: the expanded `cache:key`, or `<job>/<ref>` (joined as a path)
/// when the key is not set. A key that expands to nothing stays empty and skips the cache.
fn primary_key(entry: &Cache, payload: &JobPayload, vars: &VarList) -> String {
    if entry.key.is_empty() {
        normalize(&format!(
            "/{}/{}",
            payload.job_info.name, payload.git_info.r#ref
        ))
        .trim_start_matches('/')
        .to_string()
    } else {
        vars.expand(&entry.key)
    }
}

/// `s` in double quotes: the shell expands variables in it, but a `"`, `\` or backquote in
/// it is taken literally.
fn expandable(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        if matches!(c, '"' | '\\' | '`') {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('"');
    out
}

/// The archive path of `key`, relative to the project dir (the helper's working directory).
pub fn archive_file(paths: &JobPaths, key: &str) -> String {
    let depth = paths.build_dir.split('/').filter(|s| !s.is_empty()).count();
    let mut rel = "../".repeat(depth);
    rel.push_str(paths.cache_dir.trim_start_matches('/'));
    format!("{rel}/{key}/cache.zip")
}

/// The archive path of the alternate name `key`, joined and cleaned as upstream does, or
/// `None` when it would leave the cache dir (an unhashed key with `..` under
/// `FF_HASH_CACHE_KEYS`: the archiver would move a file from outside into the cache; upstream
/// passes it on).
pub fn alternate_archive_file(paths: &JobPaths, key: &str) -> Option<String> {
    let base = normalize(&paths.cache_dir);
    let file = normalize(&format!("{base}/{key}/cache.zip"));
    let inside = base == "/" || file.starts_with(&format!("{base}/"));
    if !inside {
        return None;
    }
    let depth = paths.build_dir.split('/').filter(|s| !s.is_empty()).count();
    Some(format!(
        "{}{}",
        "../".repeat(depth),
        file.trim_start_matches('/')
    ))
}

fn in_use(entry: &Cache) -> bool {
    !entry.paths.is_empty() || entry.untracked
}

const HELPER: &str = "gitlab-runner-helper";

/// What the cache stages need.
pub struct CacheInputs<'a> {
    /// The job payload.
    pub payload: &'a JobPayload,
    /// The job's variables, expanded.
    pub vars: &'a VarList,
    /// The job's paths.
    pub paths: &'a JobPaths,
    /// The distributed cache.
    pub remote: &'a dyn Remote,
    /// `CACHE_REQUEST_TIMEOUT` in minutes.
    pub timeout_minutes: u64,
}

/// A cache stage's start: the exports, then `cd` into the project dir.
fn stage_body(i: &CacheInputs<'_>) -> ScriptBody {
    let mut b = ScriptBody::new();
    write_exports(&mut b, i.vars, true);
    b.line(format!("cd {}", quote(&i.paths.build_dir)));
    b
}

/// What to do with one cache entry in a stage.
enum Use {
    /// Use it under this (sanitised) key.
    Key(String),
    /// Skip it (empty key, or its policy excludes this stage), with a message.
    Skip,
    /// An unknown policy: the stage fails.
    Fail,
}

/// The entry's key and whether its policy lets this stage (`skip_on` excludes it) use it.
fn use_entry(
    entry: &Cache,
    i: &CacheInputs<'_>,
    b: &mut ScriptBody,
    skip_on: Policy,
    verb: &str,
    stage: &str,
) -> Use {
    let hashed = i.vars.flag(HASH_FLAG);
    let Some(key) = key_of(
        &primary_key(entry, i.payload, i.vars),
        hashed,
        stage,
        b,
        |_, _| true,
    ) else {
        return Use::Skip;
    };
    match policy(entry, i.vars, &key) {
        Err(e) => {
            b.error(&e);
            b.line("exit 1");
            Use::Fail
        }
        Ok(p) if p == skip_on => {
            b.notice(&format!("Not {verb} cache {key} due to policy"));
            Use::Skip
        }
        Ok(_) => Use::Key(key),
    }
}

/// The `restore_cache` body, or `None` when no cache entry has paths or `untracked`.
pub fn restore(i: &CacheInputs<'_>) -> Option<ScriptBody> {
    let entries: Vec<&Cache> = i.payload.cache.iter().filter(|c| in_use(c)).collect();
    if entries.is_empty() {
        return None;
    }
    let mut b = stage_body(i);
    let hashed = i.vars.flag(HASH_FLAG);
    for entry in entries {
        let key = match use_entry(entry, i, &mut b, Policy::Push, "downloading", "extraction") {
            Use::Key(k) => k,
            Use::Skip => continue,
            Use::Fail => return Some(b),
        };
        // Tried in order, repeats included, as upstream does.
        let mut chain = vec![key];
        for f in &entry.fallback_keys {
            let raw = i.vars.expand(f);
            if raw.is_empty() {
                continue;
            }
            if let Some(k) = key_of(&raw, hashed, "extraction", &mut b, |_, _| true) {
                chain.push(k);
            }
        }
        // The variable's own value (a file variable's content), not expanded; the guard
        // looks at the key as it will be used: `main-protected/` or `main-protected%2f`
        // sanitise to `main-protected` and are refused too.
        let fallback = i.vars.get("CACHE_FALLBACK_KEY").map(|v| v.value.as_str());
        if let Some(f) = fallback.filter(|f| !f.is_empty()) {
            // With FF_HASH_CACHE_KEYS the key is not sanitised (`main-protected/` passes
            // upstream's test), but its unhashed alternate object is joined as a path: the
            // protected branch's plain object. Unlike upstream, the sanitised form is checked
            // too.
            let protected = |k: &str| k.trim_end_matches(['.', ' ']).ends_with("-protected");
            let guard = |k: &str, b: &mut ScriptBody| {
                let blocked = protected(k) || sanitize_key(k).is_ok_and(|s| protected(&s));
                if blocked {
                    b.warning(&format!(
                        "CACHE_FALLBACK_KEY {k:?} not allowed to end in \"-protected\""
                    ));
                }
                !blocked
            };
            if let Some(k) = key_of(f, hashed, "extraction", &mut b, guard) {
                chain.push(k);
            }
        }
        let chain: Vec<KeyNames> = chain.iter().map(|k| KeyNames::new(k, hashed)).collect();
        // FF_CLEAN_UP_FAILED_CACHE_EXTRACT: what a failed try may have left half extracted.
        let cleanup: &[String] = if i.vars.flag("FF_CLEAN_UP_FAILED_CACHE_EXTRACT") {
            &entry.paths
        } else {
            &[]
        };
        b.line(format!("if {HELPER} --version >/dev/null 2>&1; then"));
        extract_chain(&mut b, i, &chain, cleanup);
        b.line("else");
        b.warning(&format!("Missing {HELPER}. Extracting cache is disabled."));
        b.line("fi");
    }
    Some(b)
}

/// Nested if/else: try each key in turn until one extracts. Each try names the other
/// scheme's object too, when it has a name inside the project's objects. After a failed try,
/// the `cleanup` paths are removed (as written: the shell expands variables in them, as
/// upstream's), before the next key.
fn extract_chain(b: &mut ScriptBody, i: &CacheInputs<'_>, chain: &[KeyNames], cleanup: &[String]) {
    let Some((key, rest)) = chain.split_first() else {
        return;
    };
    b.notice(&format!("Checking cache for {}...", key.human));
    let mut cmd = format!(
        "{HELPER} cache-extractor --file {} --timeout {}",
        quote(&archive_file(i.paths, &key.primary)),
        i.timeout_minutes
    );
    let primary = key.primary_object().and_then(|o| i.remote.download(&o));
    if let Some(d) = primary {
        cmd.push_str(&format!(" --url {}", quote(&d.url)));
        if let Some(h) = d.head_url {
            cmd.push_str(&format!(" --head-url {}", quote(&h)));
        }
    }
    if let Some(a) = key.alternate_object().and_then(|o| i.remote.download(&o)) {
        cmd.push_str(&format!(" --alternate-url {}", quote(&a.url)));
        if let Some(h) = a.head_url {
            cmd.push_str(&format!(" --alternate-head-url {}", quote(&h)));
        }
    }
    b.line(format!("if {cmd}; then"));
    b.notice("Successfully extracted cache");
    b.line("else");
    b.warning("Failed to extract cache");
    for path in cleanup {
        let p = expandable(path);
        b.print(&format!("Removing {path}"));
        b.line(format!("if [ -d {p} ]; then chmod -R u+rwX {p}; fi"));
        b.line(format!("rm -r -f {p}"));
    }
    extract_chain(b, i, rest, cleanup);
    b.line("fi");
}

/// The `archive_cache` (job succeeded) or `archive_cache_on_failure` body, or `None` when no
/// entry applies.
pub fn archive(i: &CacheInputs<'_>, job_succeeded: bool) -> Option<ScriptBody> {
    let entries: Vec<&Cache> = i
        .payload
        .cache
        .iter()
        .filter(|c| in_use(c))
        .filter(|c| match c.when.as_str() {
            "always" => true,
            "on_failure" => !job_succeeded,
            _ => job_succeeded,
        })
        .collect();
    if entries.is_empty() {
        return None;
    }
    let mut b = stage_body(i);
    let env_file = format!("{}/gitlab_runner_cache_env", i.paths.tmp_dir);
    for entry in entries {
        let key = match use_entry(entry, i, &mut b, Policy::Pull, "uploading", "archiving") {
            Use::Key(k) => k,
            Use::Skip => continue,
            Use::Fail => return Some(b),
        };
        let names = KeyNames::new(&key, i.vars.flag(HASH_FLAG));
        let mut cmd = format!(
            "{HELPER} cache-archiver --file {}",
            quote(&archive_file(i.paths, &names.primary)),
        );
        if let Some(alternate) = alternate_archive_file(i.paths, &names.alternate) {
            cmd.push_str(&format!(" --alternate-file {}", quote(&alternate)));
        }
        cmd.push_str(&format!(" --timeout {}", i.timeout_minutes));
        let max = i.remote.max_upload_size();
        if max > 0 {
            cmd.push_str(&format!(" --max-uploaded-archive-size {max}"));
        }
        for p in &entry.paths {
            // Expanded by the helper with the stage's environment, as upstream's.
            cmd.push_str(&format!(" --path {}", quote(p)));
        }
        if entry.untracked {
            cmd.push_str(" --untracked");
        }
        let upload = names
            .primary_object()
            .and_then(|o| i.remote.upload(&o, &names.human));
        if let Some(u) = upload {
            cmd.push_str(&format!(" --url {}", quote(&u.url)));
            for h in &u.headers {
                cmd.push_str(&format!(" --header {}", quote(h)));
            }
            if let Some(c) = &u.check_url {
                cmd.push_str(&format!(" --check-url {}", quote(c)));
            }
        }
        cmd.push_str(&format!(" --env-file {}", quote(&env_file)));
        b.line(format!("if {HELPER} --version >/dev/null 2>&1; then"));
        b.notice(&format!("Creating cache {key}..."));
        let metadata = format!("CACHE_METADATA={}", serde_json::json!({ "cachekey": key }));
        b.line(format!(
            "printf '%s\\n' {} > {}",
            quote(&metadata),
            quote(&env_file)
        ));
        b.line(format!("if {cmd}; then"));
        b.notice("Created cache");
        b.line("else");
        b.warning("Failed to create cache");
        b.line("fi");
        b.line(format!("rm -f {}", quote(&env_file)));
        b.line("else");
        b.warning(&format!("Missing {HELPER}. Creating cache is disabled."));
        b.line("fi");
    }
    Some(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_sanitised_as_upstream() {
        let ok = |raw: &str| sanitize_key(raw).ok();
        assert_eq!(
            ok("default-protected").as_deref(),
            Some("default-protected")
        );
        assert_eq!(ok("a%2Fb%2e%2e/../c").as_deref(), Some("a/c"));
        assert_eq!(ok("..\\..\\etc\\passwd").as_deref(), Some("etc/passwd"));
        // Only the last segments lose their trailing blanks.
        assert_eq!(ok("key /./next  ").as_deref(), Some("key /next"));
        assert_eq!(ok("").as_deref(), Some(""));
        assert_eq!(
            sanitize_key("../.."),
            Err("cache key \"../..\" could not be sanitized".into())
        );
        assert_eq!(ok("   "), None);
        // A last segment that trims to a traversal is refused (upstream keeps it).
        assert_eq!(ok("foo/.. "), None);
        assert_eq!(ok(".. "), None);
        assert_eq!(ok("foo/. "), None);
        assert_eq!(ok("foo/ ..").as_deref(), Some("foo/ .."));
    }

    fn paths() -> JobPaths {
        JobPaths {
            root_dir: "/builds".into(),
            build_dir: "/builds/group/project".into(),
            tmp_dir: "/builds/group/project.tmp".into(),
            cache_dir: "/cache/group/project".into(),
        }
    }

    #[test]
    fn archive_path_is_relative_to_the_project_dir() {
        assert_eq!(
            archive_file(&paths(), "k/x"),
            "../../../cache/group/project/k/x/cache.zip"
        );
    }

    fn payload(cache: serde_json::Value) -> JobPayload {
        JobPayload::from_json(
            &serde_json::json!({
                "id": 1, "job_info": {"name": "build"}, "git_info": {"ref": "main"},
                "cache": cache
            })
            .to_string(),
        )
        .unwrap()
    }

    struct Fake;
    impl Remote for Fake {
        fn download(&self, key: &str) -> Option<Download> {
            Some(Download {
                url: format!("http://s3/{key}?sig=get"),
                head_url: Some(format!("http://s3/{key}?sig=head")),
            })
        }
        fn upload(&self, object: &str, key: &str) -> Option<Upload> {
            Some(Upload {
                url: format!("http://s3/{object}?sig=put"),
                headers: vec![format!("x-amz-meta-cachekey: {key}")],
                check_url: Some(format!("http://s3/{object}?sig=head")),
            })
        }
        fn max_upload_size(&self) -> u64 {
            1000
        }
    }

    fn inputs<'a>(
        p: &'a JobPayload,
        vars: &'a VarList,
        paths: &'a JobPaths,
        remote: &'a dyn Remote,
    ) -> CacheInputs<'a> {
        CacheInputs {
            payload: p,
            vars,
            paths,
            remote,
            timeout_minutes: 10,
        }
    }

    #[test]
    fn restore_tries_the_fallback_chain_and_never_fails() {
        let p = payload(serde_json::json!([
            {"key": "main-key", "paths": ["vendor/"], "fallback_keys": ["fb-1", "main-key"]},
            {"key": "unused", "paths": []}
        ]));
        let vars = VarList {
            vars: vec![crate::executor::script::variables::Var {
                key: "CACHE_FALLBACK_KEY".into(),
                value: "global".into(),
                ..Default::default()
            }],
            tmp_dir: "/t".into(),
        };
        let paths = paths();
        let body = restore(&inputs(&p, &vars, &paths, &LocalOnly)).unwrap();
        let s = body.as_str();
        let order: Vec<usize> = [
            "Checking cache for main-key",
            "Checking cache for fb-1",
            "Checking cache for global",
        ]
        .iter()
        .map(|m| s.find(m).unwrap_or_else(|| panic!("{m} missing:\n{s}")))
        .collect();
        assert!(order.windows(2).all(|w| w[0] < w[1]), "{s}");
        assert!(s.contains("cache-extractor --file ../../../cache/group/project/main-key/cache.zip --timeout 10;"), "{s}");
        assert!(!s.contains("unused"));
        // A repeated fallback key is tried again, as upstream does.
        assert_eq!(s.matches("Checking cache for main-key").count(), 2, "{s}");
        assert!(!s.contains("exit 1"));
        let remote = restore(&inputs(&p, &vars, &paths, &Fake)).unwrap();
        assert!(
            remote.as_str().contains(
                "--url $'http://s3/main-key?sig=get' --head-url $'http://s3/main-key?sig=head'"
            ),
            "{}",
            remote.as_str()
        );
        // Nothing to restore: no stage.
        let none = payload(serde_json::json!([{"key": "k", "paths": []}]));
        assert!(restore(&inputs(&none, &vars, &paths, &LocalOnly)).is_none());
    }

    #[test]
    fn protected_fallback_key_is_refused_after_sanitising() {
        let p = payload(serde_json::json!([{"key": "k", "paths": ["a"]}]));
        let paths = paths();
        let restore_with = |fallback: &str| {
            let vars = VarList {
                vars: vec![crate::executor::script::variables::Var {
                    key: "CACHE_FALLBACK_KEY".into(),
                    value: fallback.into(),
                    ..Default::default()
                }],
                tmp_dir: "/t".into(),
            };
            restore(&inputs(&p, &vars, &paths, &LocalOnly))
                .unwrap()
                .as_str()
                .to_string()
        };
        // (CACHE_FALLBACK_KEY, refused as) — the raw value does not end in -protected.
        for (raw, shown) in [
            ("main-protected", "main-protected"),
            ("main-protected/", "main-protected"),
            ("main-protected\\", "main-protected"),
            ("main-protected%2f", "main-protected"),
            ("main-protected%2F.", "main-protected"),
            ("main-protected/.", "main-protected"),
            ("x/main-protected. .", "x/main-protected. ."),
        ] {
            let s = restore_with(raw);
            assert!(
                !s.contains("Checking cache for main-protected")
                    && !s.contains("Checking cache for x/main-protected"),
                "{raw:?} restored a protected cache:\n{s}"
            );
            assert!(
                s.contains(&format!(
                    "CACHE_FALLBACK_KEY {shown:?} not allowed to end in"
                )),
                "{raw:?}:\n{s}"
            );
        }
        // With FF_HASH_CACHE_KEYS the key is not sanitised, but its unhashed alternate object
        // (`…/main-protected/` joined as a path) would be the protected branch's plain cache:
        // refused all the same.
        let hashed_restore = |fallback: &str| {
            let vars = VarList {
                vars: vec![
                    crate::executor::script::variables::Var {
                        key: HASH_FLAG.into(),
                        value: "true".into(),
                        ..Default::default()
                    },
                    crate::executor::script::variables::Var {
                        key: "CACHE_FALLBACK_KEY".into(),
                        value: fallback.into(),
                        ..Default::default()
                    },
                ],
                tmp_dir: "/t".into(),
            };
            restore(&inputs(&p, &vars, &paths, &Fake))
                .unwrap()
                .as_str()
                .to_string()
        };
        for raw in [
            "main-protected",
            "main-protected/",
            "main-protected%2f",
            "x/../main-protected/.",
        ] {
            let s = hashed_restore(raw);
            assert!(
                !s.contains("Checking cache for main-protected")
                    && !s.contains("Checking cache for x/"),
                "{raw:?} restored a protected cache:\n{s}"
            );
            assert!(
                s.contains(&format!("CACHE_FALLBACK_KEY {raw:?} not allowed to end in")),
                "{raw:?}:\n{s}"
            );
        }
        assert!(
            hashed_restore("main-protected-x").contains("Checking cache for main-protected-x...")
        );
        // Keys that only contain the word are allowed.
        for ok in ["main-protected-x", "protected", "main-non_protected"] {
            let s = restore_with(ok);
            assert!(
                s.contains(&format!("Checking cache for {ok}...")),
                "{ok}:\n{s}"
            );
        }
    }

    #[test]
    fn policies_and_when() {
        let vars = VarList::default();
        let paths = paths();
        let p = payload(serde_json::json!([
            {"key": "pull-only", "paths": ["a"], "policy": "pull"},
            {"key": "push-only", "paths": ["b"], "policy": "push", "untracked": true},
            {"key": "failure", "paths": ["c"], "when": "on_failure"}
        ]));
        let r = restore(&inputs(&p, &vars, &paths, &LocalOnly)).unwrap();
        assert!(r
            .as_str()
            .contains("Not downloading cache push-only due to policy"));
        assert!(r.as_str().contains("Checking cache for pull-only"));
        let a = archive(&inputs(&p, &vars, &paths, &Fake), true).unwrap();
        let s = a.as_str();
        assert!(
            s.contains("Not uploading cache pull-only due to policy"),
            "{s}"
        );
        assert!(s.contains("Creating cache push-only..."), "{s}");
        assert!(s.contains("--max-uploaded-archive-size 1000 --path b --untracked --url $'http://s3/push-only?sig=put' --header $'x-amz-meta-cachekey: push-only' --check-url $'http://s3/push-only?sig=head' --env-file"), "{s}");
        assert!(!s.contains("Creating cache failure"), "{s}");
        let a = archive(&inputs(&p, &vars, &paths, &LocalOnly), false).unwrap();
        assert!(a.as_str().contains("Creating cache failure..."));
        assert!(!a.as_str().contains("Creating cache push-only"));
        let bad = payload(serde_json::json!([{"key": "k", "paths": ["a"], "policy": "sometimes"}]));
        let r = restore(&inputs(&bad, &vars, &paths, &LocalOnly)).unwrap();
        assert!(r.as_str().contains("unknown cache policy") && r.as_str().contains("exit 1"));
    }

    #[test]
    fn hashed_names_and_the_alternate_file() {
        let hash = "d03a852ba491ba611e907b1ef60ad5c4516a05b8f3aae6abb77f42bc60325aed";
        assert_eq!(hash_key("some-job/some-ref"), hash);
        let on = KeyNames::new("some-job/some-ref", true);
        assert_eq!(on.primary, hash);
        assert_eq!(on.alternate, "some-job/some-ref");
        assert_eq!(on.primary_object(), Some(format!("d0/{hash}")));
        assert_eq!(on.alternate_object().as_deref(), Some("some-job/some-ref"));
        let off = KeyNames::new("some-job/some-ref", false);
        assert_eq!(off.primary_object().as_deref(), Some("some-job/some-ref"));
        assert_eq!(off.alternate_object(), Some(format!("d0/{hash}")));
        assert_eq!(object_key("a", true), None);
        let paths = paths();
        assert_eq!(
            alternate_archive_file(&paths, "a/../b").as_deref(),
            Some("../../../cache/group/project/b/cache.zip")
        );
        // An unhashed key (flag on: not sanitised) cannot point the archiver outside the
        // cache dir, not even at a neighbour of it.
        for outside in ["../x", "../../../etc", "../project-other/k", ".."] {
            assert_eq!(alternate_archive_file(&paths, outside), None, "{outside}");
        }
        let vars = VarList {
            vars: vec![crate::executor::script::variables::Var {
                key: HASH_FLAG.into(),
                value: "true".into(),
                ..Default::default()
            }],
            tmp_dir: "/t".into(),
        };
        let p = payload(serde_json::json!([{"key": "../../escape", "paths": ["a"]}]));
        let a = archive(&inputs(&p, &vars, &paths, &Fake), true).unwrap();
        let s = a.as_str();
        let escape = hash_key("../../escape");
        assert!(s.contains(&format!("--file ../../../cache/group/project/{escape}/cache.zip --timeout 10 --max-uploaded-archive-size 1000 --path a --url $'http://s3/{}/{escape}?sig=put'", &escape[..2])), "{s}");
        assert!(!s.contains("--alternate-file"), "{s}");
        assert!(s.contains("Creating cache ../../escape..."), "{s}");
    }

    #[test]
    fn empty_key_defaults_to_job_and_ref() {
        let vars = VarList::default();
        let paths = paths();
        let p = payload(serde_json::json!([{"key": "", "paths": ["a"]}]));
        let r = restore(&inputs(&p, &vars, &paths, &LocalOnly)).unwrap();
        assert!(
            r.as_str().contains("Checking cache for build/main..."),
            "{}",
            r.as_str()
        );
    }
}
