//! Record generation, byte-identical to gensort 1.5.
//!
//! # Algorithm
//! Record `i` draws on the ten generator values `X(i+1) ..= X(i+10)`
//! (see [`crate::lcg`]):
//!
//! ```text
//! binary:  bytes 10k..10k+10 = top 80 bits of X(i+1+k) ^ PART_XOR[k], k = 0..10
//!          (PART_XOR[0] = 0, so the key is the top 80 bits of X(i+1))
//! ascii:   10 printable key characters (base 95 digits of the high and low
//!          halves of X(i+1)), 2 spaces, the record number as 32 upper-case
//!          hex digits, 2 spaces, 13 nibbles of X(i+1) each repeated 4 times,
//!          "\r\n"
//! skewed:  as above, then the leading bits (binary) or characters (ascii) of
//!          the key are replaced by those of the key of record `s`, where `s`
//!          is about log2(i); how many is drawn from bits 32.. of X(i+1).
//! ```
//!
//! A block of records is generated from one skip-ahead and then one generator
//! step per record, so blocks are independent: [`generate_file`] hands them
//! to all cores and writes each at its own offset.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use spillway_core::fs::parent_directory;
use spillway_core::{check_threads, ensure, scratch, worker_threads, Error, Fs, FsFile, Interrupt, Result};

use serde::{Serialize, Serializer};

use crate::lcg;
use crate::record::{format_checksum, record_crc, KEY_BYTES, RECORD_BYTES};

/// The constants xor-ed into the generator values that fill bytes 10..100 of
/// a binary record (the top 80 bits of each are used).
const PART_XOR: [u128; 10] = [
    0,
    0xF0E8_E4E2_E1D8_D4D2_D1CC_0000_0000_0000,
    0xCAC9_C6C5_C3B8_B4B2_B1AC_0000_0000_0000,
    0xAAA9_A6A5_A39C_9A99_9695_0000_0000_0000,
    0x938E_8D8B_8778_7472_716C_0000_0000_0000,
    0x6A69_6665_635C_5A59_5655_0000_0000_0000,
    0x534E_4D4B_473C_3A39_3635_0000_0000_0000,
    0x332E_2D2B_271E_1D1B_170F_0000_0000_0000,
    0xC8C4_C2C1_9894_9291_8CE0_0000_0000_0000,
    0x170F_332E_2D2B_271E_1D1B_0000_0000_0000,
];

/// Generator values one record depends on.
const VALUES_PER_RECORD: usize = PART_XOR.len();

/// Key bytes (or characters) that a skewed record may take from its skew source.
const SKEW_BYTES: usize = 6;

/// Records generated per batch inside a block: the generator values of one
/// batch (`BATCH_RECORDS + 9` of them, 16 KiB) stay in the L1 cache.
const BATCH_RECORDS: usize = 1024;

/// Records per block handed to one thread: 3.2 MB, a large sequential write.
pub const BLOCK_RECORDS: u64 = 32 * 1024;

const HEX_UPPER: &[u8; 16] = b"0123456789ABCDEF";

/// The two record layouts of gensort.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordFormat {
    /// Random bytes everywhere, the densest keys (the default of gensort).
    Binary,
    /// Printable keys and payload, for PennySort/JouleSort and text tools (`-a`).
    Ascii,
}

/// What to generate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GenerateSpec {
    /// Record layout.
    pub format: RecordFormat,
    /// Skewed keys (`-s`).
    pub skewed: bool,
    /// Number of the first record (`-b`); record numbers are 128-bit and wrap.
    pub start_record: u128,
    /// Number of records.
    pub records: u64,
}

impl GenerateSpec {
    /// Uniform binary records `0..records`.
    pub fn binary(records: u64) -> Self {
        GenerateSpec {
            format: RecordFormat::Binary,
            skewed: false,
            start_record: 0,
            records,
        }
    }

    /// Total bytes of output.
    pub fn bytes(&self) -> Result<u64> {
        self.records.checked_mul(RECORD_BYTES as u64).ok_or_else(|| {
            Error::InvalidArgument(format!(
                "{} records do not fit in a 64-bit file size",
                self.records
            ))
        })
    }
}

/// The skew index of gensort 1.5: the bit length of the record number, except
/// that a number whose top nibble (of its high or low 64-bit half) is set maps
/// straight to 64 or 128, as the original does.
fn skew_index(record_number: u128) -> usize {
    const TOP_NIBBLE: u64 = 0xF000_0000_0000_0000;
    let high = (record_number >> 64) as u64;
    let low = record_number as u64;
    if high == 0 {
        if low & TOP_NIBBLE != 0 {
            64
        } else {
            (u64::BITS - low.leading_zeros()) as usize
        }
    } else if high & TOP_NIBBLE != 0 {
        128
    } else {
        64 + (u64::BITS - high.leading_zeros()) as usize
    }
}

/// Writes the 10 printable key characters of an ASCII record made from `value`.
#[inline(always)]
fn ascii_key(value: u128, key: &mut [u8]) {
    let mut digits = (value >> 64) as u64;
    for byte in &mut key[..8] {
        *byte = b' ' + (digits % 95) as u8;
        digits /= 95;
    }
    let mut digits = value as u64;
    for byte in &mut key[8..KEY_BYTES] {
        *byte = b' ' + (digits % 95) as u8;
        digits /= 95;
    }
}

/// The key prefixes skewed records copy from: entry `s` is the start of the
/// key of record `s`, for `s` in `0..=128`.
#[derive(Debug, Clone)]
struct SkewSources {
    prefixes: [[u8; SKEW_BYTES]; 129],
}

impl SkewSources {
    fn new(format: RecordFormat) -> Self {
        let mut prefixes = [[0u8; SKEW_BYTES]; 129];
        let mut value = 0u128;
        for prefix in &mut prefixes {
            value = lcg::next(value);
            match format {
                RecordFormat::Binary => prefix.copy_from_slice(&value.to_be_bytes()[..SKEW_BYTES]),
                RecordFormat::Ascii => {
                    let mut key = [0u8; KEY_BYTES];
                    ascii_key(value, &mut key);
                    prefix.copy_from_slice(&key[..SKEW_BYTES]);
                }
            }
        }
        SkewSources { prefixes }
    }
}

/// Generates records into caller-provided buffers. Cheap to create; holds the
/// skew sources.
#[derive(Debug, Clone)]
pub struct Generator {
    format: RecordFormat,
    skew: Option<SkewSources>,
}

impl Generator {
    /// A generator of records in `format`, skewed or not.
    pub fn new(format: RecordFormat, skewed: bool) -> Self {
        Generator {
            format,
            skew: skewed.then(|| SkewSources::new(format)),
        }
    }

    /// Fills `output` (a multiple of 100 bytes) with the records numbered
    /// `first_record ..`.
    pub fn fill(&self, first_record: u128, output: &mut [u8]) {
        assert_eq!(output.len() % RECORD_BYTES, 0, "output must hold whole records");
        let mut values = [0u128; BATCH_RECORDS + VALUES_PER_RECORD - 1];
        // values[0] = X(first_record + 1): the first value of the first record.
        let mut next_value = lcg::skip_ahead(first_record.wrapping_add(1));
        for value in &mut values[..VALUES_PER_RECORD - 1] {
            *value = next_value;
            next_value = lcg::next(next_value);
        }
        let mut record_number = first_record;
        for batch in output.chunks_mut(BATCH_RECORDS * RECORD_BYTES) {
            let batch_records = batch.len() / RECORD_BYTES;
            // values[0..9] hold the carry-over from the previous batch.
            for value in &mut values[VALUES_PER_RECORD - 1..VALUES_PER_RECORD - 1 + batch_records] {
                *value = next_value;
                next_value = lcg::next(next_value);
            }
            for (index, record) in batch.chunks_exact_mut(RECORD_BYTES).enumerate() {
                let window = &values[index..index + VALUES_PER_RECORD];
                match self.format {
                    RecordFormat::Binary => binary_record(window, record),
                    RecordFormat::Ascii => ascii_record(window[0], record_number, record),
                }
                if let Some(skew) = &self.skew {
                    skew_record(self.format, skew, window[0], record_number, record);
                }
                record_number = record_number.wrapping_add(1);
            }
            values.copy_within(batch_records..batch_records + VALUES_PER_RECORD - 1, 0);
        }
    }
}

#[inline(always)]
fn binary_record(window: &[u128], record: &mut [u8]) {
    for (part, (value, xor)) in record.chunks_exact_mut(10).zip(window.iter().zip(PART_XOR)) {
        part.copy_from_slice(&(value ^ xor).to_be_bytes()[..10]);
    }
}

#[inline(always)]
fn ascii_record(value: u128, record_number: u128, record: &mut [u8]) {
    ascii_key(value, &mut record[..KEY_BYTES]);
    record[10] = b' ';
    record[11] = b' ';
    for (position, byte) in record[12..44].iter_mut().enumerate() {
        *byte = HEX_UPPER[((record_number >> (124 - 4 * position)) & 0xF) as usize];
    }
    record[44] = b' ';
    record[45] = b' ';
    let low = value as u64;
    for (position, filler) in record[46..98].chunks_exact_mut(4).enumerate() {
        filler.fill(HEX_UPPER[((low >> (48 - 4 * position)) & 0xF) as usize]);
    }
    record[98] = b'\r';
    record[99] = b'\n';
}

#[inline(always)]
fn skew_record(
    format: RecordFormat,
    skew: &SkewSources,
    value: u128,
    record_number: u128,
    record: &mut [u8],
) {
    let source = &skew.prefixes[skew_index(record_number)];
    let draw = ((value as u64) >> 32) as usize;
    match format {
        RecordFormat::Binary => {
            // 0..=48 leading bits replaced; 49..=63 mean none (a quarter of records).
            let bits = draw & 0x3F;
            let bits = if bits > 8 * SKEW_BYTES { 0 } else { bits };
            let whole = bits / 8;
            record[..whole].copy_from_slice(&source[..whole]);
            let partial = bits % 8;
            if partial > 0 {
                let keep_mask = 0xFFu8 >> partial;
                record[whole] = (source[whole] & !keep_mask) | (record[whole] & keep_mask);
            }
        }
        RecordFormat::Ascii => {
            // 0..=6 leading characters replaced; 7 means none.
            let count = draw & 0x7;
            let count = if count > SKEW_BYTES { 0 } else { count };
            record[..count].copy_from_slice(&source[..count]);
        }
    }
}

/// How to write a generated file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriteOptions {
    /// Worker threads (0 = all cores).
    pub threads: usize,
    /// Compute the checksum (`-c`).
    pub checksum: bool,
    /// fdatasync the file before returning, so the data is on disk.
    pub sync: bool,
    /// Stops the generation when raised (checked after every block); the
    /// file is then removed.
    pub interrupt: Interrupt,
}

impl Default for WriteOptions {
    fn default() -> Self {
        WriteOptions {
            threads: 0,
            checksum: true,
            sync: true,
            interrupt: Interrupt::new(),
        }
    }
}

/// What [`generate_file`] did. Serialized (the `--json` report of
/// `spillway gensort`, the dict of `spillway.gensort`) with the checksum in
/// hex as gensort prints it and the time as `seconds`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GenerateReport {
    /// Records written.
    pub records: u64,
    /// Bytes written.
    pub bytes: u64,
    /// Sum of the records' CRC-32s, when requested.
    #[serde(serialize_with = "checksum_text")]
    pub checksum: Option<u128>,
    /// Wall-clock time including the final sync.
    #[serde(rename = "seconds", serialize_with = "seconds")]
    pub elapsed: Duration,
    /// Threads used.
    pub threads: usize,
}

fn checksum_text<S: Serializer>(
    checksum: &Option<u128>,
    serializer: S,
) -> std::result::Result<S::Ok, S::Error> {
    checksum.map(format_checksum).serialize(serializer)
}

fn seconds<S: Serializer>(elapsed: &Duration, serializer: S) -> std::result::Result<S::Ok, S::Error> {
    elapsed.as_secs_f64().serialize(serializer)
}

/// Generates `spec` into the file at `path` (created or replaced) of `fs`,
/// on all cores. The path `/dev/null` generates without writing, as gensort
/// does. `progress` is called with the records finished so far after each
/// block.
///
/// The records go to a scratch file beside `path` that names this process
/// ([`scratch::name`]), renamed over `path` once complete: a run that fails
/// or is interrupted removes it, and one killed outright leaves a file the
/// next run recognises and sweeps, never a `path` that looks complete. (A
/// `path` that exists and is not a regular file, a device or a pipe, is
/// written in place.) With `sync`, the file's data and its directory entry
/// are durable when this returns.
pub fn generate_file(
    fs: &dyn Fs,
    path: &Path,
    spec: &GenerateSpec,
    options: &WriteOptions,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<GenerateReport> {
    let started = Instant::now();
    spec.bytes()?;
    check_threads(options.threads, "threads")?;
    if path == Path::new("/dev/null") {
        return generate_into(None, spec, options, progress, started);
    }
    ensure!(
        !fs.is_dir(path)?,
        InvalidArgument,
        "the output {} is a directory; give a file name",
        path.display()
    );
    let in_place = std::fs::metadata(path).is_ok_and(|metadata| !metadata.is_file());
    let target = if in_place {
        path.to_path_buf()
    } else {
        scratch::partial_path(path)
    };
    let file = fs.create_or_truncate(&target).map_err(|error| match error {
        // Name the file asked for: the scratch name means nothing yet.
        Error::Io { source, .. } => Error::io(format!("creating {}", path.display()), source),
        other => other,
    })?;
    let outcome = generate_into(Some(&*file), spec, options, progress, started).and_then(|report| {
        if options.sync {
            file.sync_data()?;
        }
        if !in_place {
            fs.rename(&target, path)?;
        }
        if options.sync {
            fs.sync_dir(parent_directory(path))?;
        }
        Ok(GenerateReport {
            elapsed: started.elapsed(),
            ..report
        })
    });
    if outcome.is_err() {
        drop(file);
        // Best effort: the error that matters is the one being returned.
        let _ = fs.remove_file(&target);
    }
    outcome
}

/// Runs the workers over every block, writing into `file` when there is one.
fn generate_into(
    file: Option<&dyn FsFile>,
    spec: &GenerateSpec,
    options: &WriteOptions,
    progress: &(dyn Fn(u64) + Sync),
    started: Instant,
) -> Result<GenerateReport> {
    let blocks = spec.records.div_ceil(BLOCK_RECORDS);
    let threads = worker_threads(options.threads).min(blocks.max(1) as usize);
    let generator = Generator::new(spec.format, spec.skewed);
    let next_block = AtomicU64::new(0);
    let records_done = AtomicU64::new(0);
    let checksum = Mutex::new(0u128);
    let first_error: Mutex<Option<Error>> = Mutex::new(None);

    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| {
                let outcome = generate_blocks(
                    &generator,
                    spec,
                    options,
                    file,
                    blocks,
                    &next_block,
                    &records_done,
                    progress,
                );
                match outcome {
                    Ok(sum) => {
                        let mut total = checksum.lock().unwrap();
                        *total = total.wrapping_add(sum);
                    }
                    Err(error) => {
                        // Stop the other workers at their next block.
                        next_block.store(blocks, Ordering::Relaxed);
                        first_error.lock().unwrap().get_or_insert(error);
                    }
                }
            });
        }
    });
    if let Some(error) = first_error.into_inner().unwrap() {
        return Err(error);
    }
    Ok(GenerateReport {
        records: spec.records,
        bytes: spec.bytes()?,
        checksum: options.checksum.then(|| checksum.into_inner().unwrap()),
        elapsed: started.elapsed(),
        threads,
    })
}

/// One worker: claims blocks in order until none is left; returns the
/// checksum of its blocks.
#[allow(clippy::too_many_arguments)]
fn generate_blocks(
    generator: &Generator,
    spec: &GenerateSpec,
    options: &WriteOptions,
    file: Option<&dyn FsFile>,
    blocks: u64,
    next_block: &AtomicU64,
    records_done: &AtomicU64,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<u128> {
    let mut buffer = vec![0u8; BLOCK_RECORDS as usize * RECORD_BYTES];
    let mut sum = 0u128;
    loop {
        options.interrupt.check()?;
        let block = next_block.fetch_add(1, Ordering::Relaxed);
        if block >= blocks {
            return Ok(sum);
        }
        let first = block * BLOCK_RECORDS;
        let count = BLOCK_RECORDS.min(spec.records - first);
        let output = &mut buffer[..count as usize * RECORD_BYTES];
        generator.fill(spec.start_record.wrapping_add(u128::from(first)), output);
        if options.checksum {
            for record in output.chunks_exact(RECORD_BYTES) {
                sum = sum.wrapping_add(u128::from(record_crc(record)));
            }
        }
        if let Some(file) = file {
            file.write_at(output, first * RECORD_BYTES as u64)?;
        }
        let done = records_done.fetch_add(count, Ordering::Relaxed) + count;
        progress(done);
    }
}

/// Generates `spec` into memory; for tests and small inputs.
pub fn generate_vec(spec: &GenerateSpec) -> Result<Vec<u8>> {
    let bytes = spec.bytes()?;
    ensure!(
        bytes <= 1 << 32,
        ResourcesExhausted,
        "generating {bytes} bytes in memory; use generate_file for large inputs"
    );
    let mut output = vec![0u8; bytes as usize];
    Generator::new(spec.format, spec.skewed).fill(spec.start_record, &mut output);
    Ok(output)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn skew_index_follows_bit_length_with_the_nibble_quirk() {
        assert_eq!(skew_index(0), 0);
        assert_eq!(skew_index(1), 1);
        assert_eq!(skew_index(2), 2);
        assert_eq!(skew_index(3), 2);
        assert_eq!(skew_index(4), 3);
        assert_eq!(skew_index(15), 4);
        assert_eq!(skew_index(16), 5);
        assert_eq!(skew_index(1 << 59), 60);
        assert_eq!(skew_index(1 << 60), 64);
        assert_eq!(skew_index(u64::MAX as u128), 64);
        assert_eq!(skew_index(1 << 64), 65);
        assert_eq!(skew_index((1 << 64) + 1), 65);
        assert_eq!(skew_index(1 << 127), 128);
        assert_eq!(skew_index(u128::MAX), 128);
    }

    #[test]
    fn batches_and_single_records_agree() {
        // Generating a range in one call equals generating each record alone,
        // across batch boundaries, for every mode.
        for format in [RecordFormat::Binary, RecordFormat::Ascii] {
            for skewed in [false, true] {
                let generator = Generator::new(format, skewed);
                let count = BATCH_RECORDS + 37;
                let mut all = vec![0u8; count * RECORD_BYTES];
                generator.fill(5, &mut all);
                for (index, expected) in all.chunks_exact(RECORD_BYTES).enumerate() {
                    let mut single = [0u8; RECORD_BYTES];
                    generator.fill(5 + index as u128, &mut single);
                    assert_eq!(&single[..], expected, "{format:?} skewed={skewed} record {index}");
                }
            }
        }
    }

    #[test]
    fn skew_sources_are_the_first_keys() {
        let skew = SkewSources::new(RecordFormat::Binary);
        assert_eq!(&skew.prefixes[0], b"JimGra");
        assert_eq!(skew.prefixes[1], [0x95, 0xe0, 0xe4, 0x82, 0x62, 0xb3]);
        assert_eq!(skew.prefixes[128], [0xe1, 0xdc, 0x46, 0xb6, 0x45, 0xc4]);
        let skew = SkewSources::new(RecordFormat::Ascii);
        assert_eq!(&skew.prefixes[0], b"AsfAGH");
        assert_eq!(&skew.prefixes[1], b"~sHd0j");
        assert_eq!(&skew.prefixes[128], b"12NSK|");
    }
}
