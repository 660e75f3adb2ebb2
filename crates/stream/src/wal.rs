//! The write-ahead log: every batch is logged before it is acknowledged,
//! so acknowledged records survive a crash before their segment is
//! written.
//!
//! One log per buffer, numbered in the order the buffers were made (not
//! by sequence number: recovery replays old logs into a new one). A
//! frame is
//!
//! ```text
//! payload length u32 | block_crc(log number, frame offset, payload) u32 | payload
//! payload: first seq u64 | writes u32 | per write: op u8 | key u64 | time u64 | value length u32 | value
//! ```
//!
//! Replay stops at the first frame that is incomplete or fails its
//! checksum *at the end of the log* (a torn last write, never
//! acknowledged); a bad frame followed by more log is corruption.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use spillway_core::log::{read_log, LogSync, LogWriter};
use spillway_core::{Error, Fs, Result};

use crate::batch::{Batch, Op};

const WRITE_HEADER_BYTES: usize = 1 + 8 + 8 + 4;

/// The file name of log `number`.
pub fn file_name(number: u64) -> String {
    format!("{number:012}.wal")
}

/// The number a log file name stands for.
pub fn parse_name(name: &str) -> Option<u64> {
    name.strip_suffix(".wal")?.parse().ok()
}

/// An open log being appended to (under the writers' lock).
#[derive(Debug)]
pub struct Wal {
    log: LogWriter,
}

/// The part of a log that syncs, outside the writers' lock, so writers
/// go on appending while one of them waits for the disk.
pub type WalSync = LogSync;

impl Wal {
    /// Creates log `number` in `dir`, its name durable.
    pub fn create(fs: &dyn Fs, dir: &Path, number: u64) -> Result<Wal> {
        let log = LogWriter::create(fs, &dir.join(file_name(number)), number)?;
        fs.sync_dir(dir)?;
        Ok(Wal { log })
    }

    /// Appends `batch`, numbered from `first_seq`; returns the log's end
    /// after it, for [`WalSync::sync_to`].
    pub fn append(&mut self, batch: &Batch, first_seq: u64) -> Result<u64> {
        self.log.append_with(|frame| {
            frame.extend_from_slice(&first_seq.to_le_bytes());
            frame.extend_from_slice(&(batch.len() as u32).to_le_bytes());
            for i in 0..batch.len() {
                let value = batch.value(i);
                frame.push(batch.ops[i] as u8);
                frame.extend_from_slice(&batch.keys[i].to_le_bytes());
                frame.extend_from_slice(&batch.times[i].to_le_bytes());
                frame.extend_from_slice(&(value.len() as u32).to_le_bytes());
                frame.extend_from_slice(value);
            }
        })
    }

    /// Bytes written.
    pub fn written(&self) -> u64 {
        self.log.written()
    }

    /// The handle that syncs the log.
    pub fn sync(&self) -> &Arc<WalSync> {
        self.log.sync()
    }
}

/// Reads the log at `path` and calls `visit` with each
/// batch and its first sequence number. Returns the log's valid length.
pub fn replay(fs: &dyn Fs, path: &Path, mut visit: impl FnMut(&Batch, u64) -> Result<()>) -> Result<u64> {
    let number = path
        .file_name()
        .and_then(|name| parse_name(&name.to_string_lossy()))
        .ok_or_else(|| Error::InvalidArgument(format!("{} is not a log file name", path.display())))?;
    let mut batch = Batch::new();
    let mut expected_seq = None;
    read_log(fs, path, number, |at, payload| {
        let first_seq = decode_payload(payload, &mut batch)
            .ok_or_else(|| Error::corruption(path, at, "log frame: malformed payload"))?;
        if expected_seq.is_some_and(|expected| expected != first_seq) {
            return Err(Error::corruption(
                path,
                at,
                format!("log frame starts at seq {first_seq}, expected {expected_seq:?}"),
            ));
        }
        expected_seq = Some(first_seq + batch.len() as u64);
        visit(&batch, first_seq)
    })
    .map(|end| end.end)
}

fn decode_payload(payload: &[u8], batch: &mut Batch) -> Option<u64> {
    batch.clear();
    let first_seq = u64::from_le_bytes(payload.get(..8)?.try_into().ok()?);
    let count = u32::from_le_bytes(payload.get(8..12)?.try_into().ok()?);
    let mut at = 12;
    for _ in 0..count {
        let header = payload.get(at..at + WRITE_HEADER_BYTES)?;
        let op = Op::from_byte(header[0])?;
        let key = u64::from_le_bytes(header[1..9].try_into().ok()?);
        let time = u64::from_le_bytes(header[9..17].try_into().ok()?);
        let len = u32::from_le_bytes(header[17..21].try_into().ok()?) as usize;
        at += WRITE_HEADER_BYTES;
        let value = payload.get(at..at.checked_add(len)?)?;
        at += len;
        batch.push(op, key, time, value);
    }
    (at == payload.len()).then_some(first_seq)
}

/// The log files in `names`, oldest first, with their paths.
pub fn logs_in(dir: &Path, names: &[String]) -> Vec<(u64, PathBuf)> {
    let mut logs: Vec<(u64, PathBuf)> = names
        .iter()
        .filter_map(|name| Some((parse_name(name)?, dir.join(name))))
        .collect();
    logs.sort();
    logs
}
