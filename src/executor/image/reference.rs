//! Image references parsed and normalised as the Docker Engine does (the distribution reference
//! grammar plus Docker's normalisation: default registry `docker.io`, `library/` for official
//! images, `index.docker.io` folded into `docker.io`), so that `allowed_images` and
//! `allowed_services` judge the image the Engine will actually run, not the name as written.
//!
//! Grammar (github.com/distribution/reference, restated):
//! `name[:tag][@digest]`; `name` = `[domain[:port]/]path-component(/path-component)*`, a path
//! component is `[a-z0-9]+` joined by `.`, `_`, `__` or runs of `-`; a tag is
//! `[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}`; a digest is `algorithm:hex` (sha256: 64 lowercase hex
//! digits). The name is at most 255 characters, the repository path lowercase, and a bare
//! 64-hex-digit string is refused as a name. Anything else is refused, as a registry would.

use std::sync::LazyLock;

use regex::Regex;

/// Docker Hub's registry name after normalisation.
pub const DEFAULT_DOMAIN: &str = "docker.io";
const LEGACY_DEFAULT_DOMAIN: &str = "index.docker.io";
const OFFICIAL_PREFIX: &str = "library/";
const NAME_MAX: usize = 255;

static REFERENCE: LazyLock<Option<Regex>> = LazyLock::new(|| {
    let domain_component = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])";
    let domain_name = format!(r"{domain_component}(?:\.{domain_component})*");
    let host = format!(r"(?:{domain_name}|\[[a-fA-F0-9:]+\])");
    let domain = format!(r"{host}(?::[0-9]+)?");
    let path_component = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*";
    let tag = r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}";
    let digest = r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}";
    let pattern = format!(
        r"\A((?:{domain}/)?{path_component}(?:/{path_component})*)(?::({tag}))?(?:@({digest}))?\z"
    );
    Regex::new(&pattern).ok()
});

/// A reference the Engine would refuse, with the reason.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid image reference {reference:?}: {reason}")]
pub struct ReferenceError {
    /// The reference as written (cut to 300 characters).
    pub reference: String,
    /// Why it is refused.
    pub reason: &'static str,
}

/// A parsed, normalised image reference.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageRef {
    /// Registry host (and port): `docker.io` for Docker Hub.
    pub domain: String,
    /// Repository path inside the registry (`library/ruby` for official images).
    pub path: String,
    /// Tag, if written.
    pub tag: Option<String>,
    /// Digest (`sha256:…`), if written.
    pub digest: Option<String>,
}

impl ImageRef {
    /// Parses `s` as `docker pull`/`docker run` do (`ParseNormalizedNamed`).
    pub fn parse(s: &str) -> Result<Self, ReferenceError> {
        let fail = |reason| ReferenceError {
            reference: s.chars().take(300).collect(),
            reason,
        };
        if s.is_empty() {
            return Err(fail("empty reference"));
        }
        if s.len() == 64 && s.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(fail(
                "a 64-digit hexadecimal string is an image ID, not a name",
            ));
        }
        let (domain, remainder) = split_domain(s);
        let (remote, rest) =
            remainder.split_at(remainder.find([':', '@']).unwrap_or(remainder.len()));
        if remote.to_lowercase() != remote {
            return Err(fail("the repository name must be lowercase"));
        }
        let full = format!("{domain}/{remote}{rest}");
        let re = REFERENCE
            .as_ref()
            .ok_or_else(|| fail("the reference grammar did not compile"))?;
        let caps = re
            .captures(&full)
            .ok_or_else(|| fail("not a valid reference (registry/path[:tag][@digest])"))?;
        let name = caps.get(1).map(|m| m.as_str()).unwrap_or_default();
        if name.len() > NAME_MAX {
            return Err(fail("the repository name is longer than 255 characters"));
        }
        let digest = caps.get(3).map(|m| m.as_str().to_string());
        if let Some(d) = &digest {
            check_digest(d).map_err(fail)?;
        }
        let path = name
            .strip_prefix(&format!("{domain}/"))
            .unwrap_or(name)
            .to_string();
        Ok(ImageRef {
            domain,
            path,
            tag: caps.get(2).map(|m| m.as_str().to_string()),
            digest,
        })
    }

    /// The name as Docker shows it (`ruby:3`, `acme/app`, `registry.example.com/g/p:1`).
    pub fn familiar(&self) -> String {
        let name = if self.domain == DEFAULT_DOMAIN {
            match self.path.strip_prefix(OFFICIAL_PREFIX) {
                Some(rest) if !rest.contains('/') => rest.to_string(),
                _ => self.path.clone(),
            }
        } else {
            format!("{}/{}", self.domain, self.path)
        };
        format!("{name}{}", self.suffix())
    }

    /// The fully qualified name (`docker.io/library/ruby:3`).
    pub fn canonical(&self) -> String {
        format!("{}/{}{}", self.domain, self.path, self.suffix())
    }

    fn suffix(&self) -> String {
        let tag = self
            .tag
            .as_ref()
            .map(|t| format!(":{t}"))
            .unwrap_or_default();
        let digest = self
            .digest
            .as_ref()
            .map(|d| format!("@{d}"))
            .unwrap_or_default();
        format!("{tag}{digest}")
    }
}

/// Docker's `splitDockerDomain`: the first path component is a registry when it has a `.` or
/// a `:`, is `localhost`, or has an upper-case letter.
fn split_domain(s: &str) -> (String, String) {
    let (domain, remainder) = match s.split_once('/') {
        Some((first, rest))
            if first.contains(['.', ':'])
                || first == "localhost"
                || first.to_lowercase() != first =>
        {
            (first.to_string(), rest.to_string())
        }
        _ => (DEFAULT_DOMAIN.to_string(), s.to_string()),
    };
    let domain = if domain == LEGACY_DEFAULT_DOMAIN {
        DEFAULT_DOMAIN.to_string()
    } else {
        domain
    };
    let remainder = if domain == DEFAULT_DOMAIN && !remainder.contains('/') {
        format!("{OFFICIAL_PREFIX}{remainder}")
    } else {
        remainder
    };
    (domain, remainder)
}

/// The digest algorithms the Engine knows, with their hex lengths (lowercase hex only).
fn check_digest(d: &str) -> Result<(), &'static str> {
    let (algorithm, hex) = d.split_once(':').ok_or("a digest is algorithm:hex")?;
    let len = match algorithm {
        "sha256" => 64,
        "sha384" => 96,
        "sha512" => 128,
        _ => return Err("unsupported digest algorithm (use sha256, sha384 or sha512)"),
    };
    if hex.len() != len || !hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
        return Err("the digest has the wrong length or is not lowercase hex");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fam(s: &str) -> String {
        ImageRef::parse(s).unwrap().familiar()
    }

    #[test]
    fn normalises_as_docker() {
        assert_eq!(fam("ruby"), "ruby");
        assert_eq!(fam("docker.io/library/ruby:3"), "ruby:3");
        assert_eq!(fam("index.docker.io/acme/app:1"), "acme/app:1");
        assert_eq!(
            ImageRef::parse("ruby:3").unwrap().canonical(),
            "docker.io/library/ruby:3"
        );
        assert_eq!(fam("localhost:5000/a/b:1"), "localhost:5000/a/b:1");
        assert_eq!(fam("localhost/a"), "localhost/a");
        assert_eq!(fam("[::1]:5000/a"), "[::1]:5000/a");
        let d = format!("sha256:{}", "a".repeat(64));
        assert_eq!(fam(&format!("alpine:3@{d}")), format!("alpine:3@{d}"));
        // An upper-case first component is a registry, as in Docker.
        assert_eq!(fam("Registry/a"), "Registry/a");
    }

    #[test]
    fn refuses_what_a_registry_refuses() {
        let d = "a".repeat(64);
        for bad in [
            "",
            "registry.example.com/../busybox:test",
            "registry.example.com/./busybox",
            "a//b",
            "/a",
            "a/",
            "Ruby",
            "acme/App",
            "a:b:c",
            "a:-x",
            "a@sha256:abc",
            "a@md5:0123456789abcdef0123456789abcdef",
            "a b",
            "a\nb",
            "-a",
            "a..b",
            "a_-b",
            "reg.example.com:port/a",
            d.as_str(),
        ] {
            assert!(ImageRef::parse(bad).is_err(), "{bad:?} was accepted");
        }
        assert!(ImageRef::parse(&"a".repeat(256)).is_err());
        assert!(ImageRef::parse(&format!("a:{}", "t".repeat(129))).is_err());
        assert!(ImageRef::parse(&format!("a:{}", "t".repeat(128))).is_ok());
        let upper = format!("a@sha256:{}", "A".repeat(64));
        assert!(ImageRef::parse(&upper).is_err());
    }
}
