//! The secrets this process knows, and their removal from everything it logs.
//!
//! A runner holds other people's secrets: job tokens, masked variables, registry passwords,
//! cache and cloud credentials, its own tokens. The job log is masked by the executor's trace
//! ([`crate::mask`]); this module covers drover's *own* log (stderr, any
//! level, any format, including dependencies such as bollard that print request bodies at
//! debug level) and its error messages. Whoever learns a secret registers it for as long as it
//! is in use ([`register`]; the executor does so for each job); the log writer passes every
//! line through [`redact`], which replaces each registered secret (also in its JSON- and
//! Debug-escaped forms) with `[MASKED]`, and masks every token after a known prefix
//! (`glpat-[MASKED]`) and sensitive URL parameter value, as the job log does.
//! Values shorter than [`MIN_PHRASE_CHARS`] are not registered (see there).

use std::sync::Mutex;

use crate::config::RunnerConfig;
use crate::mask::{too_short_to_mask, Masker};

pub use crate::mask::MIN_PHRASE_CHARS;

struct Registry {
    next: u64,
    entries: Vec<(u64, Vec<String>)>,
    masker: Option<Masker>,
}

static REGISTRY: Mutex<Registry> = Mutex::new(Registry {
    next: 0,
    entries: Vec::new(),
    masker: None,
});

/// Secrets stay registered while this lives.
#[derive(Debug)]
#[must_use = "the secrets are forgotten when the registration is dropped"]
pub struct Registration(u64);

impl Drop for Registration {
    fn drop(&mut self) {
        if let Ok(mut r) = REGISTRY.lock() {
            r.entries.retain(|(id, _)| *id != self.0);
            r.masker = None;
        }
    }
}

/// The spellings of a secret that can reach a log: as is, and up to two layers of escaping
/// by JSON (request bodies), `{:?}` of a string and of bytes (a JSON body logged with `{:?}`
/// is both).
fn spellings(secret: &str) -> Vec<String> {
    fn unquote(q: &str) -> String {
        q.strip_prefix('"')
            .and_then(|q| q.strip_suffix('"'))
            .unwrap_or(q)
            .to_string()
    }
    let escapes: [fn(&str) -> String; 3] = [
        |s| unquote(&serde_json::to_string(s).unwrap_or_default()),
        |s| unquote(&format!("{s:?}")),
        |s| s.as_bytes().escape_ascii().to_string(),
    ];
    let mut out = vec![secret.to_string()];
    let mut layer = vec![secret.to_string()];
    for _ in 0..2 {
        let next: Vec<String> = layer
            .iter()
            .flat_map(|s| escapes.iter().map(move |e| e(s)))
            .collect();
        for n in &next {
            if !out.contains(n) {
                out.push(n.clone());
            }
        }
        layer = next;
    }
    out
}

/// Registers secrets until the returned [`Registration`] is dropped. Empty and too-short
/// values are skipped.
pub fn register<I, S>(secrets: I) -> Registration
where
    I: IntoIterator<Item = S>,
    S: AsRef<str>,
{
    let phrases: Vec<String> = secrets
        .into_iter()
        .filter(|s| !too_short_to_mask(s.as_ref()))
        .flat_map(|s| spellings(s.as_ref()))
        .collect();
    let mut r = REGISTRY.lock().unwrap_or_else(|p| p.into_inner());
    r.next += 1;
    let id = r.next;
    r.entries.push((id, phrases));
    r.masker = None;
    Registration(id)
}

/// `text` with every registered secret, token and sensitive URL parameter value masked.
pub fn redact(text: &str) -> String {
    let mut r = REGISTRY.lock().unwrap_or_else(|p| p.into_inner());
    if r.masker.is_none() {
        let phrases: Vec<&str> = r
            .entries
            .iter()
            .flat_map(|(_, v)| v.iter().map(String::as_str))
            .collect();
        let masker = Masker::new(&phrases, &[]);
        r.masker = Some(masker);
    }
    match r.masker.as_mut() {
        Some(m) => {
            let mut out = m.push(text.as_bytes());
            out.extend(m.finish());
            String::from_utf8_lossy(&out).into_owned()
        }
        None => text.to_string(),
    }
}

static CONFIG_SECRETS: Mutex<Option<Registration>> = Mutex::new(None);

/// Registers the secrets of every runner in `config` as the process's config secrets,
/// replacing the previous config's (a daemon's load and each reload).
pub fn register_config(config: &crate::config::Config) {
    let registration = register(config.runners.iter().flat_map(of_runner_config));
    if let Ok(mut current) = CONFIG_SECRETS.lock() {
        *current = Some(registration);
    }
}

/// The secrets in a `[[runners]]` entry: its token and the cache credentials.
pub fn of_runner_config(r: &RunnerConfig) -> Vec<String> {
    let mut out = vec![r.token.clone()];
    if let Some(cache) = &r.cache {
        if let Some(s3) = &cache.s3 {
            out.extend([
                s3.access_key.clone(),
                s3.secret_key.clone(),
                s3.session_token.clone(),
            ]);
        }
        if let Some(gcs) = &cache.gcs {
            out.push(gcs.private_key.clone());
        }
        if let Some(azure) = &cache.azure {
            out.push(azure.account_key.clone());
        }
    }
    out.retain(|s| !s.is_empty());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registered_secrets_are_redacted_in_every_spelling_until_dropped() {
        let secret = "pa\"ss\\word-1234";
        let reg = register([secret, "", "short"]);
        let body = serde_json::json!({ "Env": [format!("X={secret}")] }).to_string();
        let bytes_debug = body.as_bytes().escape_ascii().to_string();
        let text = format!("{body} {secret} {secret:?} {bytes_debug} glpat-abcdef short");
        let red = redact(&text);
        assert!(!red.contains("word-1234"), "{red}");
        assert!(!red.contains("glpat-abcdef"), "{red}");
        assert!(red.contains("short"), "{red}");
        drop(reg);
        assert!(redact(secret).contains("word-1234"));
    }
}
