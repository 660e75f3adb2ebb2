//! Logs of checksummed frames: the framing shared by write-ahead logs and
//! manifests.
//!
//! ```text
//! frame = payload length u32 LE | block_crc(log number, frame offset, payload) u32 LE | payload
//! ```
//!
//! A log is only ever appended to. A crash can leave its last frame torn
//! (cut short, or with bytes that never reached the disk); that frame was
//! never acknowledged, so [`read_log`] ends the log before it. A bad frame
//! with more log after it cannot come from a torn append and is reported as
//! corruption.
//!
//! A log may also be written over a file of zeros prepared for it
//! ([`LogWriter::over`]): overwriting blocks a file already has changes
//! none of its metadata, so a sync after each frame flushes the data alone
//! and skips the file system's journal commit that an append's new length
//! costs (about half the time of a small synced append on ext4). Zeros
//! after the last frame are not log: a log ends where only zeros follow,
//! and a bad frame is torn if nothing but zeros follows its extent.
//!
//! A log over zeros writes whole pages: each append rewrites the page
//! the log ends in, with the new frame and zeros up to the next page
//! boundary. A partial page written through the page cache makes the
//! kernel read that page first when it is not cached (a spare written
//! with direct I/O never is), a synchronous read per append; and whole
//! aligned pages let the file be opened with direct I/O, which skips the
//! copy into the page cache and its writeback (a synced 19 KB append on
//! ext4: 200 us through the cache with those reads, 100 us direct,
//! measured). Rewriting the bytes of frames already synced is safe: they
//! are written unchanged, so a write torn at any sector leaves them as
//! they were.
//!
//! Group commit: writers append under their own lock and then call
//! [`LogSync::sync_to`] outside it; one `fdatasync` covers every frame
//! written when it starts, so writers that wait together share it.
//!
//! **Padded logs** ([`LogWriter::padded`]): a crash cannot make a file
//! shorter than a length it synced, so a log that always keeps zeros
//! after its last frame, and makes each extension durable before any
//! frame is written into it, can tell damage from a crash: its frames
//! are followed by zeros ([`Tail::Zeros`]) or end in a torn write
//! ([`Tail::Torn`]), and a file that ends at or inside its last frame
//! ([`Tail::Clean`], [`Tail::CutShort`]) was cut by something else. An
//! appending log without padding cannot: a crash can leave its last frame
//! cut by the end of the file.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::fs::{AlignedBuffer, DIRECT_IO_ALIGNMENT_BYTES};
use crate::sync;
use crate::{block_crc, Error, Fs, FsFile, Result};

const PAGE_BYTES: usize = DIRECT_IO_ALIGNMENT_BYTES as usize;

/// Bytes before each frame's payload.
pub const FRAME_HEADER_BYTES: usize = 8;

/// An open log being appended to (by one writer at a time).
#[derive(Debug)]
pub struct LogWriter {
    shared: Arc<LogSync>,
    number: u64,
    /// The end of what was written; the next frame goes there.
    written: u64,
    frame: Vec<u8>,
    /// For a log over zeros: where whole pages are assembled, starting
    /// with the bytes of the page the log ends in (module docs).
    pages: Option<AlignedBuffer>,
    /// For a padded log: the file's durable length, which stays past the
    /// last frame (module docs); `None` for a log that appends.
    padded_len: Option<u64>,
}

/// Bytes a padded log grows by at least, in zeros made durable before use.
const PADDING_BYTES_MIN: u64 = 64 << 10;
/// Bytes of zeros written by one call while a padded log grows.
const PADDING_WRITE_BYTES_MAX: usize = 1 << 20;

/// The part of a log that syncs, shared so writers wait for the disk
/// outside the lock they append under.
#[derive(Debug)]
pub struct LogSync {
    file: Box<dyn FsFile>,
    written: AtomicU64,
    /// The end of what a sync made durable.
    synced: Mutex<u64>,
}

impl LogWriter {
    /// Creates (or truncates) the log at `path`, numbered `number` for its
    /// checksums. The caller makes the name durable (syncs the directory).
    pub fn create(fs: &dyn Fs, path: &Path, number: u64) -> Result<LogWriter> {
        Ok(Self::at_end(fs.create_or_truncate(path)?, number, 0))
    }

    /// Starts log `number` at the front of `file`, a file of zeros prepared
    /// for it (its length and blocks already durable), writing over the
    /// zeros instead of appending, in whole pages: `file` may be open with
    /// direct I/O. The caller makes the name durable.
    pub fn over(file: Box<dyn FsFile>, number: u64) -> LogWriter {
        LogWriter {
            pages: Some(AlignedBuffer::zeroed(PAGE_BYTES)),
            ..Self::at_end(file, number, 0)
        }
    }

    /// Makes `log` a padded log (module docs): before a frame would reach
    /// the end of the file, the file grows by zeros (at least 64 KiB, or
    /// a quarter of what the log holds), made durable before the frame is
    /// written, so that zeros always follow the last frame. `file_len` is
    /// the file's durable length now (0 for a new file). The growth costs
    /// one `fdatasync` per extension, so it suits logs that are synced
    /// anyway.
    pub fn padded(mut self, file_len: u64) -> LogWriter {
        self.padded_len = Some(file_len);
        self
    }

    /// A padded writer that appends to `file` (log `number`) from `end`,
    /// the end of its valid frames as [`read_log`] returned it. A torn
    /// frame past `end` is overwritten with zeros (made durable), not cut
    /// off: the zeros are the log's padding. `file` must not be open with
    /// direct I/O (the zeros start at an unaligned offset).
    pub fn reopen_padded(file: Box<dyn FsFile>, number: u64, end: LogEnd) -> Result<LogWriter> {
        if end.tail != Tail::Zeros && end.len > end.end {
            let zeros = vec![0u8; (end.len - end.end).min(PADDING_WRITE_BYTES_MAX as u64) as usize];
            let mut offset = end.end;
            while offset < end.len {
                let piece = (zeros.len() as u64).min(end.len - offset) as usize;
                file.write_at(&zeros[..piece], offset)?;
                offset += piece as u64;
            }
            file.sync_data()?;
        }
        Ok(Self::at_end(file, number, end.end).padded(end.len))
    }

    /// Cuts off whatever lies past the frames written (the zeros of a file
    /// the log was written over) and makes the log durable, so that a log
    /// that is no longer written to ends at its last frame.
    pub fn seal(&self) -> Result<()> {
        let file = &self.shared.file;
        if file.len()? <= self.written {
            return self.shared.sync_to(self.written);
        }
        file.set_len(self.written)?;
        file.sync_data()?;
        *sync::lock(&self.shared.synced) = self.written;
        Ok(())
    }

    /// A writer that appends to `file` (log `number`) from `end`, the end
    /// of its valid frames as [`read_log`] returned it; anything after
    /// `end` (a torn frame) is cut off first.
    pub fn reopen(file: Box<dyn FsFile>, number: u64, end: u64) -> Result<LogWriter> {
        if file.len()? != end {
            file.set_len(end)?;
            file.sync_data()?;
        }
        Ok(Self::at_end(file, number, end))
    }

    fn at_end(file: Box<dyn FsFile>, number: u64, end: u64) -> LogWriter {
        LogWriter {
            shared: Arc::new(LogSync {
                file,
                written: AtomicU64::new(end),
                synced: Mutex::new(end),
            }),
            number,
            written: end,
            frame: Vec::new(),
            pages: None,
            padded_len: None,
        }
    }

    /// Appends one frame whose payload `encode` writes into the (empty)
    /// buffer it is given; returns the log's end after it, for
    /// [`LogSync::sync_to`]. The buffer is kept, so appends allocate only
    /// while frames grow.
    pub fn append_with(&mut self, encode: impl FnOnce(&mut Vec<u8>)) -> Result<u64> {
        self.append_overlapped(encode, &mut || {})
    }

    /// Appends one frame as [`append_with`](Self::append_with) does,
    /// running `meanwhile` once while the frame is written
    /// ([`FsFile::write_at_overlapped`]: before the write's outcome is
    /// known). An error before the write (a frame over 4 GiB) runs nothing.
    pub fn append_overlapped(
        &mut self,
        encode: impl FnOnce(&mut Vec<u8>),
        meanwhile: &mut dyn FnMut(),
    ) -> Result<u64> {
        let frame = &mut self.frame;
        frame.clear();
        frame.extend_from_slice(&[0; FRAME_HEADER_BYTES]);
        encode(frame);
        let payload_len = u32::try_from(frame.len() - FRAME_HEADER_BYTES).map_err(|_| {
            Error::InvalidArgument(format!(
                "a log frame of {} bytes is larger than 4 GiB",
                frame.len()
            ))
        })?;
        let crc = block_crc(self.number, self.written, &frame[FRAME_HEADER_BYTES..]);
        frame[..4].copy_from_slice(&payload_len.to_le_bytes());
        frame[4..8].copy_from_slice(&crc.to_le_bytes());
        if let Some(padded_len) = self.padded_len {
            let needed = self.written + frame.len() as u64 + 1;
            if needed > padded_len {
                let grown = needed
                    .max(padded_len + PADDING_BYTES_MIN.max(self.written / 4))
                    .next_multiple_of(PAGE_BYTES as u64);
                grow_with_zeros(self.shared.file.as_ref(), padded_len, grown)?;
                self.padded_len = Some(grown);
            }
        }
        let frame = &self.frame;
        match &mut self.pages {
            None => self
                .shared
                .file
                .write_at_overlapped(frame, self.written, meanwhile)?,
            Some(pages) => write_pages(self.shared.file.as_ref(), pages, self.written, frame, meanwhile)?,
        }
        self.written += frame.len() as u64;
        self.shared.written.store(self.written, Ordering::Release);
        Ok(self.written)
    }

    /// Appends one frame holding `payload`.
    pub fn append(&mut self, payload: &[u8]) -> Result<u64> {
        self.append_with(|frame| frame.extend_from_slice(payload))
    }

    /// Bytes written.
    pub fn written(&self) -> u64 {
        self.written
    }

    /// The log's number.
    pub fn number(&self) -> u64 {
        self.number
    }

    /// The handle that syncs the log.
    pub fn sync(&self) -> &Arc<LogSync> {
        &self.shared
    }

    /// Makes everything written durable.
    pub fn sync_all(&self) -> Result<()> {
        self.shared.sync_to(self.written)
    }
}

/// Grows `file` from `from` to `to` bytes with zeros and makes them
/// durable. Writes from the page `from` lies in, in aligned pieces, so a
/// file open with direct I/O can grow too (the bytes of that page before
/// `from` are read and written back unchanged).
fn grow_with_zeros(file: &dyn FsFile, from: u64, to: u64) -> Result<()> {
    let start = from - from % PAGE_BYTES as u64;
    let mut zeros = AlignedBuffer::zeroed(PADDING_WRITE_BYTES_MAX.min((to - start) as usize));
    let mut offset = start;
    if from > start {
        let mut head = Vec::with_capacity(PAGE_BYTES);
        file.read_exact_append(&mut head, (from - start) as usize, start)?;
        zeros[..head.len()].copy_from_slice(&head);
    }
    while offset < to {
        let piece = (zeros.len() as u64).min(to - offset) as usize;
        file.write_at(&zeros[..piece], offset)?;
        if offset == start {
            zeros[..(from - start) as usize].fill(0);
        }
        offset += piece as u64;
    }
    file.sync_data()
}

/// Writes `frame` at `offset` of `file` in whole pages: `pages` starts
/// with the bytes of `offset`'s page before it (kept from the last call)
/// and is grown when the frame needs more pages. Leaves the bytes of the
/// page the frame ends in at the front of `pages`.
fn write_pages(
    file: &dyn FsFile,
    pages: &mut AlignedBuffer,
    offset: u64,
    frame: &[u8],
    meanwhile: &mut dyn FnMut(),
) -> Result<()> {
    let head = offset as usize % PAGE_BYTES;
    let end = head + frame.len();
    let padded = end.next_multiple_of(PAGE_BYTES);
    if pages.len() < padded {
        let mut grown = AlignedBuffer::zeroed(padded.next_power_of_two());
        grown[..head].copy_from_slice(&pages[..head]);
        *pages = grown;
    }
    pages[head..end].copy_from_slice(frame);
    pages[end..padded].fill(0);
    file.write_at_overlapped(&pages[..padded], offset - head as u64, meanwhile)?;
    let last_page = padded - PAGE_BYTES;
    pages.copy_within(last_page..end, 0);
    Ok(())
}

impl LogSync {
    /// Makes the log durable at least up to `end`. Writers waiting for
    /// the same sync share it (group commit): one fsync covers everything
    /// written when it starts.
    pub fn sync_to(&self, end: u64) -> Result<()> {
        let mut synced = sync::lock(&self.synced);
        if *synced >= end {
            return Ok(());
        }
        let covered = self.written.load(Ordering::Acquire);
        self.file.sync_data()?;
        *synced = covered;
        Ok(())
    }

    /// Whether everything written is durable.
    pub fn is_synced(&self) -> bool {
        let synced = *sync::lock(&self.synced);
        synced >= self.written.load(Ordering::Acquire)
    }
}

/// How a log's bytes end after its last whole frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tail {
    /// The last frame ends where the file ends.
    Clean,
    /// Only zeros follow the last frame (a log written over zeros, or a
    /// padded log).
    Zeros,
    /// A frame that fails its checksum lies within the file with only
    /// zeros after it: a write torn by a crash.
    Torn,
    /// The file ends inside a frame (its header or payload runs past the
    /// end), and no whole frame follows the header.
    CutShort,
}

/// Where a log's valid frames end, as [`read_log`] found it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogEnd {
    /// The end of the last whole frame: where the next frame goes.
    pub end: u64,
    /// The file's length.
    pub len: u64,
    /// What follows `end`.
    pub tail: Tail,
}

impl LogEnd {
    /// Whether a crash of a padded log's writer explains this end (zeros
    /// after the frames, or a torn write with zeros after it). Anything
    /// else means the file was cut.
    pub fn padded_crash_tail(&self) -> bool {
        matches!(self.tail, Tail::Zeros | Tail::Torn)
    }

    /// Whether the log holds exactly its frames, as a sealed log does.
    pub fn is_clean(&self) -> bool {
        self.tail == Tail::Clean
    }
}

/// Reads log `number` at `path` whole and calls `visit` with each frame's
/// offset and payload, in order. Returns where the valid frames end and
/// what follows them.
///
/// A frame that fails its checksum or is cut short ends the log only if
/// no valid frame follows it (only zeros after a bad checksum; no frame
/// anywhere after a header that runs past the end); otherwise the log is
/// corrupt, and the error names the file and the frame's offset. Whether
/// a torn or cut-short end is acceptable is the caller's to judge (see
/// [`LogEnd::padded_crash_tail`]). An error from `visit` ends the read.
pub fn read_log(
    fs: &dyn Fs,
    path: &Path,
    number: u64,
    mut visit: impl FnMut(u64, &[u8]) -> Result<()>,
) -> Result<LogEnd> {
    let file = fs.open_read(path)?;
    let len = file.len()? as usize;
    let mut bytes = Vec::with_capacity(len);
    file.read_exact_append(&mut bytes, len, 0)?;
    read_frames(path, number, &bytes, &mut visit)
}

/// [`read_log`] over bytes already in memory (`path` names them in errors).
pub fn read_frames(
    path: &Path,
    number: u64,
    bytes: &[u8],
    mut visit: impl FnMut(u64, &[u8]) -> Result<()>,
) -> Result<LogEnd> {
    // Past the last byte that is not zero lies no frame: a log written
    // over zeros ends there.
    let written = bytes
        .iter()
        .rposition(|&byte| byte != 0)
        .map_or(0, |last| last + 1);
    let len = bytes.len() as u64;
    let mut at = 0usize;
    while at < bytes.len() {
        if at >= written {
            return Ok(LogEnd {
                end: at as u64,
                len,
                tail: Tail::Zeros,
            });
        }
        let corrupt = |what: &str| Err(Error::corruption(path, at as u64, format!("log frame: {what}")));
        let cut_short = |what: &str| {
            if frame_after(number, bytes, at + 1).is_some() {
                corrupt(what)
            } else {
                Ok(LogEnd {
                    end: at as u64,
                    len,
                    tail: Tail::CutShort,
                })
            }
        };
        let Some(header) = bytes.get(at..at + FRAME_HEADER_BYTES) else {
            return cut_short("truncated header");
        };
        let payload_len = u32::from_le_bytes(header[..4].try_into().expect("4 bytes")) as usize;
        let crc = u32::from_le_bytes(header[4..].try_into().expect("4 bytes"));
        let end = at + FRAME_HEADER_BYTES + payload_len;
        let Some(payload) = bytes.get(at + FRAME_HEADER_BYTES..end) else {
            return cut_short("the file ends inside it");
        };
        if block_crc(number, at as u64, payload) != crc {
            if end >= written {
                // The last frame, never acknowledged: its write was torn.
                return Ok(LogEnd {
                    end: at as u64,
                    len,
                    tail: Tail::Torn,
                });
            }
            return corrupt("checksum mismatch");
        }
        visit(at as u64, payload)?;
        at = end;
    }
    Ok(LogEnd {
        end: at as u64,
        len,
        tail: Tail::Clean,
    })
}

/// The offset of the first valid frame of log `number` that starts at or
/// after `from` in `bytes`, if any: a frame whose header is intact after a
/// damaged one shows that the damage is not a torn end. Only for errors
/// and ends: it tries every offset.
fn frame_after(number: u64, bytes: &[u8], from: usize) -> Option<usize> {
    (from..bytes.len().saturating_sub(FRAME_HEADER_BYTES)).find(|&at| {
        let payload_len = u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes")) as usize;
        let crc = u32::from_le_bytes(bytes[at + 4..at + 8].try_into().expect("4 bytes"));
        let start = at + FRAME_HEADER_BYTES;
        payload_len > 0
            && start
                .checked_add(payload_len)
                .and_then(|end| bytes.get(start..end))
                .is_some_and(|payload| block_crc(number, at as u64, payload) == crc)
    })
}

/// Rewrites the checksum of every whole frame in `bytes` (log `number`)
/// to match its payload, so that a fuzzer's mutations reach the checks
/// behind the checksums. Stops at the first frame that runs past the end.
pub fn reseal_frames(number: u64, bytes: &mut [u8]) {
    let mut at = 0usize;
    while at + FRAME_HEADER_BYTES <= bytes.len() {
        let payload_len = u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes")) as usize;
        let start = at + FRAME_HEADER_BYTES;
        let Some(end) = start.checked_add(payload_len).filter(|&end| end <= bytes.len()) else {
            return;
        };
        let crc = block_crc(number, at as u64, &bytes[start..end]);
        bytes[at + 4..start].copy_from_slice(&crc.to_le_bytes());
        at = end;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::{CrashMode, TearGranularity};
    use crate::{ErrorKind, SimFs};

    fn frames_of(fs: &SimFs, path: &Path, number: u64) -> Result<(Vec<Vec<u8>>, u64)> {
        let (frames, end) = read_whole(fs, path, number)?;
        Ok((frames, end.end))
    }

    fn read_whole(fs: &SimFs, path: &Path, number: u64) -> Result<(Vec<Vec<u8>>, LogEnd)> {
        let mut frames = Vec::new();
        let end = read_log(fs, path, number, |_, payload| {
            frames.push(payload.to_vec());
            Ok(())
        })?;
        Ok((frames, end))
    }

    #[test]
    fn frames_round_trip_and_a_torn_tail_ends_the_log() {
        let fs = SimFs::new();
        fs.create_dir_all(Path::new("/d")).unwrap();
        let path = Path::new("/d/000001.log");
        let mut log = LogWriter::create(&fs, path, 1).unwrap();
        let first = log.append(b"one").unwrap();
        log.append_with(|frame| frame.extend_from_slice(b"two!")).unwrap();
        log.sync_all().unwrap();
        assert!(log.sync().is_synced());
        let (frames, end) = frames_of(&fs, path, 1).unwrap();
        assert_eq!(frames, vec![b"one".to_vec(), b"two!".to_vec()]);
        assert_eq!(end, log.written());

        // Cut the last frame short: the log ends after the first.
        let file = fs.open_read_write(path).unwrap();
        file.set_len(end - 1).unwrap();
        let (frames, valid) = frames_of(&fs, path, 1).unwrap();
        assert_eq!((frames.len(), valid), (1, first));

        // A writer reopened at the valid end cuts the torn bytes and goes on.
        let mut log = LogWriter::reopen(file, 1, valid).unwrap();
        log.append(b"three").unwrap();
        let (frames, _) = frames_of(&fs, path, 1).unwrap();
        assert_eq!(frames, vec![b"one".to_vec(), b"three".to_vec()]);
    }

    #[test]
    fn a_bad_frame_before_the_end_is_corruption_and_the_number_is_checked() {
        let fs = SimFs::new();
        fs.create_dir_all(Path::new("/d")).unwrap();
        let path = Path::new("/d/000002.log");
        let mut log = LogWriter::create(&fs, path, 2).unwrap();
        log.append(b"alpha").unwrap();
        log.append(b"beta").unwrap();
        let file = fs.open_read_write(path).unwrap();
        file.write_at(b"A", FRAME_HEADER_BYTES as u64).unwrap();
        let error = frames_of(&fs, path, 2).unwrap_err();
        assert_eq!(error.kind(), ErrorKind::Corruption);
        assert!(error.to_string().contains("at offset 0"), "{error}");

        let mut log = LogWriter::create(&fs, path, 2).unwrap();
        log.append(b"alpha").unwrap();
        log.append(b"beta").unwrap();
        // Read as another log number, every frame fails its checksum.
        let error = frames_of(&fs, path, 3).unwrap_err();
        assert_eq!(error.kind(), ErrorKind::Corruption);
        // Resealed as log 3, the frames read back.
        let file = fs.open_read(path).unwrap();
        let mut bytes = Vec::new();
        file.read_exact_append(&mut bytes, file.len().unwrap() as usize, 0)
            .unwrap();
        reseal_frames(3, &mut bytes);
        let mut payloads = Vec::new();
        read_frames(path, 3, &bytes, |_, payload| {
            payloads.push(payload.to_vec());
            Ok(())
        })
        .unwrap();
        assert_eq!(payloads, vec![b"alpha".to_vec(), b"beta".to_vec()]);
    }

    #[test]
    fn a_log_over_zeros_ends_at_its_last_frame_and_a_seal_cuts_the_zeros() {
        let fs = SimFs::new();
        fs.create_dir_all(Path::new("/d")).unwrap();
        let path = Path::new("/d/000005.log");
        let zeros = vec![0u8; 4096];
        fs.create_or_truncate(path).unwrap().write_at(&zeros, 0).unwrap();

        // Nothing written yet: an empty log, not a torn one.
        assert_eq!(frames_of(&fs, path, 5).unwrap(), (Vec::new(), 0));

        let mut log = LogWriter::over(fs.open_read_write(path).unwrap(), 5);
        log.append(b"one").unwrap();
        // A payload that ends in zeros is read whole all the same.
        let second_end = log.append(&[7, 0, 0, 0]).unwrap();
        log.sync_all().unwrap();
        assert_eq!(fs.file_len(path).unwrap(), 4096, "written over, not appended");
        let (frames, end) = frames_of(&fs, path, 5).unwrap();
        assert_eq!(frames, vec![b"one".to_vec(), vec![7, 0, 0, 0]]);
        assert_eq!(end, second_end);

        // A frame torn after its first bytes, zeros behind it: the torn end.
        let third_end = log.append(b"three, torn").unwrap();
        let file = fs.open_read_write(path).unwrap();
        file.write_at(&zeros[..6], third_end - 6).unwrap();
        assert_eq!(frames_of(&fs, path, 5).unwrap().1, second_end);

        // A bad frame with a good one after it is still corruption. (The
        // append rewrites the page it shares with the torn frame, so the
        // frame is damaged again after it.)
        log.append(b"four").unwrap();
        file.write_at(&zeros[..6], third_end - 6).unwrap();
        let error = frames_of(&fs, path, 5).unwrap_err();
        assert_eq!(error.kind(), ErrorKind::Corruption);
        assert!(
            error.to_string().contains(&format!("at offset {second_end}")),
            "{error}"
        );

        // Sealed, the log is its frames alone.
        log.seal().unwrap();
        assert_eq!(fs.file_len(path).unwrap(), log.written());
        assert!(log.sync().is_synced());
    }

    #[test]
    fn a_direct_log_over_zeros_writes_whole_pages_and_keeps_synced_frames_through_torn_crashes() {
        let payload =
            |n: usize| -> Vec<u8> { (0..n * 997 % 9000 + 1).map(|i| (i * 31 + n) as u8 | 1).collect() };
        for seed in 0..40 {
            let fs = SimFs::new();
            fs.create_dir_all(Path::new("/d")).unwrap();
            let path = Path::new("/d/000009.log");
            let spare = fs.create_or_truncate(path).unwrap();
            spare.write_at(&vec![0u8; 3 * PAGE_BYTES], 0).unwrap();
            spare.sync_data().unwrap();
            fs.sync_dir(Path::new("/d")).unwrap();
            let file = fs
                .open(path, crate::OpenOptions::read_write().with_direct(true))
                .unwrap();
            let mut log = LogWriter::over(file, 9);
            // Frames across page boundaries, some past the spare's end;
            // the first `synced` of them synced.
            let synced = seed % 7 + 1;
            let mut end = 0;
            for n in 0..synced {
                end = log.append(&payload(n)).unwrap();
            }
            log.sync().sync_to(end).unwrap();
            for n in synced..synced + 3 {
                log.append(&payload(n)).unwrap();
            }
            let (frames, _) = frames_of(&fs, path, 9).unwrap();
            assert_eq!(frames, (0..synced + 3).map(payload).collect::<Vec<_>>());
            assert!(fs.file_len(path).unwrap().is_multiple_of(PAGE_BYTES as u64));

            fs.crash(CrashMode::TearUnsynced {
                seed: seed as u64,
                granularity: TearGranularity::Sector,
            });
            let (frames, valid) = frames_of(&fs, path, 9).unwrap();
            assert!(valid >= end, "seed {seed}: synced frames lost");
            assert_eq!(frames[..synced], (0..synced).map(payload).collect::<Vec<_>>()[..]);
            for (n, frame) in frames.iter().enumerate() {
                assert_eq!(frame, &payload(n), "seed {seed}: frame {n} survived changed");
            }
        }
    }

    #[test]
    fn a_flipped_length_in_a_middle_frame_is_corruption_not_a_torn_end() {
        let fs = SimFs::new();
        fs.create_dir_all(Path::new("/d")).unwrap();
        let path = Path::new("/d/000003.log");
        let mut log = LogWriter::create(&fs, path, 3).unwrap();
        let first = log.append(b"alpha").unwrap();
        log.append(b"beta").unwrap();
        log.append(b"gamma").unwrap();
        // The second frame's length now runs past the end of the file;
        // the third frame is still there behind it.
        let file = fs.open_read_write(path).unwrap();
        file.write_at(&[0x7f], first + 3).unwrap();
        let error = frames_of(&fs, path, 3).unwrap_err();
        assert_eq!(error.kind(), ErrorKind::Corruption);
        assert!(
            error.to_string().contains(&format!("at offset {first}")),
            "{error}"
        );
    }

    #[test]
    fn tails_tell_zeros_torn_writes_and_cut_files_apart() {
        let fs = SimFs::new();
        fs.create_dir_all(Path::new("/d")).unwrap();
        let path = Path::new("/d/000004.log");
        let mut log = LogWriter::create(&fs, path, 4).unwrap();
        let first = log.append(b"one").unwrap();
        let end = log.append(b"two, a longer frame").unwrap();
        assert_eq!(read_whole(&fs, path, 4).unwrap().1.tail, Tail::Clean);
        let file = fs.open_read_write(path).unwrap();
        file.set_len(end - 4).unwrap();
        let (frames, cut) = read_whole(&fs, path, 4).unwrap();
        assert_eq!((frames.len(), cut.tail, cut.len), (1, Tail::CutShort, end - 4));
        assert!(!cut.padded_crash_tail());
        file.set_len(end + 100).unwrap();
        let (frames, zeros) = read_whole(&fs, path, 4).unwrap();
        assert_eq!((frames.len(), zeros.end, zeros.tail), (1, first, Tail::Torn));
        assert!(zeros.padded_crash_tail());
    }

    #[test]
    fn a_padded_log_keeps_zeros_after_its_frames_and_survives_torn_crashes() {
        let payload = |n: usize| -> Vec<u8> {
            (0..n * 7919 % 30_000 + 1)
                .map(|i| (i * 13 + n) as u8 | 1)
                .collect()
        };
        for seed in 0..30u64 {
            let fs = SimFs::new();
            fs.create_dir_all(Path::new("/d")).unwrap();
            let path = Path::new("/d/000006.log");
            let mut log = LogWriter::create(&fs, path, 6).unwrap().padded(0);
            fs.sync_dir(Path::new("/d")).unwrap();
            let synced = seed as usize % 9 + 1;
            let mut end = 0;
            for n in 0..synced {
                end = log.append(&payload(n)).unwrap();
                assert!(fs.file_len(path).unwrap() > end, "zeros follow the last frame");
            }
            log.sync_all().unwrap();
            for n in synced..synced + 3 {
                log.append(&payload(n)).unwrap();
            }
            let (frames, whole) = read_whole(&fs, path, 6).unwrap();
            assert_eq!(frames.len(), synced + 3);
            assert_eq!(whole.tail, Tail::Zeros);

            fs.crash(CrashMode::TearUnsynced {
                seed,
                granularity: TearGranularity::Sector,
            });
            let (frames, after) = read_whole(&fs, path, 6).unwrap();
            assert!(after.end >= end, "seed {seed}: synced frames lost");
            assert!(
                after.padded_crash_tail(),
                "seed {seed}: a crash read as a cut file: {after:?}"
            );
            for (n, frame) in frames.iter().enumerate() {
                assert_eq!(frame, &payload(n), "seed {seed}: frame {n} changed");
            }

            // Reopened, the torn bytes become padding and the log goes on.
            let file = fs.open_read_write(path).unwrap();
            let mut log = LogWriter::reopen_padded(file, 6, after).unwrap();
            log.append(b"after the crash").unwrap();
            let (frames, again) = read_whole(&fs, path, 6).unwrap();
            assert_eq!(frames.last().unwrap(), b"after the crash");
            assert_eq!(again.tail, Tail::Zeros);

            // Cut to half, it ends at or inside a frame: not a crash.
            let len = fs.file_len(path).unwrap();
            fs.open_read_write(path).unwrap().set_len(again.end / 2).unwrap();
            match read_whole(&fs, path, 6) {
                Ok((_, cut)) => assert!(!cut.padded_crash_tail(), "seed {seed}: {cut:?} of {len}"),
                Err(error) => assert_eq!(error.kind(), ErrorKind::Corruption),
            }
        }
    }
}
