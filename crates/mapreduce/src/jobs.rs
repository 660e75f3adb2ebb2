//! The built-in jobs, named and configured by a serializable [`JobSpec`]
//! so that a driver on another machine can build the same job.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use spillway_agg::{function, AggregateFunction, Value};
use spillway_core::{bail, ensure, Result};

use crate::input::InputFormat;
use crate::job::{InputRecord, Job, Values};
use crate::map::MapOutput;
use crate::record::PairBuf;

/// A built-in job and its parameters.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "job", rename_all = "snake_case")]
pub enum JobSpec {
    /// Occurrences of every word (runs of bytes between ASCII whitespace).
    WordCount,
    /// Occurrences of every run of `n` consecutive words within a line.
    NgramCount {
        /// Words per n-gram (1 to 16).
        n: usize,
    },
    /// Every term and the sorted ids of the documents it appears in; a
    /// document is a line `id<TAB>text` (tsv input).
    InvertedIndex,
    /// Occurrences of every substring of `k` bytes of every sequence line
    /// (lines starting with `>`, FASTA headers, are skipped).
    KmerCount {
        /// Bytes per k-mer (1 to 64).
        k: usize,
    },
    /// The lines containing `pattern`, in input order.
    Grep {
        /// The bytes searched for (not a regular expression).
        pattern: String,
    },
    /// gensort records sorted by their 10-byte keys; the text output is
    /// the sorted records themselves.
    Sort,
}

impl JobSpec {
    /// The job this spec describes, its parameters checked.
    pub fn build(&self) -> Result<Arc<dyn Job>> {
        Ok(match self {
            JobSpec::WordCount => Arc::new(NgramCount {
                n: 1,
                count: function("count")?,
            }),
            JobSpec::NgramCount { n } => {
                ensure!(
                    (1..=NGRAM_WORDS_MAX).contains(n),
                    InvalidArgument,
                    "n-gram count: n must be 1 to {NGRAM_WORDS_MAX}, not {n}"
                );
                Arc::new(NgramCount {
                    n: *n,
                    count: function("count")?,
                })
            }
            JobSpec::InvertedIndex => Arc::new(InvertedIndex),
            JobSpec::KmerCount { k } => {
                ensure!(
                    (1..=64).contains(k),
                    InvalidArgument,
                    "k-mer count: k must be 1 to 64, not {k}"
                );
                Arc::new(KmerCount {
                    k: *k,
                    count: function("count")?,
                })
            }
            JobSpec::Grep { pattern } => {
                ensure!(
                    !pattern.is_empty(),
                    InvalidArgument,
                    "grep needs a pattern that is not empty"
                );
                Arc::new(Grep {
                    pattern: pattern.as_bytes().to_vec(),
                })
            }
            JobSpec::Sort => Arc::new(Sort),
        })
    }

    /// The spec named `name` with parameters from `parameter` (`n` for
    /// `ngram`, `k` for `kmer`, the pattern for `grep`).
    pub fn parse(name: &str, parameter: Option<&str>) -> Result<Self> {
        let number = |what: &str| -> Result<usize> {
            let Some(text) = parameter else {
                bail!(InvalidArgument, "job {name} needs {what}");
            };
            text.parse().map_err(|_| {
                spillway_core::Error::InvalidArgument(format!(
                    "job {name}: {what} must be a whole number, not '{text}'"
                ))
            })
        };
        Ok(match name {
            "wordcount" | "word-count" => JobSpec::WordCount,
            "ngram" | "ngram-count" => JobSpec::NgramCount { n: number("n")? },
            "inverted-index" | "index" => JobSpec::InvertedIndex,
            "kmer" | "kmer-count" => JobSpec::KmerCount { k: number("k")? },
            "grep" => match parameter {
                Some(pattern) => JobSpec::Grep { pattern: pattern.to_string() },
                None => bail!(InvalidArgument, "job grep needs a pattern"),
            },
            "sort" => JobSpec::Sort,
            _ => bail!(
                InvalidArgument,
                "unknown job '{name}'; the built-in jobs are wordcount, ngram, inverted-index, kmer, grep and sort"
            ),
        })
    }
}

/// The words of `line`: runs of bytes between ASCII whitespace.
fn words(line: &[u8]) -> impl Iterator<Item = &[u8]> {
    line.split(|byte| byte.is_ascii_whitespace())
        .filter(|word| !word.is_empty())
}

/// The most words an n-gram may have.
const NGRAM_WORDS_MAX: usize = 16;

/// Word count (`n` = 1) and n-gram count: an aggregate job, so the
/// combiner collapses repeated words within each input block.
#[derive(Debug)]
struct NgramCount {
    n: usize,
    count: Arc<dyn AggregateFunction>,
}

impl Job for NgramCount {
    fn name(&self) -> String {
        if self.n == 1 {
            "wordcount".into()
        } else {
            format!("{}-gram count", self.n)
        }
    }

    fn map(&self, record: &InputRecord<'_>, out: &mut MapOutput<'_>) -> Result<()> {
        if self.n == 1 {
            for word in words(record.value) {
                out.emit_value(word, Value::Int(1))?;
            }
            return Ok(());
        }
        // Each n-gram runs from its first word's first byte to its last
        // word's last byte, spaces as they are in the line; the last n
        // words' spans wait in a ring.
        let mut ring = [(0usize, 0usize); NGRAM_WORDS_MAX];
        for (index, word) in words(record.value).enumerate() {
            let start = word.as_ptr() as usize - record.value.as_ptr() as usize;
            ring[index % NGRAM_WORDS_MAX] = (start, start + word.len());
            if index + 1 >= self.n {
                let first = ring[(index + 1 - self.n) % NGRAM_WORDS_MAX].0;
                out.emit_value(&record.value[first..start + word.len()], Value::Int(1))?;
            }
        }
        Ok(())
    }

    fn aggregate(&self) -> Option<Arc<dyn AggregateFunction>> {
        Some(self.count.clone())
    }
}

/// k-mer count over sequence lines.
#[derive(Debug)]
struct KmerCount {
    k: usize,
    count: Arc<dyn AggregateFunction>,
}

impl Job for KmerCount {
    fn name(&self) -> String {
        format!("{}-mer count", self.k)
    }

    fn map(&self, record: &InputRecord<'_>, out: &mut MapOutput<'_>) -> Result<()> {
        if record.value.first() == Some(&b'>') {
            return Ok(());
        }
        for kmer in record.value.windows(self.k) {
            out.emit_value(kmer, Value::Int(1))?;
        }
        Ok(())
    }

    fn aggregate(&self) -> Option<Arc<dyn AggregateFunction>> {
        Some(self.count.clone())
    }
}

/// Document ids travel as one tag byte and a body, so that numeric ids
/// sort as numbers and before all others: `0` and 8 big-endian bytes for
/// an id of at most 19 decimal digits (no leading zero), `1` and the bytes
/// otherwise.
fn encode_document(id: &[u8], out: &mut [u8; 9]) -> usize {
    let numeric = !id.is_empty()
        && id.len() <= 19
        && id.iter().all(u8::is_ascii_digit)
        && (id == b"0" || id[0] != b'0');
    if numeric {
        let value = id
            .iter()
            .fold(0u64, |value, digit| value * 10 + u64::from(digit - b'0'));
        out[0] = 0;
        out[1..].copy_from_slice(&value.to_be_bytes());
        9
    } else {
        out[0] = 1;
        1
    }
}

/// Inverted index: term → the sorted, distinct ids of the documents that
/// contain it. The document ids reach reduce in order through the
/// secondary sort (the whole value is the secondary key).
#[derive(Debug)]
struct InvertedIndex;

impl Job for InvertedIndex {
    fn name(&self) -> String {
        "inverted index".into()
    }

    fn input_format(&self) -> InputFormat {
        InputFormat::Delimited { separator: b'\t' }
    }

    fn map(&self, record: &InputRecord<'_>, out: &mut MapOutput<'_>) -> Result<()> {
        let mut tag = [0u8; 9];
        let tag_len = encode_document(record.key, &mut tag);
        let id: &[u8] = if tag_len == 1 { record.key } else { &[] };
        for term in words(record.value) {
            out.emit_parts(term, &[&tag[..tag_len], id])?;
        }
        Ok(())
    }

    fn secondary_key_bytes(&self) -> usize {
        usize::MAX
    }

    fn reduce(&self, key: &[u8], values: Values<'_>, out: &mut PairBuf) -> Result<()> {
        let mut list = Vec::new();
        let mut previous: Option<&[u8]> = None;
        for value in values {
            if previous == Some(value) {
                continue;
            }
            if previous.is_some() {
                list.push(b',');
            }
            match value.split_first() {
                Some((0, number)) if number.len() == 8 => {
                    let id = u64::from_be_bytes(number.try_into().expect("8 bytes"));
                    list.extend_from_slice(id.to_string().as_bytes());
                }
                Some((_, id)) => list.extend_from_slice(id),
                None => bail!(Internal, "an inverted-index value without its tag"),
            }
            previous = Some(value);
        }
        out.push(key, &list);
        Ok(())
    }
}

/// Grep: the lines holding the pattern, keyed by (file, offset) so that
/// range partitioning writes them in input order.
#[derive(Debug)]
struct Grep {
    pattern: Vec<u8>,
}

impl Job for Grep {
    fn name(&self) -> String {
        "grep".into()
    }

    fn map(&self, record: &InputRecord<'_>, out: &mut MapOutput<'_>) -> Result<()> {
        if record
            .value
            .windows(self.pattern.len())
            .any(|window| window == self.pattern.as_slice())
        {
            let mut key = [0u8; 12];
            key[..4].copy_from_slice(&record.file.to_be_bytes());
            key[4..].copy_from_slice(&record.offset.to_be_bytes());
            out.emit(&key, record.value)?;
        }
        Ok(())
    }

    fn reduce(&self, key: &[u8], values: Values<'_>, out: &mut PairBuf) -> Result<()> {
        for value in values {
            out.push(key, value);
        }
        Ok(())
    }

    fn write_text(&self, _key: &[u8], value: &[u8], out: &mut Vec<u8>) {
        out.extend_from_slice(value);
        out.push(b'\n');
    }
}

/// Sort of gensort records: map and reduce are the identity; the text
/// output is the records as they were read, in key order.
#[derive(Debug)]
struct Sort;

impl Job for Sort {
    fn name(&self) -> String {
        "sort".into()
    }

    fn input_format(&self) -> InputFormat {
        InputFormat::Gensort
    }

    fn map(&self, record: &InputRecord<'_>, out: &mut MapOutput<'_>) -> Result<()> {
        out.emit(record.key, record.value)
    }

    fn reduce(&self, key: &[u8], values: Values<'_>, out: &mut PairBuf) -> Result<()> {
        for value in values {
            out.push(key, value);
        }
        Ok(())
    }

    fn write_text(&self, key: &[u8], value: &[u8], out: &mut Vec<u8>) {
        out.extend_from_slice(key);
        out.extend_from_slice(value);
    }
}
