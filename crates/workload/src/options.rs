//! The generators' options as `spillway gen` and `spillway.workload` name
//! them: their defaults (the parameter structs' `Default`, but for what
//! only an option says), the key-value options that combine into one
//! parameter, and the table that turns the parameter names of `validate`
//! errors back into option names.

use std::fmt;
use std::str::FromStr;

use spillway_core::{bail, Error, Result};

use crate::kv::{KeyDistribution, KvParams, OperationMix, Preset};

/// Worker threads of the text and R-MAT generators when no option says:
/// every core (the output does not depend on it).
pub const THREADS_DEFAULT: usize = 0;

/// The Zipf exponent of a zipfian key distribution when no option says (YCSB's).
pub const KV_ZIPF_S_DEFAULT: f64 = 0.99;

/// A key distribution by name, before its exponent is known.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DistributionName {
    /// [`KeyDistribution::Sequential`].
    Sequential,
    /// [`KeyDistribution::Uniform`].
    Uniform,
    /// [`KeyDistribution::Zipfian`].
    Zipfian,
}

impl FromStr for DistributionName {
    type Err = Error;

    fn from_str(text: &str) -> Result<Self> {
        match text {
            "sequential" => Ok(DistributionName::Sequential),
            "uniform" => Ok(DistributionName::Uniform),
            "zipfian" => Ok(DistributionName::Zipfian),
            _ => bail!(
                InvalidArgument,
                "unknown distribution {text:?}; expected sequential, uniform or zipfian"
            ),
        }
    }
}

impl fmt::Display for Preset {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str(self.name())
    }
}

/// The key-value generator's options: a preset and what overrides it.
#[derive(Debug, Clone, PartialEq)]
pub struct KvOptions {
    /// The db_bench benchmark imitated.
    pub preset: Preset,
    /// Operations to generate.
    pub operations: u64,
    /// Bytes per key.
    pub key_bytes: usize,
    /// Bytes per put or merge value.
    pub value_bytes: u64,
    /// Key space size (default: `operations`, at least 1).
    pub key_count: Option<u64>,
    /// Key distribution (default: the preset's).
    pub distribution: Option<DistributionName>,
    /// Zipf exponent, for a zipfian distribution only (default
    /// [`KV_ZIPF_S_DEFAULT`]).
    pub zipf_s: Option<f64>,
    /// Whether a zipfian distribution scatters its hot keys.
    pub scrambled: bool,
    /// Operation mix (default: the preset's).
    pub mix: Option<OperationMix>,
    /// Compressed over raw size of values.
    pub compression_ratio: f64,
    /// The seed of every draw.
    pub seed: u64,
}

impl Default for KvOptions {
    fn default() -> Self {
        let params = KvParams::default();
        KvOptions {
            preset: Preset::FillRandom,
            operations: params.operations,
            key_bytes: params.key_bytes,
            value_bytes: params.value_bytes as u64,
            key_count: None,
            distribution: None,
            zipf_s: None,
            scrambled: true,
            mix: None,
            compression_ratio: params.compression_ratio,
            seed: params.seed,
        }
    }
}

impl KvOptions {
    /// The parameters these options give. An exponent without a zipfian
    /// distribution is refused (it would be ignored); the parameters
    /// themselves are checked by [`KvParams::validate`].
    pub fn params(&self) -> Result<KvParams> {
        let mut params = KvParams::preset(self.preset, self.operations);
        params.key_bytes = self.key_bytes;
        // Past usize (32-bit targets only) is past the limit too.
        params.value_bytes = usize::try_from(self.value_bytes).unwrap_or(usize::MAX);
        params.key_count = self.key_count.unwrap_or(self.operations.max(1));
        params.distribution = match self.distribution {
            Some(DistributionName::Sequential) => KeyDistribution::Sequential,
            Some(DistributionName::Uniform) => KeyDistribution::Uniform,
            Some(DistributionName::Zipfian) => KeyDistribution::Zipfian {
                exponent: self.zipf_s.unwrap_or(KV_ZIPF_S_DEFAULT),
                scrambled: self.scrambled,
            },
            None => params.distribution,
        };
        if self.zipf_s.is_some() && !matches!(params.distribution, KeyDistribution::Zipfian { .. }) {
            bail!(
                InvalidArgument,
                "zipfian exponent applies to the zipfian distribution, but the distribution is {}",
                params.distribution.name()
            );
        }
        if let Some(mix) = self.mix {
            params.mix = mix;
        }
        params.compression_ratio = self.compression_ratio;
        params.seed = self.seed;
        Ok(params)
    }
}

/// The option that sets each parameter, per generator: `(generator,
/// parameter, option)`, where `parameter` is the name (a word or phrase)
/// that `validate` errors use and `option` the keyword (`zipf_s`; the
/// command line's flag is `--zipf-s`). The one place where the two
/// vocabularies meet; single letters (R-MAT's `a`, `b`, `c`) are safe
/// because only that generator's messages are rewritten with its rows.
pub const OPTION_NAMES: &[(&str, &str, &str)] = &[
    ("kv", "operations", "ops"),
    ("kv", "key_bytes", "key_bytes"),
    ("kv", "value_bytes", "value_bytes"),
    ("kv", "key_count", "keys"),
    ("kv", "zipfian exponent", "zipf_s"),
    ("kv", "mix", "mix"),
    ("kv", "compression_ratio", "compression_ratio"),
    ("text", "vocabulary_words", "vocabulary"),
    ("text", "zipf_exponent", "zipf_s"),
    ("text", "words_per_line", "words_per_line"),
    ("rmat", "scale", "scale"),
    ("rmat", "edge_factor", "edge_factor"),
    ("rmat", "a", "a"),
    ("rmat", "b", "b"),
    ("rmat", "c", "c"),
    ("clicks", "users", "users"),
    ("clicks", "urls", "urls"),
    ("clicks", "user_zipf_exponent", "user_zipf_s"),
    ("clicks", "url_zipf_exponent", "url_zipf_s"),
    ("clicks", "clicks_per_session_mean", "clicks_per_session"),
    ("clicks", "click_gap_ms_mean", "click_gap_ms"),
    ("clicks", "session_timeout_ms", "session_timeout_ms"),
    ("clicks", "session_arrival_gap_ms_mean", "arrival_gap_ms"),
    ("clicks", "start_timestamp_ms", "start_ms"),
];

/// `message` with each parameter name of `generator` that stands as a whole
/// word (not inside a longer identifier) replaced by its option as `spell`
/// writes it, in one pass.
pub fn name_options(generator: &str, message: &str, spell: impl Fn(&str) -> String) -> String {
    let is_word = |character: char| character.is_ascii_alphanumeric() || character == '_';
    let mut named = String::with_capacity(message.len() + 16);
    let mut rest = message;
    let mut previous: Option<char> = None;
    while let Some(character) = rest.chars().next() {
        if previous.is_none_or(|previous| !is_word(previous)) {
            let parameter = OPTION_NAMES.iter().find(|(owner, parameter, _)| {
                *owner == generator
                    && rest.starts_with(parameter)
                    && !rest[parameter.len()..].starts_with(is_word)
            });
            if let Some((_, parameter, option)) = parameter {
                named.push_str(&spell(option));
                rest = &rest[parameter.len()..];
                previous = parameter.chars().last();
                continue;
            }
        }
        named.push(character);
        rest = &rest[character.len_utf8()..];
        previous = Some(character);
    }
    named
}

/// A generator's error with its parameter names replaced by options (as
/// `spell` writes them) when it is about the arguments; others as they are.
pub fn with_option_names(generator: &str, error: Error, spell: impl Fn(&str) -> String) -> Error {
    match error {
        Error::InvalidArgument(message) => Error::InvalidArgument(name_options(generator, &message, spell)),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clicks::ClickParams;
    use crate::rmat::RmatParams;
    use crate::text::TextParams;

    fn flag(option: &str) -> String {
        format!("--{}", option.replace('_', "-"))
    }

    #[test]
    fn parameter_names_become_options_as_whole_words_only() {
        assert_eq!(
            name_options(
                "kv",
                "key_count 70000 does not fit in key_bytes 2 (at most 65536 keys)",
                flag
            ),
            "--keys 70000 does not fit in --key-bytes 2 (at most 65536 keys)"
        );
        // The article "a" is not R-MAT's parameter a outside R-MAT.
        assert_eq!(
            name_options(
                "kv",
                "key_count must be at most 2^53 for a zipfian distribution, got 3",
                flag
            ),
            "--keys must be at most 2^53 for a zipfian distribution, got 3"
        );
        assert_eq!(
            name_options("kv", "zipfian exponent must be > 0, got -1", str::to_string),
            "zipf_s must be > 0, got -1"
        );
        assert_eq!(
            name_options(
                "rmat",
                "a + b + c must be at most 1, got 0.6 + 0.3 + 0.19 = 1.09",
                flag
            ),
            "--a + --b + --c must be at most 1, got 0.6 + 0.3 + 0.19 = 1.09"
        );
        // Inside longer identifiers nothing changes: `users` in
        // `user_zipf_exponent` is not the parameter users.
        assert_eq!(
            name_options(
                "clicks",
                "user_zipf_exponent must be > 0; users must be at least 1",
                flag
            ),
            "--user-zipf-s must be > 0; --users must be at least 1"
        );
        assert_eq!(
            name_options("clicks", "start_timestamp_ms must be at most 2^62", flag),
            "--start-ms must be at most 2^62"
        );
        assert_eq!(name_options("text", "nothing to name", flag), "nothing to name");
    }

    #[test]
    fn every_parameter_error_names_an_option() {
        let kv = KvOptions {
            key_count: Some(1 << 54),
            distribution: Some(DistributionName::Zipfian),
            ..KvOptions::default()
        };
        let text = TextParams {
            words_per_line: 0,
            ..TextParams::default()
        };
        let rmat = RmatParams {
            edge_factor: 0,
            ..RmatParams::default()
        };
        let clicks = ClickParams {
            session_arrival_gap_ms_mean: 0.0,
            ..ClickParams::default()
        };
        for (generator, error, option) in [
            ("kv", kv.params().unwrap().validate(), "--keys"),
            ("text", text.validate(), "--words-per-line"),
            ("rmat", rmat.validate(), "--edge-factor"),
            ("clicks", clicks.validate(), "--arrival-gap-ms"),
        ] {
            let message = with_option_names(generator, error.unwrap_err(), flag).to_string();
            assert!(
                message.starts_with(&format!("invalid argument: {option} must be")),
                "{message}"
            );
        }
    }

    #[test]
    fn an_exponent_needs_the_zipfian_distribution() {
        let options = KvOptions {
            zipf_s: Some(1.2),
            ..KvOptions::default()
        };
        let error = with_option_names("kv", options.params().unwrap_err(), flag).to_string();
        assert!(
            error.contains("--zipf-s applies to the zipfian distribution"),
            "{error}"
        );
        let zipfian = KvOptions {
            distribution: Some(DistributionName::Zipfian),
            ..options
        };
        assert!(matches!(
            zipfian.params().unwrap().distribution,
            KeyDistribution::Zipfian { exponent, scrambled: true } if exponent == 1.2
        ));
    }
}
