//! The write-ahead log: every batch is logged before it reaches the root
//! buffer, so an acknowledged write survives a crash before its root
//! spills. One log per root buffer; a log is deleted once the manifest
//! records that its root's records are in the tree.
//!
//! ```text
//! file  = frame*   (spillway_core::log: length u32 | block_crc(log number, offset, payload) u32 | payload)
//! frame payload = first sequence number u64 LE | records u32 LE | records (record::encode_body)
//! ```
//!
//! Recovery replays the logs in number order and ends each at its last
//! whole frame (point-in-time recovery: a torn last frame was never
//! acknowledged). Before a root is frozen its log is synced, so only the
//! newest log can end torn.

use std::path::Path;
use std::sync::Arc;

use spillway_core::log::{read_log, LogSync, LogWriter};
use spillway_core::{Error, Fs, Result};

use crate::batch::WriteBatch;

const PAYLOAD_HEADER_BYTES: usize = 12;

/// The file name of log `number`.
pub fn file_name(number: u64) -> String {
    format!("{number:06}.log")
}

/// The number a log file name stands for.
pub fn parse_name(name: &str) -> Option<u64> {
    name.strip_suffix(".log")?.parse().ok()
}

/// An open log being appended to (under the writers' lock).
#[derive(Debug)]
pub struct Wal {
    log: LogWriter,
}

impl Wal {
    /// Creates log `number` in `dir`, its name durable.
    pub fn create(fs: &dyn Fs, dir: &Path, number: u64) -> Result<Wal> {
        let log = LogWriter::create(fs, &dir.join(file_name(number)), number)?;
        fs.sync_dir(dir)?;
        Ok(Wal { log })
    }

    /// Appends `batch`, its writes numbered from `first_seq`; returns the
    /// log's end after it, for [`LogSync::sync_to`].
    pub fn append(&mut self, batch: &WriteBatch, first_seq: u64) -> Result<u64> {
        self.log.append_with(|frame| {
            frame.extend_from_slice(&first_seq.to_le_bytes());
            frame.extend_from_slice(&(batch.len() as u32).to_le_bytes());
            frame.extend_from_slice(batch.data());
        })
    }

    /// Bytes written.
    pub fn written(&self) -> u64 {
        self.log.written()
    }

    /// The handle that syncs the log.
    pub fn sync(&self) -> &Arc<LogSync> {
        self.log.sync()
    }
}

/// Replays log `number` in `dir`: calls `visit` with each batch and its
/// first sequence number, in order. Returns the end of the last whole
/// frame.
pub fn replay(
    fs: &dyn Fs,
    dir: &Path,
    number: u64,
    mut visit: impl FnMut(WriteBatch, u64) -> Result<()>,
) -> Result<u64> {
    let path = dir.join(file_name(number));
    read_log(fs, &path, number, |offset, payload| {
        let corrupt = |what: String| Error::corruption(&path, offset, format!("log frame: {what}"));
        if payload.len() < PAYLOAD_HEADER_BYTES {
            return Err(corrupt(format!("payload of {} bytes", payload.len())));
        }
        let first_seq = u64::from_le_bytes(payload[..8].try_into().expect("8 bytes"));
        let count = u32::from_le_bytes(payload[8..12].try_into().expect("4 bytes")) as usize;
        let batch = WriteBatch::decode(&payload[PAYLOAD_HEADER_BYTES..], count)
            .map_err(|error| corrupt(error.what().to_string()))?;
        visit(batch, first_seq)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use spillway_core::{ErrorKind, SimFs};

    #[test]
    fn batches_replay_in_order_and_a_bad_payload_is_corruption() {
        let fs = SimFs::new();
        let dir = Path::new("/kv");
        fs.create_dir_all(dir).unwrap();
        let mut wal = Wal::create(&fs, dir, 3).unwrap();
        let mut batch = WriteBatch::new();
        batch.put(b"a", b"1").delete(b"b");
        wal.append(&batch, 10).unwrap();
        let mut second = WriteBatch::new();
        second.merge(b"c", b"x");
        let end = wal.append(&second, 12).unwrap();
        wal.sync().sync_to(end).unwrap();
        let mut replayed = Vec::new();
        let valid = replay(&fs, dir, 3, |batch, seq| {
            replayed.push((batch, seq));
            Ok(())
        })
        .unwrap();
        assert_eq!(valid, end);
        assert_eq!(replayed, vec![(batch, 10), (second, 12)]);
        assert_eq!(parse_name(&file_name(3)), Some(3));

        // A frame whose checksum is right but whose payload is not a batch.
        let mut log = LogWriter::create(&fs, &dir.join(file_name(4)), 4).unwrap();
        log.append(&[0; 12]).unwrap();
        log.append(b"not a batch at all").unwrap();
        let error = replay(&fs, dir, 4, |_, _| Ok(())).unwrap_err();
        assert_eq!(error.kind(), ErrorKind::Corruption);
        assert!(error.to_string().contains("000004.log"), "{error}");
    }
}
