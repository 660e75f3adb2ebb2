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
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use spillway_core::{block_crc, Error, Fs, FsFile, Result};

use crate::batch::{Batch, Op};

const FRAME_HEADER_BYTES: usize = 8;
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
    shared: Arc<WalSync>,
    number: u64,
    /// The end of what was written; frames go there.
    written: u64,
    frame: Vec<u8>,
}

/// The part of a log that syncs, outside the writers' lock, so writers
/// go on appending while one of them waits for the disk.
#[derive(Debug)]
pub struct WalSync {
    file: Box<dyn FsFile>,
    written: AtomicU64,
    /// The end of what a sync made durable.
    synced: Mutex<u64>,
}

impl Wal {
    /// Creates log `number` in `dir`, its name durable.
    pub fn create(fs: &dyn Fs, dir: &Path, number: u64) -> Result<Wal> {
        let file = fs.create_or_truncate(&dir.join(file_name(number)))?;
        fs.sync_dir(dir)?;
        Ok(Wal {
            shared: Arc::new(WalSync {
                file,
                written: AtomicU64::new(0),
                synced: Mutex::new(0),
            }),
            number,
            written: 0,
            frame: Vec::new(),
        })
    }

    /// Appends `batch`, numbered from `first_seq`; returns the log's end
    /// after it, for [`WalSync::sync_to`].
    pub fn append(&mut self, batch: &Batch, first_seq: u64) -> Result<u64> {
        let frame = &mut self.frame;
        frame.clear();
        frame.extend_from_slice(&[0; FRAME_HEADER_BYTES]);
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
        let payload_len = (frame.len() - FRAME_HEADER_BYTES) as u32;
        let crc = block_crc(self.number, self.written, &frame[FRAME_HEADER_BYTES..]);
        frame[..4].copy_from_slice(&payload_len.to_le_bytes());
        frame[4..8].copy_from_slice(&crc.to_le_bytes());
        self.shared.file.write_at(frame, self.written)?;
        self.written += frame.len() as u64;
        self.shared.written.store(self.written, Ordering::Release);
        Ok(self.written)
    }

    /// Bytes written.
    pub fn written(&self) -> u64 {
        self.written
    }

    /// The handle that syncs the log.
    pub fn sync(&self) -> &Arc<WalSync> {
        &self.shared
    }
}

impl WalSync {
    /// Makes the log durable at least up to `end`. Writers waiting for
    /// the same sync share it (group commit): one fsync covers everything
    /// written when it starts.
    pub fn sync_to(&self, end: u64) -> Result<()> {
        let mut synced = self.synced.lock().unwrap_or_else(PoisonError::into_inner);
        if *synced >= end {
            return Ok(());
        }
        let covered = self.written.load(Ordering::Acquire);
        self.file.sync_data()?;
        *synced = covered;
        Ok(())
    }
}

/// Reads the log at `path` and calls `visit` with each
/// batch and its first sequence number. Returns the log's valid length.
pub fn replay(fs: &dyn Fs, path: &Path, mut visit: impl FnMut(&Batch, u64) -> Result<()>) -> Result<u64> {
    let number = path
        .file_name()
        .and_then(|name| parse_name(&name.to_string_lossy()))
        .ok_or_else(|| Error::InvalidArgument(format!("{} is not a log file name", path.display())))?;
    let file = fs.open_read(path)?;
    let len = file.len()?;
    let mut bytes = Vec::with_capacity(len as usize);
    file.read_exact_append(&mut bytes, len as usize, 0)?;
    let mut at = 0usize;
    let mut batch = Batch::new();
    let mut expected_seq = None;
    while at < bytes.len() {
        let torn_or_corrupt = |what: &str, frame_end: usize| -> Result<u64> {
            if frame_end >= bytes.len() {
                // The last frame, never acknowledged: its write was torn.
                Ok(at as u64)
            } else {
                Err(Error::corruption(path, at as u64, format!("log frame: {what}")))
            }
        };
        let Some(header) = bytes.get(at..at + FRAME_HEADER_BYTES) else {
            return torn_or_corrupt("truncated header", bytes.len());
        };
        let payload_len = u32::from_le_bytes(header[..4].try_into().expect("4 bytes")) as usize;
        let crc = u32::from_le_bytes(header[4..].try_into().expect("4 bytes"));
        let end = at + FRAME_HEADER_BYTES + payload_len;
        let Some(payload) = bytes.get(at + FRAME_HEADER_BYTES..end) else {
            return torn_or_corrupt("truncated payload", bytes.len());
        };
        if block_crc(number, at as u64, payload) != crc {
            return torn_or_corrupt("checksum mismatch", end);
        }
        let first_seq = decode_payload(payload, &mut batch)
            .ok_or_else(|| Error::corruption(path, at as u64, "log frame: malformed payload"))?;
        if expected_seq.is_some_and(|expected| expected != first_seq) {
            return Err(Error::corruption(
                path,
                at as u64,
                format!("log frame starts at seq {first_seq}, expected {expected_seq:?}"),
            ));
        }
        expected_seq = Some(first_seq + batch.len() as u64);
        visit(&batch, first_seq)?;
        at = end;
    }
    Ok(at as u64)
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
