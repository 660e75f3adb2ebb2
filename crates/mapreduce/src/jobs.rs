//! The built-in jobs, named and configured by a serializable [`JobSpec`]
//! so that a driver on another machine can build the same job.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use spillway_agg::{function, AggregateFunction, Value};
use spillway_core::decimal::{decimal_digits, push_decimal};
use spillway_core::{bail, ensure, Result};

use crate::combine::BATCH_KEYS;
use crate::input::InputFormat;
use crate::job::{InputRecord, Job, MapOutput, Values};
use crate::record::PairBuf;
use crate::scan::words;

/// A built-in job and its parameters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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
    /// Click-log sessionization: lines `user<TAB>timestamp_ms<TAB>url`
    /// (tsv input) become one record per session, `user<TAB>start<TAB>
    /// end<TAB>clicks`; a session ends where a user's next click comes more
    /// than `gap_ms` later. The clicks reach reduce in time order through
    /// the secondary sort.
    Sessionize {
        /// The longest pause within a session, in milliseconds.
        gap_ms: u64,
    },
    /// PageRank's first step: an edge list (lines `src<TAB>dst`, vertex
    /// ids in decimal) becomes the graph's state, every vertex with rank
    /// `1 / vertices` and its out-neighbours. Write it as binary output
    /// for [`JobSpec::PageRank`] to read.
    PageRankInit {
        /// Vertices in the graph (the ranks' denominator).
        vertices: u64,
    },
    /// One PageRank iteration over the graph's state (binary input, as
    /// `PageRankInit` or an earlier iteration wrote it): every vertex's new
    /// rank is `(1 - damping) / vertices + damping * (sum of its
    /// in-neighbours' rank / out-degree)`. Rank held by vertices without
    /// out-edges is not redistributed. The text output is `vertex<TAB>rank`.
    PageRank {
        /// Vertices in the graph.
        vertices: u64,
        /// The damping factor (0.85 usually), in (0, 1).
        damping: f64,
    },
}

impl JobSpec {
    /// The job this spec describes, its parameters checked.
    pub fn build(&self) -> Result<Arc<dyn Job>> {
        Ok(match self {
            JobSpec::WordCount => Arc::new(NgramCount {
                n: 1,
                count: function("sum")?,
            }),
            JobSpec::NgramCount { n } => {
                ensure!(
                    (1..=NGRAM_WORDS_MAX).contains(n),
                    InvalidArgument,
                    "n-gram count: n must be 1 to {NGRAM_WORDS_MAX}, not {n}"
                );
                Arc::new(NgramCount {
                    n: *n,
                    count: function("sum")?,
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
                    count: function("sum")?,
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
            JobSpec::Sessionize { gap_ms } => Arc::new(Sessionize { gap_ms: *gap_ms }),
            JobSpec::PageRankInit { vertices } => {
                ensure!(
                    *vertices >= 1,
                    InvalidArgument,
                    "PageRank needs at least one vertex"
                );
                Arc::new(PageRankInit { vertices: *vertices })
            }
            JobSpec::PageRank { vertices, damping } => {
                ensure!(
                    *vertices >= 1,
                    InvalidArgument,
                    "PageRank needs at least one vertex"
                );
                ensure!(
                    *damping > 0.0 && *damping < 1.0,
                    InvalidArgument,
                    "PageRank's damping factor must lie between 0 and 1, not {damping}"
                );
                Arc::new(PageRank {
                    vertices: *vertices,
                    damping: *damping,
                })
            }
        })
    }

    /// The built-in job named `name` (Python's underscores and the command
    /// line's hyphens both taken, and the longer names `word-count`,
    /// `ngram-count`, `index`, `kmer-count`), with the parameters it needs
    /// from `params`; an error names a missing one.
    pub fn named(name: &str, params: &JobParams) -> Result<Self> {
        fn needs<T: Clone>(value: &Option<T>, job: &str, what: &str) -> Result<T> {
            match value {
                Some(value) => Ok(value.clone()),
                None => bail!(InvalidArgument, "job {job} needs {what}"),
            }
        }
        let name = name.replace('_', "-");
        let job = name.as_str();
        Ok(match job {
            "wordcount" | "word-count" => JobSpec::WordCount,
            "ngram" | "ngram-count" => JobSpec::NgramCount {
                n: needs(&params.n, job, "n (words per n-gram)")?,
            },
            "inverted-index" | "index" => JobSpec::InvertedIndex,
            "kmer" | "kmer-count" => JobSpec::KmerCount {
                k: needs(&params.k, job, "k (bytes per k-mer)")?,
            },
            "grep" => JobSpec::Grep {
                pattern: needs(&params.pattern, job, "pattern (the bytes searched for)")?,
            },
            "sort" => JobSpec::Sort,
            "sessionize" => JobSpec::Sessionize {
                gap_ms: needs(&params.gap_ms, job, "gap_ms (the longest pause within a session)")?,
            },
            "pagerank-init" => JobSpec::PageRankInit {
                vertices: needs(&params.vertices, job, "vertices (the vertices in the graph)")?,
            },
            "pagerank" => JobSpec::PageRank {
                vertices: needs(&params.vertices, job, "vertices (the vertices in the graph)")?,
                damping: params.damping.unwrap_or(DAMPING_DEFAULT),
            },
            _ => bail!(
                InvalidArgument,
                "unknown job '{name}'; the built-in jobs are wordcount, ngram, inverted-index, kmer, grep, sort, \
                 sessionize and pagerank"
            ),
        })
    }
}

/// The parameters of the built-in jobs as users give them, each needed by
/// some jobs only ([`JobSpec::named`]).
#[derive(Debug, Clone, Default)]
pub struct JobParams {
    /// Words per n-gram (ngram).
    pub n: Option<usize>,
    /// Bytes per k-mer (kmer).
    pub k: Option<usize>,
    /// The bytes searched for (grep).
    pub pattern: Option<String>,
    /// The longest pause within a session, in milliseconds (sessionize).
    pub gap_ms: Option<u64>,
    /// Vertices in the graph (pagerank).
    pub vertices: Option<u64>,
    /// The damping factor (pagerank; [`DAMPING_DEFAULT`] if none).
    pub damping: Option<f64>,
}

/// PageRank's usual damping factor.
pub const DAMPING_DEFAULT: f64 = 0.85;

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
            // In batches, so the combiner overlaps their lookups.
            let mut batch: [&[u8]; BATCH_KEYS] = [&[]; BATCH_KEYS];
            let mut held = 0;
            for word in words(record.value) {
                batch[held] = word;
                held += 1;
                if held == BATCH_KEYS {
                    out.emit_values(&batch, Value::Int(1))?;
                    held = 0;
                }
            }
            return out.emit_values(&batch[..held], Value::Int(1));
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
/// sort as numbers and before all others: for an id of at most 19 decimal
/// digits (no leading zero), its byte count `n` (1 to 8) and its `n`
/// significant big-endian bytes (fewer bytes, smaller number); for others,
/// [`TEXT_DOCUMENT`] and the id's bytes. A short id fits the secondary
/// sort's first 8-byte digit whole: one pass orders a term's documents.
fn encode_document(id: &[u8], out: &mut [u8; 9]) -> usize {
    let numeric = !id.is_empty()
        && id.len() <= 19
        && id.iter().all(u8::is_ascii_digit)
        && (id == b"0" || id[0] != b'0');
    if numeric {
        let value = id
            .iter()
            .fold(0u64, |value, digit| value * 10 + u64::from(digit - b'0'));
        let bytes = (8 - value.leading_zeros() as usize / 8).max(1);
        out[0] = bytes as u8;
        out[1..=bytes].copy_from_slice(&value.to_be_bytes()[8 - bytes..]);
        1 + bytes
    } else {
        out[0] = TEXT_DOCUMENT;
        1
    }
}

/// The tag of a document id that is not a number.
const TEXT_DOCUMENT: u8 = 9;

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
                Some((&TEXT_DOCUMENT, id)) => list.extend_from_slice(id),
                Some((&bytes @ 1..=8, number)) if usize::from(bytes) == number.len() => {
                    let id = number.iter().fold(0u64, |id, &byte| id << 8 | u64::from(byte));
                    push_decimal(&mut list, id);
                }
                _ => bail!(Internal, "an inverted-index value without its tag"),
            }
            previous = Some(value);
        }
        out.push(key, &list);
        Ok(())
    }
}

/// A reduce that writes every value as it came, under its key.
fn identity(key: &[u8], values: Values<'_>, out: &mut PairBuf) -> Result<()> {
    for value in values {
        out.push(key, value);
    }
    Ok(())
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
        identity(key, values, out)
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
        identity(key, values, out)
    }

    fn write_text(&self, key: &[u8], value: &[u8], out: &mut Vec<u8>) {
        out.extend_from_slice(key);
        out.extend_from_slice(value);
    }
}

/// A decimal field of an input line, or an error saying which and where
/// (the driver adds the file).
fn decimal(field: &[u8], what: &str, record: &InputRecord<'_>) -> Result<u64> {
    // What `u64::from_str` accepts (an optional `+`, then digits), without
    // its UTF-8 check: this runs once or twice per input record.
    let digits = field.strip_prefix(b"+").unwrap_or(field);
    let parsed = if digits.is_empty() {
        None
    } else if digits.len() <= 19 {
        // Nineteen digits cannot overflow: no check per digit, and one
        // test of them all at the end rather than a branch each.
        let (value, all_digits) = digits.iter().fold((0u64, true), |(value, all_digits), &byte| {
            let digit = byte.wrapping_sub(b'0');
            (
                value.wrapping_mul(10).wrapping_add(u64::from(digit)),
                all_digits & (digit < 10),
            )
        });
        all_digits.then_some(value)
    } else {
        digits.iter().try_fold(0u64, |value, &byte| {
            if !byte.is_ascii_digit() {
                return None;
            }
            value.checked_mul(10)?.checked_add(u64::from(byte - b'0'))
        })
    };
    match parsed {
        Some(value) => Ok(value),
        None => bail!(
            InvalidArgument,
            "the {what} '{}' at offset {} is not a whole number",
            String::from_utf8_lossy(&field[..field.len().min(40)]),
            record.offset
        ),
    }
}

/// Sessionization: the clicks of each user in time order, cut where the
/// pause between two clicks exceeds the gap.
#[derive(Debug)]
struct Sessionize {
    gap_ms: u64,
}

impl Job for Sessionize {
    fn name(&self) -> String {
        "sessionize".into()
    }

    fn input_format(&self) -> InputFormat {
        InputFormat::Delimited { separator: b'\t' }
    }

    fn map(&self, record: &InputRecord<'_>, out: &mut MapOutput<'_>) -> Result<()> {
        // The url is not in the output: only the time travels.
        let time = match record.value.iter().position(|&byte| byte == b'\t') {
            Some(cut) => &record.value[..cut],
            None => record.value,
        };
        let time = decimal(time, "timestamp", record)?;
        out.emit(record.key, &time.to_be_bytes())
    }

    fn secondary_key_bytes(&self) -> usize {
        8
    }

    fn reduce(&self, key: &[u8], values: Values<'_>, out: &mut PairBuf) -> Result<()> {
        let mut session: Option<(u64, u64, u64)> = None;
        let mut emit = |(start, end, clicks): (u64, u64, u64)| {
            let mut digits = [[0; 20]; 3];
            let [start_digits, end_digits, clicks_digits] = &mut digits;
            out.push_parts(
                key,
                &[
                    decimal_digits(start, start_digits),
                    b"\t",
                    decimal_digits(end, end_digits),
                    b"\t",
                    decimal_digits(clicks, clicks_digits),
                ],
            );
        };
        for value in values {
            let time = u64::from_be_bytes(value[..8].try_into().expect("map wrote 8 bytes of time"));
            session = match session {
                Some((start, end, clicks)) if time - end <= self.gap_ms => Some((start, time, clicks + 1)),
                Some(finished) => {
                    emit(finished);
                    Some((time, time, 1))
                }
                None => Some((time, time, 1)),
            };
        }
        if let Some(last) = session {
            emit(last);
        }
        Ok(())
    }
}

/// A PageRank value: a tag, then a contribution (`f64`) or the vertex's
/// state (rank `f64`, then its out-neighbours as `u64`s), little-endian.
const CONTRIBUTION: u8 = 0;
const STATE: u8 = 1;

/// A vertex id as a key: 8 bytes big-endian, so keys sort as numbers (and
/// by radix sort).
fn vertex_key(vertex: u64) -> [u8; 8] {
    vertex.to_be_bytes()
}

#[derive(Debug)]
struct PageRankInit {
    vertices: u64,
}

impl Job for PageRankInit {
    fn name(&self) -> String {
        "PageRank init".into()
    }

    fn input_format(&self) -> InputFormat {
        InputFormat::Delimited { separator: b'\t' }
    }

    fn map(&self, record: &InputRecord<'_>, out: &mut MapOutput<'_>) -> Result<()> {
        let source = decimal(record.key, "source vertex", record)?;
        let target = decimal(record.value, "target vertex", record)?;
        for vertex in [source, target] {
            // A vertex past the count would take rank that the count's
            // 1/vertices shares do not account for: ranks would no longer
            // sum to 1.
            ensure!(
                vertex < self.vertices,
                InvalidArgument,
                "the edge at offset {} names vertex {vertex}, but the graph has {} vertices (ids 0 to {}); \
                 give the number of vertices the edges use",
                record.offset,
                self.vertices,
                self.vertices - 1
            );
        }
        out.emit(&vertex_key(source), &target.to_le_bytes())?;
        // Every vertex gets a state, those without out-edges too.
        out.emit(&vertex_key(target), &[])
    }

    fn reduce(&self, key: &[u8], values: Values<'_>, out: &mut PairBuf) -> Result<()> {
        let rank = (1.0 / self.vertices as f64).to_le_bytes();
        let head: [&[u8]; 2] = [&[STATE], &rank];
        out.push_joined(key, head.into_iter().chain(values));
        Ok(())
    }
}

#[derive(Debug)]
struct PageRank {
    vertices: u64,
    damping: f64,
}

/// A vertex state's rank and out-neighbours.
fn parse_state(value: &[u8]) -> Result<(f64, &[u8])> {
    ensure!(
        value.len() >= 9 && value[0] == STATE && (value.len() - 9).is_multiple_of(8),
        InvalidArgument,
        "a PageRank vertex state of {} bytes is malformed (is the input the output of pagerank-init or pagerank?)",
        value.len()
    );
    let rank = f64::from_le_bytes(value[1..9].try_into().expect("8 bytes"));
    Ok((rank, &value[9..]))
}

impl Job for PageRank {
    fn name(&self) -> String {
        "PageRank".into()
    }

    fn input_format(&self) -> InputFormat {
        InputFormat::KeyValue
    }

    fn map(&self, record: &InputRecord<'_>, out: &mut MapOutput<'_>) -> Result<()> {
        let (rank, neighbours) = parse_state(record.value)?;
        let degree = neighbours.len() / 8;
        if degree > 0 {
            let share = (rank / degree as f64).to_le_bytes();
            for neighbour in neighbours.chunks_exact(8) {
                let neighbour = u64::from_le_bytes(neighbour.try_into().expect("8 bytes"));
                out.emit_parts(&vertex_key(neighbour), &[&[CONTRIBUTION], &share])?;
            }
        }
        out.emit(record.key, record.value)
    }

    fn reduce(&self, key: &[u8], values: Values<'_>, out: &mut PairBuf) -> Result<()> {
        let mut sum = 0.0;
        let mut neighbours: &[u8] = &[];
        for value in values {
            match value.first() {
                Some(&CONTRIBUTION) if value.len() == 9 => {
                    sum += f64::from_le_bytes(value[1..].try_into().expect("8 bytes"));
                }
                _ => neighbours = parse_state(value)?.1,
            }
        }
        let rank = (1.0 - self.damping) / self.vertices as f64 + self.damping * sum;
        out.push_parts(key, &[&[STATE], &rank.to_le_bytes(), neighbours]);
        Ok(())
    }

    fn write_text(&self, key: &[u8], value: &[u8], out: &mut Vec<u8>) {
        use std::io::Write;
        let vertex = u64::from_be_bytes(key.try_into().expect("an 8-byte vertex key"));
        let rank = f64::from_le_bytes(value[1..9].try_into().expect("a rank"));
        writeln!(out, "{vertex}\t{rank}").expect("writing to memory");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encoded_document_ids_sort_numbers_as_numbers_then_the_others() {
        // In the order the index lists them.
        let ids: [&[u8]; 10] = [
            b"0",
            b"7",
            b"255",
            b"256",
            b"65536",
            b"9999999999999999999",
            b"",
            b"007",
            b"10000000000000000000",
            b"a",
        ];
        let encoded: Vec<Vec<u8>> = ids
            .iter()
            .map(|id| {
                let mut tag = [0u8; 9];
                let tag_len = encode_document(id, &mut tag);
                let body: &[u8] = if tag_len == 1 { id } else { &[] };
                [&tag[..tag_len], body].concat()
            })
            .collect();
        assert!(encoded.windows(2).all(|pair| pair[0] < pair[1]), "{encoded:?}");
        assert!(encoded[..6].iter().all(|value| value.len() <= 9));
        assert_eq!(encoded[2], [1, 255]);
    }

    #[test]
    fn decimal_fields_parse_as_u64_from_str_does() {
        let record = InputRecord {
            key: b"",
            value: b"",
            file: 0,
            offset: 7,
        };
        for field in [
            "",
            "+",
            "0",
            "+1",
            "-1",
            "007",
            "12a",
            " 1",
            "1 ",
            "\u{e9}",
            "1600000000123",
            "9999999999999999999",
            "999999999999999999\u{7f}",
            "\u{7f}\u{7f}\u{7f}\u{7f}\u{7f}\u{7f}\u{7f}\u{7f}\u{7f}\u{7f}\u{7f}\u{7f}\u{7f}\u{7f}\u{7f}\u{7f}\u{7f}\u{7f}\u{7f}",
            "18446744073709551615",
            "18446744073709551616",
            "99999999999999999999",
        ] {
            let parsed = decimal(field.as_bytes(), "test field", &record).ok();
            assert_eq!(parsed, field.parse::<u64>().ok(), "{field:?}");
        }
        let error = decimal(b"x1", "timestamp", &record).unwrap_err().to_string();
        assert!(error.contains("timestamp 'x1' at offset 7"), "{error}");
    }
}
