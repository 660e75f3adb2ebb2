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
//! acknowledged). Before a root is frozen its log is sealed (cut to its
//! frames and synced), so only the newest log can end torn.
//!
//! With a log synced after every batch, most of a writer's time went to
//! the syncs, and half of each sync to the journal commit that an append's
//! new file length costs. So the worker prepares the next log ahead of
//! time: a file of zeros ([`SPARE_NAME`]), written and synced, as long as
//! the last log grew. Freezing a root renames it to the new log's name,
//! and the new log writes over its zeros ([`LogWriter::over`]) in whole
//! pages with direct I/O, each sync then flushing data alone. A spare
//! left by a crash is deleted on open.

use std::path::Path;
use std::sync::Arc;

use spillway_core::fs::{
    create_or_truncate_preferring_direct, open_preferring_direct, AlignedBuffer, DIRECT_IO_ALIGNMENT_BYTES,
};
use spillway_core::log::{read_log, LogSync, LogWriter};
use spillway_core::{Error, Fs, OpenOptions, Result};

use crate::batch::WriteBatch;

const PAYLOAD_HEADER_BYTES: usize = 12;
/// The file name of the next log, prepared as zeros before it is needed.
pub const SPARE_NAME: &str = "SPARE.log";
/// Bytes of zeros written at once into a spare.
const ZEROS_BYTES: usize = 1 << 20;

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

    /// Starts log `number` in `dir` over the spare that
    /// [`prepare_spare`] left there, its name durable.
    pub fn over_spare(fs: &dyn Fs, dir: &Path, number: u64) -> Result<Wal> {
        let path = dir.join(file_name(number));
        fs.rename(&dir.join(SPARE_NAME), &path)?;
        let (file, _) = open_preferring_direct(fs, &path, OpenOptions::read_write())?;
        let log = LogWriter::over(file, number);
        fs.sync_dir(dir)?;
        Ok(Wal { log })
    }

    /// Cuts the log to its frames and syncs it: it is written no more.
    pub fn seal(&self) -> Result<()> {
        self.log.seal()
    }

    /// Appends `batch`, its writes numbered from `first_seq`, running
    /// `meanwhile` while the frame is written
    /// ([`LogWriter::append_overlapped`]); returns the log's end after it,
    /// for [`LogSync::sync_to`].
    pub fn append(&mut self, batch: &WriteBatch, first_seq: u64, meanwhile: &mut dyn FnMut()) -> Result<u64> {
        let encode = |frame: &mut Vec<u8>| {
            frame.extend_from_slice(&first_seq.to_le_bytes());
            frame.extend_from_slice(&(batch.len() as u32).to_le_bytes());
            frame.extend_from_slice(batch.data());
        };
        self.log.append_overlapped(encode, meanwhile)
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

/// Writes a spare log of `bytes` zeros (rounded up to whole pages) in
/// `dir` and syncs it, replacing any spare there. Direct writes where the
/// file system allows them: zeros need no copy through the page cache.
pub fn prepare_spare(fs: &dyn Fs, dir: &Path, bytes: u64) -> Result<()> {
    let path = dir.join(SPARE_NAME);
    let (file, _) = create_or_truncate_preferring_direct(fs, &path)?;
    let bytes = bytes.next_multiple_of(DIRECT_IO_ALIGNMENT_BYTES);
    let zeros = AlignedBuffer::zeroed((ZEROS_BYTES as u64).min(bytes) as usize);
    let mut offset = 0;
    while offset < bytes {
        let piece = (zeros.len() as u64).min(bytes - offset) as usize;
        file.write_at(&zeros[..piece], offset)?;
        offset += piece as u64;
    }
    file.sync_data()
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
    .map(|end| end.end)
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
        let mut ran = 0;
        wal.append(&batch, 10, &mut || ran += 1).unwrap();
        let mut second = WriteBatch::new();
        second.merge(b"c", b"x");
        let end = wal.append(&second, 12, &mut || ran += 1).unwrap();
        assert_eq!(ran, 2, "each append runs its work once");
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
