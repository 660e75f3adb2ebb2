//! Zipf-distributed text for word count and n-gram benchmarks.
//!
//! Words are drawn from a [`Vocabulary`] of synthetic, pronounceable words
//! with a Zipf law over ranks (rank 1 = word 0 is the most frequent), so the
//! rank-frequency curve looks like natural language (s ≈ 1) while the data
//! can be any size.
//!
//! # Stream format
//! The text is a sequence of lines of `words_per_line` words separated by one
//! space and ended by `'\n'` (UTF-8, in fact ASCII). Lines are grouped into
//! blocks of `lines_per_block = max(1, 131072 / words_per_line)` lines; block
//! `b` draws its words, line by line, from [`Rng::stream`]`(seed, b)`:
//! one [`Zipf::sample`] per word, word index = rank - 1. Blocks depend only on
//! their index, so any number of threads builds them and they are written in
//! order: the output does not depend on the thread count.
//!
//! Size: [`TextSize::Lines`]`(n)` writes exactly `n` lines;
//! [`TextSize::Bytes`]`(n)` writes the shortest prefix of the line stream that
//! is at least `n` bytes long (so it ends at a line boundary and overshoots by
//! less than one line).

use std::io::Write;

use serde::Serialize;
use spillway_core::{ensure, Result};

use crate::blocks::for_each_block;
use crate::permutation::Permutation;
use crate::rng::{mix64, Rng};
use crate::sink::ChunkedSink;
use crate::zipf::Zipf;
use crate::DEFAULT_SEED;

/// The largest vocabulary: about 130 MiB of words at the average length.
pub const VOCABULARY_WORDS_MAX: u64 = 1 << 24;
/// The longest line, in words.
pub const WORDS_PER_LINE_MAX: u32 = 1 << 16;
/// Words per block (before rounding to whole lines): about 1 MiB of text,
/// large enough to amortize a thread hand-off, small enough to keep
/// `threads * 3` blocks in memory.
pub const BLOCK_WORDS: u64 = 1 << 17;

const CONSONANTS: &[u8; 20] = b"bcdfghjklmnprstvwxyz";
const VOWELS: &[u8; 5] = b"aeiou";
/// The shortest word.
pub const WORD_LETTERS_MIN: usize = 2;
/// The longest word.
pub const WORD_LETTERS_MAX: usize = 12;
/// Relative frequency (percent) of word lengths 2, 3, ..., 12 among
/// vocabulary entries, shaped like English dictionary words.
const LENGTH_PERCENTS: [u64; WORD_LETTERS_MAX - WORD_LETTERS_MIN + 1] =
    [4, 8, 12, 14, 14, 12, 10, 8, 7, 6, 5];
const _: () = {
    let mut total = 0;
    let mut index = 0;
    while index < LENGTH_PERCENTS.len() {
        total += LENGTH_PERCENTS[index];
        index += 1;
    }
    assert!(total == 100);
};
/// Mixed into word indices before hashing so that word lengths are not
/// correlated with other uses of [`mix64`].
const LENGTH_SALT: u64 = 0x7E87_4C1A_55E5_0000;

/// Words of `length` letters: consonant-vowel alternation starting with a
/// consonant gives `20 * 5 * 20 * ...` distinct words.
fn length_capacity(length: usize) -> u64 {
    (0..length)
        .map(|position| if position % 2 == 0 { 20u64 } else { 5 })
        .product()
}

/// A list of distinct pronounceable words, `word(0)`, `word(1)`, ...
///
/// # Construction
/// Word `i` first gets a length `L` in 2..=12 from `mix64(i ^ salt) % 100`
/// through the cumulative length percentages (if all `L`-letter words are
/// used up, the next longer length). It is the `c`-th word of that length,
/// where `c` counts earlier words of length `L`; `c` goes through a fixed
/// [`Permutation`] of the `L`-letter words and the result, written in mixed
/// radix (20 consonants, 5 vowels, alternating), spells the word. Within a
/// length the permutation makes words distinct; across lengths the length
/// does. Word `i` depends only on `i` (a vocabulary of 1000 words is the
/// first 1000 of a vocabulary of 10^6), not on any seed, so corpora of
/// different seeds share their words.
#[derive(Debug, Clone)]
pub struct Vocabulary {
    bytes: Vec<u8>,
    offsets: Vec<u32>,
}

impl Vocabulary {
    /// The first `words` words.
    pub fn new(words: u64) -> Result<Self> {
        ensure!(
            (1..=VOCABULARY_WORDS_MAX).contains(&words),
            InvalidArgument,
            "vocabulary must hold 1..={VOCABULARY_WORDS_MAX} words, got {words}"
        );
        let permutations: Vec<Permutation> = (0..=WORD_LETTERS_MAX)
            .map(|length| Permutation::new(length_capacity(length).max(1), length as u64))
            .collect::<Result<_>>()?;
        let mut used = [0u64; WORD_LETTERS_MAX + 1];
        let mut bytes = Vec::with_capacity(words as usize * 7);
        let mut offsets = Vec::with_capacity(words as usize + 1);
        offsets.push(0);
        for index in 0..words {
            let mut draw = mix64(index ^ LENGTH_SALT) % 100;
            let mut length = WORD_LETTERS_MIN;
            for percent in LENGTH_PERCENTS {
                if draw < percent {
                    break;
                }
                draw -= percent;
                length += 1;
            }
            while used[length] == length_capacity(length) {
                length += 1; // Never passes 12: 10^12 twelve-letter words.
            }
            let mut spelled = permutations[length].apply(used[length]);
            used[length] += 1;
            for position in 0..length {
                let letter = if position % 2 == 0 {
                    let letter = CONSONANTS[(spelled % 20) as usize];
                    spelled /= 20;
                    letter
                } else {
                    let letter = VOWELS[(spelled % 5) as usize];
                    spelled /= 5;
                    letter
                };
                bytes.push(letter);
            }
            offsets.push(bytes.len() as u32);
        }
        Ok(Vocabulary { bytes, offsets })
    }

    /// The number of words.
    pub fn len(&self) -> usize {
        self.offsets.len() - 1
    }

    /// Always false: a vocabulary holds at least one word.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Word `index` (0-based; word 0 is rank 1 in the text).
    #[inline]
    pub fn word(&self, index: usize) -> &[u8] {
        &self.bytes[self.offsets[index] as usize..self.offsets[index + 1] as usize]
    }

    /// Word `index` as a string slice (words are ASCII letters).
    pub fn word_str(&self, index: usize) -> &str {
        std::str::from_utf8(self.word(index)).expect("vocabulary words are ASCII")
    }
}

/// How much text to generate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TextSize {
    /// At least this many bytes, ending at the first line end at or after it.
    Bytes(u64),
    /// Exactly this many lines.
    Lines(u64),
}

/// Everything that determines a text (except `threads`, which only changes
/// the speed).
#[derive(Debug, Clone, PartialEq)]
pub struct TextParams {
    /// How much to generate.
    pub size: TextSize,
    /// Words in the vocabulary (default 100 000).
    pub vocabulary_words: u64,
    /// Zipf exponent over ranks (default 1.0, natural language).
    pub zipf_exponent: f64,
    /// Words per line (default 10).
    pub words_per_line: u32,
    /// Threads building blocks: 0 = every core the process may use (as
    /// [`spillway_core::worker_threads`]), 1 = the calling thread only;
    /// capped at the blocks to build and at [`THREADS_MAX`](crate::THREADS_MAX)
    /// (see [`worker_count`](crate::worker_count)). The output does not
    /// depend on it.
    pub threads: usize,
    /// The seed all draws derive from.
    pub seed: u64,
}

impl Default for TextParams {
    fn default() -> Self {
        TextParams {
            size: TextSize::Bytes(1 << 20),
            vocabulary_words: 100_000,
            zipf_exponent: 1.0,
            words_per_line: 10,
            threads: 1,
            seed: DEFAULT_SEED,
        }
    }
}

impl TextParams {
    /// Checks every parameter; errors name the parameter and its value.
    /// [`TextGenerator::new`] and [`write_text`] fail only where this does
    /// (or on a write error, or when no worker thread can be started).
    pub fn validate(&self) -> Result<()> {
        ensure!(
            (1..=VOCABULARY_WORDS_MAX).contains(&self.vocabulary_words),
            InvalidArgument,
            "vocabulary_words must be in 1..={VOCABULARY_WORDS_MAX}, got {}",
            self.vocabulary_words
        );
        ensure!(
            self.zipf_exponent.is_finite() && self.zipf_exponent > 0.0,
            InvalidArgument,
            "zipf_exponent must be > 0, got {}",
            self.zipf_exponent
        );
        ensure!(
            (1..=WORDS_PER_LINE_MAX).contains(&self.words_per_line),
            InvalidArgument,
            "words_per_line must be in 1..={WORDS_PER_LINE_MAX}, got {}",
            self.words_per_line
        );
        Ok(())
    }
}

/// What [`write_text`] produced.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct TextSummary {
    /// Lines written.
    pub records: u64,
    /// Bytes written.
    pub bytes: u64,
    /// Words written.
    pub words: u64,
    /// Distinct words among them: the number of output rows of a word count.
    pub distinct_words: u64,
}

/// The block-level (batch) API of the text generator, for callers that want
/// text in memory (a MapReduce benchmark feeding its input stage directly).
#[derive(Debug, Clone)]
pub struct TextGenerator {
    params: TextParams,
    vocabulary: Vocabulary,
    zipf: Zipf,
}

impl TextGenerator {
    /// A generator for `params`; builds the vocabulary. Fails only when
    /// [`TextParams::validate`] does.
    pub fn new(params: &TextParams) -> Result<Self> {
        params.validate()?;
        Ok(TextGenerator {
            vocabulary: Vocabulary::new(params.vocabulary_words)?,
            zipf: Zipf::new(params.vocabulary_words, params.zipf_exponent)?,
            params: params.clone(),
        })
    }

    /// The vocabulary words are drawn from.
    pub fn vocabulary(&self) -> &Vocabulary {
        &self.vocabulary
    }

    /// Lines in each full block.
    pub fn lines_per_block(&self) -> u64 {
        (BLOCK_WORDS / u64::from(self.params.words_per_line)).max(1)
    }

    /// Appends the first `lines` lines of block `index` to `text` and, when
    /// given, their word indices to `words`. Lines `0..lines_per_block()` of
    /// block `b` are lines `b * lines_per_block() + ..` of the text.
    pub fn append_block(&self, index: u64, lines: u64, text: &mut Vec<u8>, mut words: Option<&mut Vec<u32>>) {
        let mut rng = Rng::stream(self.params.seed, index);
        for _ in 0..lines {
            for position in 0..self.params.words_per_line {
                if position > 0 {
                    text.push(b' ');
                }
                let word = (self.zipf.sample(&mut rng) - 1) as usize;
                text.extend_from_slice(self.vocabulary.word(word));
                if let Some(words) = words.as_deref_mut() {
                    words.push(word as u32);
                }
            }
            text.push(b'\n');
        }
    }
}

struct TextBlock {
    text: Vec<u8>,
    words: Vec<u32>,
}

/// Writes the text of `params` to `writer` (block by block, about 1 MiB per
/// write, built on [`worker_count`](crate::worker_count)`(params.threads, blocks)`
/// threads) and returns what was written.
pub fn write_text(params: &TextParams, writer: impl Write) -> Result<TextSummary> {
    let generator = TextGenerator::new(params)?;
    let lines_per_block = generator.lines_per_block();
    let words_per_line = u64::from(params.words_per_line);
    // A word has at least WORD_LETTERS_MIN letters and is followed by a space
    // or the line end, so a block has at least this many bytes and a byte
    // target is reached within `target / block_bytes_min` blocks (rounded
    // up). Counting them keeps a small target from starting idle workers.
    let block_bytes_min = (WORD_LETTERS_MIN as u64 + 1) * words_per_line * lines_per_block;
    let (block_count, last_block_lines) = match params.size {
        TextSize::Bytes(0) | TextSize::Lines(0) => (0, 0),
        TextSize::Bytes(target) => (target.div_ceil(block_bytes_min), lines_per_block),
        TextSize::Lines(lines) => (
            lines.div_ceil(lines_per_block),
            lines - (lines.div_ceil(lines_per_block) - 1) * lines_per_block,
        ),
    };
    let mut sink = ChunkedSink::new(writer, "text");
    let mut summary = TextSummary::default();
    let mut seen = vec![0u64; params.vocabulary_words.div_ceil(64) as usize];
    let make = |index: u64| {
        let lines = if index + 1 == block_count {
            last_block_lines
        } else {
            lines_per_block
        };
        let mut block = TextBlock {
            text: Vec::with_capacity((lines * words_per_line * 8) as usize),
            words: Vec::with_capacity((lines * words_per_line) as usize),
        };
        generator.append_block(index, lines, &mut block.text, Some(&mut block.words));
        block
    };
    for_each_block(params.threads, block_count, make, |_, block| {
        let (text, more) = match params.size {
            TextSize::Bytes(target) if summary.bytes + block.text.len() as u64 >= target => {
                // The line holding byte `target - 1` of the output is the last.
                let last_byte = (target - summary.bytes - 1) as usize;
                let end = last_byte
                    + block.text[last_byte..]
                        .iter()
                        .position(|&byte| byte == b'\n')
                        .expect("blocks end with a newline");
                (&block.text[..=end], false)
            }
            _ => (&block.text[..], true),
        };
        let lines = if more {
            block.words.len() as u64 / words_per_line
        } else {
            text.iter().filter(|&&byte| byte == b'\n').count() as u64
        };
        for &word in &block.words[..(lines * words_per_line) as usize] {
            let slot = &mut seen[word as usize / 64];
            let bit = 1u64 << (word % 64);
            summary.distinct_words += u64::from(*slot & bit == 0);
            *slot |= bit;
        }
        sink.write_block(text)?;
        summary.records += lines;
        summary.words += lines * words_per_line;
        summary.bytes += text.len() as u64;
        Ok(more)
    })?;
    let written = sink.finish()?;
    debug_assert_eq!(written, summary.bytes);
    Ok(summary)
}

#[cfg(test)]
mod tests {
    use std::collections::{HashMap, HashSet};

    use super::*;

    fn generate(params: &TextParams) -> (Vec<u8>, TextSummary) {
        let mut output = Vec::new();
        let summary = write_text(params, &mut output).unwrap();
        (output, summary)
    }

    #[test]
    fn vocabulary_words_are_distinct_pronounceable_and_prefix_stable() {
        let vocabulary = Vocabulary::new(200_000).unwrap();
        let mut distinct = HashSet::new();
        let mut lengths = [0u32; WORD_LETTERS_MAX + 1];
        for index in 0..vocabulary.len() {
            let word = vocabulary.word(index);
            assert!(
                distinct.insert(word),
                "duplicate word {:?}",
                vocabulary.word_str(index)
            );
            lengths[word.len()] += 1;
            for (position, letter) in word.iter().enumerate() {
                let alphabet: &[u8] = if position % 2 == 0 { CONSONANTS } else { VOWELS };
                assert!(alphabet.contains(letter));
            }
        }
        assert_eq!(lengths[0] + lengths[1], 0);
        assert!(lengths[2..].iter().all(|&count| count > 0), "{lengths:?}");
        let small = Vocabulary::new(1000).unwrap();
        assert!((0..1000).all(|index| small.word(index) == vocabulary.word(index)));
    }

    #[test]
    fn byte_target_ends_at_the_first_line_end_after_it() {
        let params = TextParams {
            size: TextSize::Bytes(10_000),
            ..TextParams::default()
        };
        let (text, summary) = generate(&params);
        assert!(text.len() >= 10_000);
        assert_eq!(text.last(), Some(&b'\n'));
        // Dropping the last line goes below the target.
        let previous_end = text[..text.len() - 1]
            .iter()
            .rposition(|&byte| byte == b'\n')
            .unwrap();
        assert!(previous_end + 1 < 10_000);
        assert_eq!(summary.bytes, text.len() as u64);
        let lines: Vec<&[u8]> = text
            .split(|&byte| byte == b'\n')
            .filter(|line| !line.is_empty())
            .collect();
        assert_eq!(summary.records, lines.len() as u64);
        assert!(lines
            .iter()
            .all(|line| line.split(|&byte| byte == b' ').count() == 10));
        assert_eq!(summary.words, 10 * summary.records);
    }

    #[test]
    fn line_target_is_exact_across_block_boundaries() {
        let params = TextParams {
            size: TextSize::Lines(30_000),
            words_per_line: 7,
            vocabulary_words: 500,
            ..TextParams::default()
        };
        let (text, summary) = generate(&params);
        assert_eq!(summary.records, 30_000);
        assert_eq!(text.iter().filter(|&&byte| byte == b'\n').count(), 30_000);
        let distinct: HashSet<&[u8]> = text
            .split(|&byte| byte == b'\n' || byte == b' ')
            .filter(|word| !word.is_empty())
            .collect();
        assert_eq!(summary.distinct_words, distinct.len() as u64);
    }

    #[test]
    fn output_is_identical_for_one_and_two_threads_and_depends_on_the_seed() {
        let one = TextParams {
            size: TextSize::Bytes(3 << 20),
            threads: 1,
            ..TextParams::default()
        };
        let two = TextParams { threads: 2, ..one };
        let (single, single_summary) = generate(&one);
        let (parallel, parallel_summary) = generate(&two);
        assert!(single == parallel, "1-thread and 2-thread outputs differ");
        assert_eq!(single_summary, parallel_summary);
        assert!(single_summary.records > 3 * generate_lines_per_block(&one));
        let other_seed = TextParams { seed: 7, ..one };
        assert!(generate(&other_seed).0 != single);
    }

    #[test]
    fn every_thread_request_gives_the_same_text() {
        // 0 = every core; usize::MAX used to panic (a capacity overflow
        // while starting that many threads), now it is capped.
        let base = TextParams {
            size: TextSize::Bytes(5 << 20),
            threads: 1,
            ..TextParams::default()
        };
        let (single, summary) = generate(&base);
        for threads in [0, 3, usize::MAX] {
            let (text, other) = generate(&TextParams { threads, ..base });
            assert!(text == single, "{threads} threads give other text");
            assert_eq!(other, summary);
        }
    }

    #[test]
    fn byte_targets_are_met_with_the_counted_blocks() {
        // write_text counts the blocks a byte target needs from the shortest
        // possible line; short words and long or short lines test the count.
        for (vocabulary_words, words_per_line, zipf_exponent) in
            [(1, 1, 1.0), (3, 7, 20.0), (100, 65_536, 1.0)]
        {
            for target in [1, 999, 3 << 20] {
                let params = TextParams {
                    size: TextSize::Bytes(target),
                    vocabulary_words,
                    words_per_line,
                    zipf_exponent,
                    threads: 2,
                    ..TextParams::default()
                };
                let (text, summary) = generate(&params);
                assert!(text.len() as u64 >= target, "{params:?}");
                assert_eq!(summary.bytes, text.len() as u64);
                let previous_end = text[..text.len() - 1]
                    .iter()
                    .rposition(|&byte| byte == b'\n')
                    .map_or(0, |end| end + 1);
                assert!((previous_end as u64) < target, "{params:?}");
            }
        }
    }

    fn generate_lines_per_block(params: &TextParams) -> u64 {
        TextGenerator::new(params).unwrap().lines_per_block()
    }

    fn top_two_ratio(exponent: f64) -> (f64, Vec<u8>, Vec<u8>) {
        let params = TextParams {
            size: TextSize::Lines(40_000),
            zipf_exponent: exponent,
            ..TextParams::default()
        };
        let (text, summary) = generate(&params);
        let mut counts: HashMap<&[u8], u64> = HashMap::new();
        for word in text
            .split(|&byte| byte == b'\n' || byte == b' ')
            .filter(|word| !word.is_empty())
        {
            *counts.entry(word).or_default() += 1;
        }
        assert_eq!(summary.distinct_words, counts.len() as u64);
        let mut ranked: Vec<(&[u8], u64)> = counts.into_iter().collect();
        ranked.sort_by_key(|entry| std::cmp::Reverse(entry.1));
        (
            ranked[0].1 as f64 / ranked[1].1 as f64,
            ranked[0].0.to_vec(),
            ranked[1].0.to_vec(),
        )
    }

    #[test]
    fn rank_one_word_is_about_two_to_the_s_times_as_frequent_as_rank_two() {
        // 400 000 words; for s = 1 rank 1 appears ~33 000 times, rank 2
        // ~16 500: the ratio's standard deviation is about 0.02.
        let vocabulary = Vocabulary::new(2).unwrap();
        for exponent in [1.0, 1.5] {
            let (ratio, first, second) = top_two_ratio(exponent);
            let expected = 2f64.powf(exponent);
            assert!(
                (ratio - expected).abs() < 0.1 * expected,
                "s={exponent}: ratio {ratio}, expected {expected}"
            );
            assert_eq!(first, vocabulary.word(0));
            assert_eq!(second, vocabulary.word(1));
        }
    }

    #[test]
    fn validation_names_the_parameter_and_value() {
        let check = |params: TextParams, wanted: &str| {
            let error = write_text(&params, std::io::sink()).unwrap_err().to_string();
            assert!(error.contains(wanted), "{error} does not contain {wanted}");
        };
        check(
            TextParams {
                zipf_exponent: -1.0,
                ..TextParams::default()
            },
            "zipf_exponent must be > 0, got -1",
        );
        check(
            TextParams {
                vocabulary_words: 0,
                ..TextParams::default()
            },
            "vocabulary_words must be in",
        );
        check(
            TextParams {
                words_per_line: 0,
                ..TextParams::default()
            },
            "words_per_line must be in 1..=65536, got 0",
        );
    }

    #[test]
    fn empty_targets_write_nothing() {
        for size in [TextSize::Bytes(0), TextSize::Lines(0)] {
            let (text, summary) = generate(&TextParams {
                size,
                ..TextParams::default()
            });
            assert!(text.is_empty());
            assert_eq!(summary, TextSummary::default());
        }
    }
}
