//! Validation of sorted records, compatible with valsort 1.5.
//!
//! A [`Summary`] describes a run of records: how many, how many keys equal
//! their predecessor (duplicates), how many are smaller than their
//! predecessor (unordered) and the first of those, the checksum (the 128-bit
//! sum of the records' CRC-32s, independent of order), and the first and last
//! record. Summaries of consecutive runs combine exactly ([`Summary::append`]),
//! which is what lets [`validate_file`] split a file over all cores and what
//! valsort's partition summary files (`-o`, `-s`) are made of.
//!
//! # Summary file format (280 bytes per summary, valsort 1.5 on x86-64)
//!
//! | offset | bytes | field |
//! |---|---|---|
//! | 0 | 16 | index of the first unordered record (0 = none) |
//! | 16 | 16 | unordered records |
//! | 32 | 16 | records |
//! | 48 | 16 | duplicate keys |
//! | 64 | 16 | checksum |
//! | 80 | 100 | first record |
//! | 180 | 100 | last record |
//!
//! Each 16-byte number is its high 64 bits then its low 64 bits, each
//! little-endian, as valsort's `struct { u8 hi8; u8 lo8; }` lies in memory.

use std::cmp::Ordering as KeyOrdering;
use std::fmt::Write as _;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use serde::{Serialize, Serializer};
use spillway_core::{check_threads, ensure, worker_threads, Error, Fs, FsFile, Interrupt, Result};

use crate::record::{format_checksum, open_records, record_crc, Record, KEY_BYTES, RECORD_BYTES};

/// Bytes of one partition summary in a summary file.
pub const SUMMARY_BYTES: usize = 5 * 16 + 2 * RECORD_BYTES;

/// Bytes validated by one thread as a unit (a multiple of the record size).
const SEGMENT_BYTES: u64 = 64_000_000;
/// Bytes read per system call (a multiple of the record size).
const READ_BYTES: usize = 4_000_000;
const _: () =
    assert!(SEGMENT_BYTES.is_multiple_of(READ_BYTES as u64) && READ_BYTES.is_multiple_of(RECORD_BYTES));

/// How keys are compared.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum KeyOrder {
    /// Unsigned bytes, as `memcmp` (the default).
    #[default]
    Bytes,
    /// ASCII letters compared without regard to case (`-i`).
    CaseInsensitive,
}

impl KeyOrder {
    #[inline(always)]
    fn compare(self, previous: &[u8], next: &[u8]) -> KeyOrdering {
        let (previous, next) = (&previous[..KEY_BYTES], &next[..KEY_BYTES]);
        match self {
            KeyOrder::Bytes => previous.cmp(next),
            KeyOrder::CaseInsensitive => previous
                .iter()
                .map(u8::to_ascii_lowercase)
                .cmp(next.iter().map(u8::to_ascii_lowercase)),
        }
    }
}

/// The validation summary of a run of records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Summary {
    /// Index (from 0) of the first record whose key is smaller than its
    /// predecessor's; 0 when there is none (record 0 can never be unordered).
    pub first_unordered: u128,
    /// Records whose key is smaller than their predecessor's.
    pub unordered: u128,
    /// Records.
    pub records: u128,
    /// Records whose key equals their predecessor's.
    pub duplicates: u128,
    /// Sum of the records' CRC-32s.
    pub checksum: u128,
    /// The first record.
    pub first_record: Record,
    /// The last record.
    pub last_record: Record,
}

/// What a validation found, as `spillway valsort --json` and
/// `spillway.valsort` report it: the summary's counts in decimal text (they
/// are 128-bit; JSON readers lose precision past 2^53), the checksum in hex
/// as valsort prints it, valsort's text, the bytes validated and the time.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ValidationReport {
    /// Records.
    #[serde(serialize_with = "decimal")]
    pub records: u128,
    /// Sum of the records' CRC-32s, in hex.
    pub checksum: String,
    /// Records whose key equals their predecessor's.
    #[serde(serialize_with = "decimal")]
    pub duplicates: u128,
    /// Records whose key is smaller than their predecessor's.
    #[serde(serialize_with = "decimal")]
    pub unordered: u128,
    /// Index of the first unordered record, if any.
    #[serde(serialize_with = "decimal_option")]
    pub first_unordered: Option<u128>,
    /// Whether every record is in order.
    pub sorted: bool,
    /// Bytes of records validated (0 for partition summaries).
    pub bytes: u64,
    /// Wall-clock time of the validation.
    pub seconds: f64,
    /// The text valsort prints ([`Summary::report`]).
    pub report: String,
}

impl ValidationReport {
    /// The report of `summary`, found in `seconds`; `summaries` says that
    /// the input was partition summaries, not records.
    pub fn new(summary: &Summary, summaries: bool, seconds: f64) -> Self {
        let bytes = if summaries {
            0
        } else {
            u64::try_from(summary.records)
                .unwrap_or(u64::MAX)
                .saturating_mul(RECORD_BYTES as u64)
        };
        ValidationReport {
            records: summary.records,
            checksum: format_checksum(summary.checksum),
            duplicates: summary.duplicates,
            unordered: summary.unordered,
            first_unordered: (summary.first_unordered != 0).then_some(summary.first_unordered),
            sorted: summary.is_sorted(),
            bytes,
            seconds,
            report: summary.report(),
        }
    }
}

fn decimal<S: Serializer>(count: &u128, serializer: S) -> std::result::Result<S::Ok, S::Error> {
    serializer.collect_str(count)
}

fn decimal_option<S: Serializer>(
    count: &Option<u128>,
    serializer: S,
) -> std::result::Result<S::Ok, S::Error> {
    count.map(|count| count.to_string()).serialize(serializer)
}

impl Summary {
    /// The summary of the single record `record`.
    pub fn of_record(record: &[u8]) -> Summary {
        let record: Record = record.try_into().expect("a record is 100 bytes");
        Summary {
            first_unordered: 0,
            unordered: 0,
            records: 1,
            duplicates: 0,
            checksum: u128::from(record_crc(&record)),
            first_record: record,
            last_record: record,
        }
    }

    /// The summary of `records` (a non-empty multiple of 100 bytes).
    pub fn of_records(records: &[u8], order: KeyOrder) -> Summary {
        assert!(!records.is_empty() && records.len().is_multiple_of(RECORD_BYTES));
        let mut summary = Summary::of_record(&records[..RECORD_BYTES]);
        summary.extend(&records[RECORD_BYTES..], order);
        summary
    }

    /// Continues this summary with the records that follow it.
    pub fn extend(&mut self, records: &[u8], order: KeyOrder) {
        debug_assert_eq!(records.len() % RECORD_BYTES, 0);
        if records.is_empty() {
            return;
        }
        let mut previous: &[u8] = &self.last_record;
        let mut last_record = self.last_record;
        for record in records.chunks_exact(RECORD_BYTES) {
            self.checksum = self.checksum.wrapping_add(u128::from(record_crc(record)));
            match order.compare(previous, record) {
                KeyOrdering::Less => {}
                KeyOrdering::Equal => self.duplicates += 1,
                KeyOrdering::Greater => {
                    if self.first_unordered == 0 {
                        self.first_unordered = self.records;
                    }
                    self.unordered += 1;
                }
            }
            self.records += 1;
            previous = record;
        }
        last_record.copy_from_slice(previous);
        self.last_record = last_record;
    }

    /// Appends the summary of the records that follow this summary's.
    pub fn append(&mut self, next: &Summary, order: KeyOrder) {
        match order.compare(&self.last_record, &next.first_record) {
            KeyOrdering::Less => {}
            KeyOrdering::Equal => self.duplicates = self.duplicates.wrapping_add(1),
            KeyOrdering::Greater => {
                if self.first_unordered == 0 {
                    self.first_unordered = self.records;
                }
                self.unordered = self.unordered.wrapping_add(1);
            }
        }
        if self.first_unordered == 0 && next.first_unordered != 0 {
            self.first_unordered = self.records.wrapping_add(next.first_unordered);
        }
        self.unordered = self.unordered.wrapping_add(next.unordered);
        self.records = self.records.wrapping_add(next.records);
        self.duplicates = self.duplicates.wrapping_add(next.duplicates);
        self.checksum = self.checksum.wrapping_add(next.checksum);
        self.last_record = next.last_record;
    }

    /// True when every record is in order.
    pub fn is_sorted(&self) -> bool {
        self.unordered == 0
    }

    /// The text valsort prints to standard error for this summary.
    pub fn report(&self) -> String {
        let mut text = String::new();
        if self.first_unordered != 0 {
            let _ = writeln!(text, "First unordered record is record {}", self.first_unordered);
        }
        let _ = writeln!(text, "Records: {}", self.records);
        let _ = writeln!(text, "Checksum: {}", format_checksum(self.checksum));
        if self.unordered != 0 {
            let _ = writeln!(text, "ERROR - there are {} unordered records", self.unordered);
        } else {
            let _ = writeln!(text, "Duplicate keys: {}", self.duplicates);
            let _ = writeln!(text, "SUCCESS - all records are in order");
        }
        text
    }

    /// The 280-byte summary file entry.
    pub fn to_bytes(&self) -> [u8; SUMMARY_BYTES] {
        let mut bytes = [0u8; SUMMARY_BYTES];
        let numbers = [
            self.first_unordered,
            self.unordered,
            self.records,
            self.duplicates,
            self.checksum,
        ];
        for (slot, number) in bytes.chunks_exact_mut(16).zip(numbers) {
            slot[..8].copy_from_slice(&((number >> 64) as u64).to_le_bytes());
            slot[8..].copy_from_slice(&(number as u64).to_le_bytes());
        }
        bytes[80..180].copy_from_slice(&self.first_record);
        bytes[180..].copy_from_slice(&self.last_record);
        bytes
    }

    /// Decodes one 280-byte summary file entry.
    pub fn from_bytes(bytes: &[u8; SUMMARY_BYTES]) -> Summary {
        let number = |index: usize| {
            let slot = &bytes[16 * index..16 * index + 16];
            let high = u64::from_le_bytes(slot[..8].try_into().unwrap());
            let low = u64::from_le_bytes(slot[8..].try_into().unwrap());
            (u128::from(high) << 64) | u128::from(low)
        };
        Summary {
            first_unordered: number(0),
            unordered: number(1),
            records: number(2),
            duplicates: number(3),
            checksum: number(4),
            first_record: bytes[80..180].try_into().unwrap(),
            last_record: bytes[180..].try_into().unwrap(),
        }
    }
}

/// How to validate a file.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ValidateOptions {
    /// Worker threads (0 = all cores).
    pub threads: usize,
    /// Key comparison.
    pub order: KeyOrder,
    /// Stops the validation when raised (checked after every read).
    pub interrupt: Interrupt,
}

/// Validates the records of the file at `path` of `fs` on all cores.
/// `progress` is called with the bytes validated so far after each read.
pub fn validate_file(
    fs: &dyn Fs,
    path: &Path,
    options: &ValidateOptions,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<Summary> {
    check_threads(options.threads, "threads")?;
    let (file, bytes) = open_records(fs, path)?;
    ensure!(
        bytes > 0,
        InvalidArgument,
        "{}: there must be at least one record to be validated, the file is empty",
        path.display()
    );
    let segments = bytes.div_ceil(SEGMENT_BYTES);
    let summaries: Vec<Mutex<Option<Summary>>> = (0..segments).map(|_| Mutex::new(None)).collect();
    let next_segment = AtomicU64::new(0);
    let bytes_done = AtomicU64::new(0);
    let first_error: Mutex<Option<Error>> = Mutex::new(None);
    let threads = worker_threads(options.threads).min(segments as usize);
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| {
                let mut buffer = vec![0u8; READ_BYTES];
                loop {
                    let segment = next_segment.fetch_add(1, Ordering::Relaxed);
                    if segment >= segments {
                        return;
                    }
                    let start = segment * SEGMENT_BYTES;
                    let end = bytes.min(start + SEGMENT_BYTES);
                    match summarize_range(&*file, start..end, options, &mut buffer, &bytes_done, progress) {
                        Ok(summary) => *summaries[segment as usize].lock().unwrap() = Some(summary),
                        Err(error) => {
                            next_segment.store(segments, Ordering::Relaxed);
                            first_error.lock().unwrap().get_or_insert(error);
                            return;
                        }
                    }
                }
            });
        }
    });
    if let Some(error) = first_error.into_inner().unwrap() {
        return Err(error);
    }
    let mut parts = summaries
        .into_iter()
        .map(|slot| slot.into_inner().unwrap().expect("every segment was summarized"));
    let mut total = parts.next().expect("a non-empty file has a segment");
    for part in parts {
        total.append(&part, options.order);
    }
    Ok(total)
}

fn summarize_range(
    file: &dyn FsFile,
    range: std::ops::Range<u64>,
    options: &ValidateOptions,
    buffer: &mut [u8],
    bytes_done: &AtomicU64,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<Summary> {
    let (end, order) = (range.end, options.order);
    let mut summary: Option<Summary> = None;
    let mut offset = range.start;
    while offset < end {
        options.interrupt.check()?;
        let length = (end - offset).min(buffer.len() as u64) as usize;
        let chunk = &mut buffer[..length];
        file.read_exact_at(chunk, offset)?;
        match &mut summary {
            Some(summary) => summary.extend(chunk, order),
            None => summary = Some(Summary::of_records(chunk, order)),
        }
        offset += length as u64;
        progress(bytes_done.fetch_add(length as u64, Ordering::Relaxed) + length as u64);
    }
    Ok(summary.expect("a segment holds at least one record"))
}

/// Validates a file of concatenated partition summaries (valsort `-s`),
/// reading it in bounded chunks whatever its size.
pub fn validate_summaries_file(fs: &dyn Fs, path: &Path, order: KeyOrder) -> Result<Summary> {
    let file = fs.open_read(path)?;
    let bytes = file.len()?;
    check_summaries_length(bytes)
        .map_err(|what| Error::InvalidArgument(format!("{}: {what}", path.display())))?;
    let mut buffer = vec![0u8; (bytes as usize).min(SUMMARIES_READ_BYTES)];
    let mut total: Option<Summary> = None;
    let mut offset = 0u64;
    while offset < bytes {
        let chunk = &mut buffer[..(bytes - offset).min(SUMMARIES_READ_BYTES as u64) as usize];
        file.read_exact_at(chunk, offset)?;
        append_summaries(&mut total, chunk, order);
        offset += chunk.len() as u64;
    }
    Ok(total.expect("a non-empty summary file holds a summary"))
}

/// Summaries read per system call (a multiple of the summary size).
const SUMMARIES_READ_BYTES: usize = 4096 * SUMMARY_BYTES;

/// Combines concatenated 280-byte partition summaries in order.
pub fn validate_summaries(bytes: &[u8], order: KeyOrder) -> Result<Summary> {
    check_summaries_length(bytes.len() as u64).map_err(Error::InvalidArgument)?;
    let mut total = None;
    append_summaries(&mut total, bytes, order);
    Ok(total.expect("checked non-empty"))
}

fn check_summaries_length(bytes: u64) -> std::result::Result<(), String> {
    if bytes == 0 {
        return Err("there must be at least one partition summary to be validated".into());
    }
    if !bytes.is_multiple_of(SUMMARY_BYTES as u64) {
        return Err(format!(
            "{bytes} bytes is not a multiple of the {SUMMARY_BYTES}-byte partition summary \
             (partial partition summary found at end)"
        ));
    }
    Ok(())
}

fn append_summaries(total: &mut Option<Summary>, bytes: &[u8], order: KeyOrder) {
    for entry in bytes.chunks_exact(SUMMARY_BYTES) {
        let entry = Summary::from_bytes(entry.try_into().expect("chunks are summary-sized"));
        match total {
            Some(total) => total.append(&entry, order),
            None => *total = Some(entry),
        }
    }
}

/// Validates `path`: its records, or with `summaries` its concatenated
/// partition summaries; then, when `summary_file` is given, writes the
/// result there as a 280-byte summary and syncs it. What `spillway valsort`
/// and `spillway.valsort` both do.
pub fn validate_path(
    fs: &dyn Fs,
    path: &Path,
    summaries: bool,
    summary_file: Option<&Path>,
    options: &ValidateOptions,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<Summary> {
    let summary = if summaries {
        validate_summaries_file(fs, path, options.order)?
    } else {
        validate_file(fs, path, options, progress)?
    };
    if let Some(summary_path) = summary_file {
        let file = fs.create_or_truncate(summary_path)?;
        file.write_at(&summary.to_bytes(), 0)?;
        file.sync_data()?;
    }
    Ok(summary)
}
