//! The simulated machine provider: how long creations and removals take and how often they fail.
//!
//! Each draw is a pure function of the seed, the kind of operation and its ordinal (the n-th
//! creation, the n-th removal), so a run is repeatable for a seed, and two configs compared on
//! one seed see the same latency for their n-th creation. This module does not decide when
//! machines are created or removed; the engine does, and [`crate::sim`] asks this model what
//! happens next.

use std::fmt;
use std::str::FromStr;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::queue::{secs_to_ms, SimTime};

/// A latency: a fixed value or a seeded distribution.
#[derive(Debug, Clone, PartialEq)]
pub enum Latency {
    /// Always this many milliseconds.
    Fixed(SimTime),
    /// Uniformly distributed between the two bounds (milliseconds, inclusive).
    Uniform(SimTime, SimTime),
    /// Exponentially distributed with this mean (milliseconds).
    Exponential(SimTime),
    /// Drawn uniformly from these observed values (milliseconds; e.g. the creation times an
    /// upstream log shows). Empty means 0.
    Empirical(std::sync::Arc<[SimTime]>),
}

/// A latency or failure-rate specification that could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid {what} {value:?}: {hint}")]
pub struct ModelError {
    what: &'static str,
    value: String,
    hint: &'static str,
}

const LATENCY_HINT: &str =
    "use seconds up to a day (`90`, `90s`), `uniform:60-120` (seconds) or `exp:90` (mean)";

/// The longest latency accepted: a day.
const MAX_LATENCY: SimTime = 86_400 * 1000;

fn seconds(text: &str) -> Option<SimTime> {
    let t = text.trim();
    let t = t.strip_suffix('s').unwrap_or(t);
    secs_to_ms(t.parse::<f64>().ok()?).filter(|ms| *ms <= MAX_LATENCY)
}

impl FromStr for Latency {
    type Err = ModelError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = || ModelError {
            what: "latency",
            value: s.to_string(),
            hint: LATENCY_HINT,
        };
        if let Some(range) = s.strip_prefix("uniform:") {
            let (a, b) = range.split_once('-').ok_or_else(err)?;
            let (a, b) = (seconds(a).ok_or_else(err)?, seconds(b).ok_or_else(err)?);
            if a > b {
                return Err(err());
            }
            Ok(Latency::Uniform(a, b))
        } else if let Some(mean) = s.strip_prefix("exp:") {
            Ok(Latency::Exponential(seconds(mean).ok_or_else(err)?))
        } else {
            Ok(Latency::Fixed(seconds(s).ok_or_else(err)?))
        }
    }
}

impl fmt::Display for Latency {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = |ms: SimTime| ms as f64 / 1000.0;
        match *self {
            Latency::Fixed(ms) => write!(f, "{}s", s(ms)),
            Latency::Uniform(a, b) => write!(f, "uniform:{}-{}", s(a), s(b)),
            Latency::Exponential(m) => write!(f, "exp:{}", s(m)),
            Latency::Empirical(ref v) => write!(f, "observed:{} values", v.len()),
        }
    }
}

impl Latency {
    /// Draws one latency from `rng`.
    fn draw(&self, rng: &mut ChaCha8Rng) -> SimTime {
        match *self {
            Latency::Fixed(ms) => ms,
            Latency::Uniform(a, b) => rng.random_range(a..=b),
            Latency::Exponential(mean) => {
                // Inverse CDF; `1 - u` lies in (0, 1], so the logarithm is finite.
                let u: f64 = rng.random();
                let x = -(1.0 - u).ln() * mean as f64;
                // Cap at 100 means so one unlucky draw cannot stall a run for years.
                x.min(mean as f64 * 100.0).round() as SimTime
            }
            Latency::Empirical(ref v) => match v.len() {
                0 => 0,
                n => v[rng.random_range(0..n)],
            },
        }
    }
}

/// Parses a failure probability between 0 and 1.
pub fn parse_rate(s: &str) -> Result<f64, ModelError> {
    match s.trim().parse::<f64>() {
        Ok(r) if (0.0..=1.0).contains(&r) => Ok(r),
        _ => Err(ModelError {
            what: "failure rate",
            value: s.to_string(),
            hint: "use a probability between 0 and 1, such as 0.02",
        }),
    }
}

/// The outcome of one simulated provider operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Outcome {
    /// How long the operation takes, in milliseconds.
    pub latency: SimTime,
    /// Whether it fails at the end of that time.
    pub fails: bool,
}

/// Latencies and failure rates of the simulated provider.
#[derive(Debug, Clone, PartialEq)]
pub struct ProviderModel {
    /// Time from a create command to a running (or failed) machine.
    pub create_latency: Latency,
    /// Probability that a creation fails.
    pub create_failure_rate: f64,
    /// Time from a remove command to the machine being gone (or the attempt failing).
    pub remove_latency: Latency,
    /// Probability that a removal attempt fails.
    pub remove_failure_rate: f64,
    /// Seed of every draw.
    pub seed: u64,
}

impl Default for ProviderModel {
    /// Cloud-VM-like defaults: creations take 60–120 s, removals 10 s, nothing fails.
    fn default() -> Self {
        Self {
            create_latency: Latency::Uniform(60_000, 120_000),
            create_failure_rate: 0.0,
            remove_latency: Latency::Fixed(10_000),
            remove_failure_rate: 0.0,
            seed: 1,
        }
    }
}

/// Which kind of operation a draw is for; each has its own random stream.
#[derive(Debug, Clone, Copy)]
enum Stream {
    Create = 1,
    Remove = 2,
}

/// SplitMix64 finaliser: spreads (seed, stream, ordinal) over the seed space.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

impl ProviderModel {
    fn rng(&self, stream: Stream, ordinal: u64) -> ChaCha8Rng {
        let seed = mix(mix(self.seed ^ mix(stream as u64)) ^ ordinal);
        ChaCha8Rng::seed_from_u64(seed)
    }

    /// The outcome of the `ordinal`-th creation (counting from 0).
    pub fn creation(&self, ordinal: u64) -> Outcome {
        let mut rng = self.rng(Stream::Create, ordinal);
        let latency = self.create_latency.draw(&mut rng);
        let fails =
            self.create_failure_rate > 0.0 && rng.random::<f64>() < self.create_failure_rate;
        Outcome { latency, fails }
    }

    /// The outcome of the `ordinal`-th removal attempt (counting from 0).
    pub fn removal(&self, ordinal: u64) -> Outcome {
        let mut rng = self.rng(Stream::Remove, ordinal);
        let latency = self.remove_latency.draw(&mut rng);
        let fails =
            self.remove_failure_rate > 0.0 && rng.random::<f64>() < self.remove_failure_rate;
        Outcome { latency, fails }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_latencies() {
        assert_eq!("90".parse(), Ok(Latency::Fixed(90_000)));
        assert_eq!("1.5s".parse(), Ok(Latency::Fixed(1_500)));
        assert_eq!(
            "uniform:60-120".parse(),
            Ok(Latency::Uniform(60_000, 120_000))
        );
        assert_eq!("exp:30".parse(), Ok(Latency::Exponential(30_000)));
        assert!("uniform:120-60".parse::<Latency>().is_err());
        assert!("fast".parse::<Latency>().is_err());
        assert!("-3".parse::<Latency>().is_err());
        assert!("1e9".parse::<Latency>().is_err());
        assert_eq!(parse_rate("0.25"), Ok(0.25));
        assert!(parse_rate("1.5").is_err());
        assert!(parse_rate("x").is_err());
    }

    #[test]
    fn draws_are_a_function_of_seed_and_ordinal() {
        let model = ProviderModel {
            create_failure_rate: 0.5,
            ..ProviderModel::default()
        };
        let a: Vec<_> = (0..50).map(|n| model.creation(n)).collect();
        let b: Vec<_> = (0..50).rev().map(|n| model.creation(n)).collect();
        let b: Vec<_> = b.into_iter().rev().collect();
        assert_eq!(a, b, "order of draws must not matter");
        assert!(a.iter().all(|o| (60_000..=120_000).contains(&o.latency)));
        let failures = a.iter().filter(|o| o.fails).count();
        assert!(
            (10..=40).contains(&failures),
            "{failures} of 50 failed at rate 0.5"
        );
        let other = ProviderModel {
            seed: 2,
            ..model.clone()
        };
        assert_ne!(a, (0..50).map(|n| other.creation(n)).collect::<Vec<_>>());
    }

    #[test]
    fn exponential_has_roughly_its_mean() {
        let model = ProviderModel {
            remove_latency: Latency::Exponential(10_000),
            ..ProviderModel::default()
        };
        let total: u64 = (0..2000).map(|n| model.removal(n).latency).sum();
        let mean = total / 2000;
        assert!((8_500..=11_500).contains(&mean), "mean {mean}");
        assert!(!(0..2000).any(|n| model.removal(n).fails));
    }
}
