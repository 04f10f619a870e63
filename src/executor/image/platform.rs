//! Image platforms (`image: docker: platform:`), read as upstream reads them with containerd's
//! platform specifiers: `<os>[(<os version>)]`, `<arch>`, `<os>/<arch>` or
//! `<os>/<arch>/<variant>`, case-insensitive, architecture aliases folded (`x86_64` → `amd64`,
//! `aarch64` → `arm64`, `armhf` → `arm/v7`, …), a missing half taken from the machine drover
//! runs on. An OS other than `linux` or `windows` is no container OS: it becomes `linux` with a
//! warning, as upstream does. Pure.

/// A parsed platform.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Platform {
    /// `linux`, `windows`.
    pub os: String,
    /// `amd64`, `arm64`, `arm`, …
    pub architecture: String,
    /// `v7`, `v8`, … or empty.
    pub variant: String,
}

impl Platform {
    /// The `os/arch[/variant]` form sent to the Engine.
    pub fn specifier(&self) -> String {
        if self.variant.is_empty() {
            format!("{}/{}", self.os, self.architecture)
        } else {
            format!("{}/{}/{}", self.os, self.architecture, self.variant)
        }
    }
}

const KNOWN_OS: &[&str] = &[
    "aix",
    "android",
    "darwin",
    "dragonfly",
    "freebsd",
    "hurd",
    "illumos",
    "ios",
    "js",
    "linux",
    "nacl",
    "netbsd",
    "openbsd",
    "plan9",
    "solaris",
    "windows",
    "zos",
];

const KNOWN_ARCH: &[&str] = &[
    "386",
    "amd64",
    "amd64p32",
    "arm",
    "armbe",
    "arm64",
    "arm64be",
    "ppc64",
    "ppc64le",
    "loong64",
    "mips",
    "mipsle",
    "mips64",
    "mips64le",
    "mips64p32",
    "mips64p32le",
    "ppc",
    "riscv",
    "riscv64",
    "s390",
    "s390x",
    "sparc",
    "sparc64",
    "wasm",
];

/// The machine drover runs on, in Go's architecture names (what upstream's binary would use).
fn host_architecture() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "x86" => "386",
        "aarch64" => "arm64",
        "powerpc64" => "ppc64le",
        "loongarch64" => "loong64",
        other => other,
    }
}

fn normalize_os(os: &str) -> String {
    match os.to_ascii_lowercase().as_str() {
        "macos" => "darwin".to_string(),
        other => other.to_string(),
    }
}

fn normalize_arch(arch: &str, variant: &str) -> (String, String) {
    let arch = arch.to_ascii_lowercase();
    let variant = variant.to_ascii_lowercase();
    let (a, v): (&str, String) = match arch.as_str() {
        "i386" => ("386", String::new()),
        "x86_64" | "x86-64" | "amd64" => (
            "amd64",
            if variant == "v1" {
                String::new()
            } else {
                variant
            },
        ),
        "aarch64" | "arm64" => (
            "arm64",
            if variant == "8" || variant == "v8" {
                String::new()
            } else {
                variant
            },
        ),
        "armhf" => ("arm", "v7".to_string()),
        "armel" => ("arm", "v6".to_string()),
        "arm" => (
            "arm",
            match variant.as_str() {
                "" | "7" => "v7".to_string(),
                "5" | "6" | "8" => format!("v{variant}"),
                _ => variant,
            },
        ),
        other => return (other.to_string(), variant),
    };
    (a.to_string(), v)
}

fn plain_component(part: &str) -> bool {
    !part.is_empty()
        && part
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-' || b == b'.')
}

/// The OS component: `name` or `name(version[+feature…])`; the version is ignored (Linux
/// images have none).
fn os_component(part: &str) -> Option<&str> {
    let name = match part.split_once('(') {
        Some((name, rest)) => {
            let inner = rest.strip_suffix(')')?;
            if inner.contains(['(', ')', '/']) {
                return None;
            }
            name
        }
        None => part,
    };
    plain_component(name).then_some(name)
}

/// A parsed platform and, when its OS was replaced by `linux`, upstream's warning.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParsedPlatform {
    /// The platform.
    pub platform: Platform,
    /// `Platform OS "darwin" in "darwin/arm64" is not a valid container OS; using "linux" instead`.
    pub warning: Option<String>,
}

/// Parses a `platform` setting as upstream does; `Ok(None)` for an empty one. The error says
/// what is wrong with the specifier.
pub fn parse(raw: &str) -> Result<Option<ParsedPlatform>, String> {
    if raw.is_empty() {
        return Ok(None);
    }
    if raw.contains('*') {
        return Err(format!(
            "{raw:?}: wildcards not yet supported: invalid argument"
        ));
    }
    let parts: Vec<&str> = raw.splitn(4, '/').collect();
    let os = os_component(parts[0]).ok_or_else(|| {
        format!(
            "{:?} is an invalid OS component of {raw:?}: expected <os>[(<os version>)] of \
             letters, digits, '_', '-', '.': invalid argument",
            parts[0]
        )
    })?;
    if let Some(bad) = parts[1..].iter().find(|p| !plain_component(p)) {
        return Err(format!(
            "{bad:?} is an invalid component of {raw:?}: expected letters, digits, '_', '-', \
             '.': invalid argument"
        ));
    }
    let os = normalize_os(os);
    let platform = match parts.as_slice() {
        [single] => {
            if KNOWN_OS.contains(&os.as_str()) {
                Platform {
                    os,
                    architecture: host_architecture().to_string(),
                    variant: String::new(),
                }
            } else {
                let (architecture, mut variant) = normalize_arch(single, "");
                if architecture == "arm" && variant == "v7" {
                    variant.clear();
                }
                if !KNOWN_ARCH.contains(&architecture.as_str()) {
                    return Err(format!(
                        "{raw:?}: unknown operating system or architecture: invalid argument"
                    ));
                }
                Platform {
                    os: "linux".to_string(),
                    architecture,
                    variant,
                }
            }
        }
        [_, arch] => {
            let (architecture, mut variant) = normalize_arch(arch, "");
            if architecture == "arm" && variant == "v7" {
                variant.clear();
            }
            Platform {
                os,
                architecture,
                variant,
            }
        }
        [_, arch, variant] => {
            let (architecture, mut variant) = normalize_arch(arch, variant);
            if architecture == "arm64" && variant.is_empty() {
                variant = "v8".to_string();
            }
            Platform {
                os,
                architecture,
                variant,
            }
        }
        _ => {
            return Err(format!(
                "{raw:?}: cannot parse platform specifier: invalid argument"
            ))
        }
    };
    Ok(Some(normalize_container_os(platform, raw)))
}

/// Only `linux` and `windows` images exist: any other OS becomes `linux`, with a warning.
fn normalize_container_os(mut platform: Platform, raw: &str) -> ParsedPlatform {
    let normalized = container_os(&platform.os);
    let warning = (normalized != platform.os).then(|| {
        format!(
            "Platform OS {:?} in {raw:?} is not a valid container OS; using {normalized:?} instead",
            platform.os
        )
    });
    platform.os = normalized.to_string();
    ParsedPlatform { platform, warning }
}

/// The container OS for an OS name: itself for `linux` and `windows`, else `linux`.
pub fn container_os(os: &str) -> &'static str {
    match os {
        "windows" => "windows",
        _ => "linux",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(raw: &str) -> String {
        parse(raw)
            .map(|p| p.map(|p| p.platform.specifier()).unwrap_or_default())
            .unwrap_or_else(|e| format!("error: {e}"))
    }

    #[test]
    fn specifiers_normalise() {
        assert_eq!(spec("linux/amd64"), "linux/amd64");
        assert_eq!(spec("Linux/X86_64"), "linux/amd64");
        assert_eq!(spec("linux/aarch64"), "linux/arm64");
        assert_eq!(spec("linux/arm64/v8"), "linux/arm64/v8");
        assert_eq!(spec("linux/arm64/8"), "linux/arm64/v8");
        assert_eq!(spec("linux/arm"), "linux/arm");
        assert_eq!(spec("linux/arm/7"), "linux/arm/v7");
        assert_eq!(spec("linux/armhf"), "linux/arm");
        assert_eq!(spec("linux/armel"), "linux/arm/v6");
        assert_eq!(spec("linux/i386"), "linux/386");
        assert_eq!(spec("arm64"), "linux/arm64");
        assert_eq!(spec("windows(10.0.17763)/amd64"), "windows/amd64");
        assert_eq!(spec(""), "");
        assert!(spec("linux/*").starts_with("error"));
        assert!(spec("nonsense").starts_with("error"));
        assert!(spec("linux/amd64/v2/x").starts_with("error"));
        assert!(spec("linux//amd64").starts_with("error"));
        assert!(spec("linux/am d64").starts_with("error"));
    }

    #[test]
    fn non_container_os_becomes_linux_with_a_warning() {
        let p = parse("darwin/arm64").ok().flatten().expect("parses");
        assert_eq!(p.platform.specifier(), "linux/arm64");
        assert_eq!(
            p.warning.as_deref(),
            Some(
                "Platform OS \"darwin\" in \"darwin/arm64\" is not a valid container OS; \
                 using \"linux\" instead"
            )
        );
        let p = parse("macos/amd64").ok().flatten().expect("parses");
        assert_eq!(p.platform.os, "linux");
        assert!(p.warning.is_some());
        let p = parse("linux/amd64").ok().flatten().expect("parses");
        assert_eq!(p.warning, None);
    }
}
