//! The write-ahead log: every batch is logged before it reaches the root
//! buffer, so an acknowledged write survives a crash before its root
//! spills. One log per root buffer (and one more per open); a log is
//! deleted once the manifest records that its root's records are in the
//! tree.
//!
//! ```text
//! file    = header frame | batch frame* | [trailer frame] | zeros   (spillway_core::log frames:
//!           length u32 | block_crc(log number, offset, payload) u32 | payload)
//! header  = 1 u8 | "SPWKVLOG" | version u32 (2) | store id u64 | log number u64 |
//!           previous log u64 (0: none) | first write u64 | padded u8 | merge operator: length varint | bytes
//! batch   = 2 u8 | first write u64 | records u32 | records (record::encode_body)
//! trailer = 3 u8 | next log u64 (0: closed cleanly) | end write u64 (the first write after the log)
//! ```
//!
//! **The chain.** Logs form a chain that recovery follows from the
//! manifest's log number to the newest: each header names the log before
//! it and the first sequence number it holds, each sealed log ends with a
//! trailer naming its successor and the sequence number it ends at. A new
//! log is created (its header durable) before its predecessor's trailer
//! names it, so a crash between the two leaves a chain whose links the
//! successor's header still proves. A clean close gives the newest log a
//! closing trailer (next 0) and records it in the manifest, so an older
//! copy of it is told from it afterwards.
//!
//! **Padding.** With `SyncMode::Always` or `Periodic` a log is padded
//! ([`LogWriter::padded`]): zeros, made durable before any frame is
//! written into them, always follow its last frame, so a crash leaves it
//! ending in zeros or in a torn write with zeros after it, and a log that
//! ends at or inside a frame was cut (truncated, or replaced by a shorter
//! copy): corruption, not a torn tail. With `SyncMode::None` nothing is
//! promised durable and the padding (a sync per extension) is skipped:
//! such a log's header says so, and its end is taken as it is.
//!
//! **Spare logs.** With a log synced after every batch, most of a
//! writer's time went to the syncs, and half of each sync to the journal
//! commit that an append's new file length costs. So the worker prepares
//! the next log ahead of time: a file of zeros ([`SPARE_NAME`]), written
//! and synced, a quarter longer than the last log grew. Freezing a root
//! renames it to the new log's name, and the new log writes over its
//! zeros ([`LogWriter::over`], padded from the spare's length) in whole
//! pages with direct I/O, each sync then flushing data alone. A spare left
//! by a crash is only zeros and is deleted on open.

use std::path::Path;
use std::sync::Arc;

use spillway_core::fs::{
    create_or_truncate_preferring_direct, open_preferring_direct, AlignedBuffer, DIRECT_IO_ALIGNMENT_BYTES,
};
use spillway_core::log::{read_frames, LogEnd, LogSync, LogWriter, Tail, FRAME_HEADER_BYTES};
use spillway_core::varint;
use spillway_core::{block_crc, Error, Fs, OpenOptions, Result};

use crate::batch::WriteBatch;

const TAG_HEADER: u8 = 1;
const TAG_BATCH: u8 = 2;
const TAG_TRAILER: u8 = 3;
const HEADER_MAGIC: &[u8; 8] = b"SPWKVLOG";
/// The log format this build writes and reads.
pub const FORMAT_VERSION: u32 = 2;
/// Bytes of a batch frame's payload before its records.
const BATCH_HEADER_BYTES: usize = 13;
const TRAILER_BYTES: usize = 17;
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
    let digits = name.strip_suffix(".log")?;
    (!digits.is_empty() && digits.bytes().all(|byte| byte.is_ascii_digit()))
        .then(|| digits.parse().ok())
        .flatten()
}

/// A log's first frame: which store and chain it belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogHeader {
    /// The identity of the store (the manifest's snapshot holds it too).
    pub store_id: u64,
    /// The log's own number.
    pub number: u64,
    /// The log before it in the chain (0: none).
    pub previous: u64,
    /// The sequence number of its first write.
    pub first_seq: u64,
    /// Whether zeros always follow its last frame (module docs).
    pub padded: bool,
    /// The store's merge operator ("" for none), for repair.
    pub merge_name: String,
}

impl LogHeader {
    fn encode(&self, out: &mut Vec<u8>) {
        out.push(TAG_HEADER);
        out.extend_from_slice(HEADER_MAGIC);
        out.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
        for field in [self.store_id, self.number, self.previous, self.first_seq] {
            out.extend_from_slice(&field.to_le_bytes());
        }
        out.push(u8::from(self.padded));
        varint::encode_u64(self.merge_name.len() as u64, out);
        out.extend_from_slice(self.merge_name.as_bytes());
    }

    fn decode(payload: &[u8]) -> Result<LogHeader, String> {
        let fixed = 1 + 8 + 4 + 4 * 8 + 1;
        if payload.len() < fixed || payload[0] != TAG_HEADER {
            return Err("the first frame is not a log header".into());
        }
        if &payload[1..9] != HEADER_MAGIC {
            return Err("the header's magic is not SPWKVLOG".into());
        }
        let version = u32::from_le_bytes(payload[9..13].try_into().expect("4 bytes"));
        if version != FORMAT_VERSION {
            return Err(format!(
                "log format version {version}, this build reads version {FORMAT_VERSION}"
            ));
        }
        let u64_at = |at: usize| u64::from_le_bytes(payload[at..at + 8].try_into().expect("8 bytes"));
        let padded = match payload[45] {
            0 => false,
            1 => true,
            other => return Err(format!("padding flag {other}")),
        };
        let (len, used) = varint::decode_u64(&payload[fixed..]).map_err(|error| error.what().to_string())?;
        let name = payload
            .get(fixed + used..)
            .filter(|rest| rest.len() as u64 == len)
            .ok_or("the merge operator's name does not fill the header")?;
        Ok(LogHeader {
            store_id: u64_at(13),
            number: u64_at(21),
            previous: u64_at(29),
            first_seq: u64_at(37),
            padded,
            merge_name: String::from_utf8(name.to_vec()).map_err(|_| "merge operator name is not UTF-8")?,
        })
    }
}

/// A sealed log's last frame: its successor and where its writes end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogTrailer {
    /// The next log of the chain; 0 for a log closed cleanly (a later
    /// open's log names it in its header instead).
    pub next: u64,
    /// The sequence number after its last write.
    pub end_seq: u64,
}

impl LogTrailer {
    fn encode(&self, out: &mut Vec<u8>) {
        out.push(TAG_TRAILER);
        out.extend_from_slice(&self.next.to_le_bytes());
        out.extend_from_slice(&self.end_seq.to_le_bytes());
    }
}

/// An open log being appended to (under the writers' lock).
#[derive(Debug)]
pub struct Wal {
    log: LogWriter,
}

impl Wal {
    /// Creates the log `header` describes in `dir`, its header frame and
    /// its name durable (padded from the start if the header says so).
    pub fn create(fs: &dyn Fs, dir: &Path, header: &LogHeader) -> Result<Wal> {
        let mut log = LogWriter::create(fs, &dir.join(file_name(header.number)), header.number)?;
        if header.padded {
            log = log.padded(0);
        }
        Self::start(fs, dir, log, header)
    }

    /// Starts the log `header` describes in `dir` over the spare that
    /// [`prepare_spare`] left there (padded from its length), its header
    /// and name durable.
    pub fn over_spare(fs: &dyn Fs, dir: &Path, header: &LogHeader) -> Result<Wal> {
        let path = dir.join(file_name(header.number));
        let spare_len = fs.file_len(&dir.join(SPARE_NAME))?;
        fs.rename(&dir.join(SPARE_NAME), &path)?;
        let (file, _) = open_preferring_direct(fs, &path, OpenOptions::read_write())?;
        let log = LogWriter::over(file, header.number).padded(spare_len);
        Self::start(fs, dir, log, header)
    }

    fn start(fs: &dyn Fs, dir: &Path, mut log: LogWriter, header: &LogHeader) -> Result<Wal> {
        log.append_with(|frame| header.encode(frame))?;
        log.sync_all()?;
        fs.sync_dir(dir)?;
        Ok(Wal { log })
    }

    /// Appends `trailer` and makes the log durable: it is written no more.
    pub fn seal(&mut self, trailer: LogTrailer) -> Result<()> {
        self.log.append_with(|frame| trailer.encode(frame))?;
        self.log.sync_all()
    }

    /// Appends `batch`, its writes numbered from `first_seq`, running
    /// `meanwhile` while the frame is written
    /// ([`LogWriter::append_overlapped`]); returns the log's end after it,
    /// for [`LogSync::sync_to`].
    pub fn append(&mut self, batch: &WriteBatch, first_seq: u64, meanwhile: &mut dyn FnMut()) -> Result<u64> {
        let encode = |frame: &mut Vec<u8>| {
            frame.push(TAG_BATCH);
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

    /// The log's number.
    pub fn number(&self) -> u64 {
        self.log.number()
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

/// What one log holds, as [`read`] found it.
#[derive(Debug, Clone)]
pub struct LogContents {
    /// Its header.
    pub header: LogHeader,
    /// Its trailer, if it was sealed.
    pub trailer: Option<LogTrailer>,
    /// The sequence number after its last write.
    pub end_seq: u64,
    /// Where its frames end and what follows them.
    pub end: LogEnd,
}

/// Reads log `number` in `dir` whole, checking its own structure: a
/// header naming it first, batches numbered on from the header's first
/// write, at most a trailer last, whose end matches the batches, and
/// nothing but zeros after a trailer. Calls `visit` with each batch and
/// its first sequence number, in order. Whether its end is acceptable
/// (a torn tail, a missing trailer) is for the chain to judge
/// (recovery.rs). A file holding no frame at all (a log whose creation a
/// crash cut short) is `Ok(None)`.
pub fn read(
    fs: &dyn Fs,
    dir: &Path,
    number: u64,
    mut visit: impl FnMut(WriteBatch, u64) -> Result<()>,
) -> Result<Option<LogContents>> {
    let path = dir.join(file_name(number));
    let file = fs.open_read(&path)?;
    let len = file.len()? as usize;
    let mut bytes = Vec::with_capacity(len);
    file.read_exact_append(&mut bytes, len, 0)?;
    drop(file);
    let mut header: Option<LogHeader> = None;
    let mut trailer: Option<LogTrailer> = None;
    let mut seq = 0;
    let end = read_frames(&path, number, &bytes, |offset, payload| {
        let corrupt = |what: String| Error::corruption(&path, offset, format!("log frame: {what}"));
        let Some(current) = &header else {
            let decoded = LogHeader::decode(payload).map_err(corrupt)?;
            if decoded.number != number {
                return Err(corrupt(format!("the header names log {}", decoded.number)));
            }
            seq = decoded.first_seq;
            header = Some(decoded);
            return Ok(());
        };
        if let Some(trailer) = trailer {
            return Err(corrupt(format!(
                "a frame after the trailer (which names log {} next)",
                trailer.next
            )));
        }
        match payload.first() {
            Some(&TAG_BATCH) => {
                let (first_seq, batch) = decode_batch(payload).map_err(corrupt)?;
                if first_seq != seq {
                    return Err(corrupt(format!(
                        "a batch of writes from {first_seq}, the log is at write {seq} (it started at {})",
                        current.first_seq
                    )));
                }
                seq += batch.len() as u64;
                visit(batch, first_seq)
            }
            Some(&TAG_TRAILER) if payload.len() == TRAILER_BYTES => {
                let u64_at = |at: usize| u64::from_le_bytes(payload[at..at + 8].try_into().expect("8 bytes"));
                let sealed = LogTrailer {
                    next: u64_at(1),
                    end_seq: u64_at(9),
                };
                if sealed.end_seq != seq {
                    return Err(corrupt(format!(
                        "the trailer says the log ends at write {}, its batches end at {seq}",
                        sealed.end_seq
                    )));
                }
                if sealed.next != 0 && sealed.next <= number {
                    return Err(corrupt(format!("the trailer names log {} next", sealed.next)));
                }
                trailer = Some(sealed);
                Ok(())
            }
            _ => Err(corrupt("neither a batch nor a trailer".into())),
        }
    })?;
    // Without a header no frame was read at all (a first frame that is
    // not a header is an error above).
    let Some(header) = header else {
        return Ok(None);
    };
    if trailer.is_some() && !matches!(end.tail, Tail::Zeros | Tail::Clean) {
        return Err(Error::corruption(
            &path,
            end.end,
            "bytes that are not zeros after the log's trailer",
        ));
    }
    Ok(Some(LogContents {
        header,
        trailer,
        end_seq: seq,
        end,
    }))
}

/// A batch frame's first sequence number and writes.
fn decode_batch(payload: &[u8]) -> Result<(u64, WriteBatch), String> {
    if payload.len() < BATCH_HEADER_BYTES || payload[0] != TAG_BATCH {
        return Err(format!("payload of {} bytes", payload.len()));
    }
    let first_seq = u64::from_le_bytes(payload[1..9].try_into().expect("8 bytes"));
    let count = u32::from_le_bytes(payload[9..13].try_into().expect("4 bytes")) as usize;
    let batch = WriteBatch::decode(&payload[BATCH_HEADER_BYTES..], count)
        .map_err(|error| error.what().to_string())?;
    Ok((first_seq, batch))
}

/// The header of log `number` in `dir`, read from its first frame alone;
/// `None` when the file holds no valid first frame.
pub fn read_header(fs: &dyn Fs, dir: &Path, number: u64) -> Result<Option<LogHeader>> {
    let file = fs.open_read(&dir.join(file_name(number)))?;
    let len = file.len()?;
    if len < FRAME_HEADER_BYTES as u64 {
        return Ok(None);
    }
    let mut frame_header = [0u8; FRAME_HEADER_BYTES];
    file.read_exact_at(&mut frame_header, 0)?;
    let payload_len = u64::from(u32::from_le_bytes(frame_header[..4].try_into().expect("4 bytes")));
    let crc = u32::from_le_bytes(frame_header[4..].try_into().expect("4 bytes"));
    if payload_len == 0 || payload_len > 1 << 16 || FRAME_HEADER_BYTES as u64 + payload_len > len {
        return Ok(None);
    }
    let mut payload = Vec::with_capacity(payload_len as usize);
    file.read_exact_append(&mut payload, payload_len as usize, FRAME_HEADER_BYTES as u64)?;
    if block_crc(number, 0, &payload) != crc {
        return Ok(None);
    }
    Ok(LogHeader::decode(&payload)
        .ok()
        .filter(|header| header.number == number))
}

/// One frame of a log as repair finds it, however damaged the rest is.
#[derive(Debug)]
pub enum SalvagedFrame {
    /// A header.
    Header(LogHeader),
    /// A batch and its first sequence number.
    Batch(u64, WriteBatch),
    /// A trailer.
    Trailer(LogTrailer),
}

/// What [`salvage`] found: each good frame with its offset, and the byte
/// ranges of the bad ones.
pub type Salvage = (Vec<(u64, SalvagedFrame)>, Vec<(u64, u64)>);

/// Every frame of log `number` (`bytes`, the whole file) that passes its
/// checksum and decodes, with its offset, and the byte ranges between
/// them that do not (beyond the zeros at the end): repair keeps the
/// frames before and after a damaged one. After a bad frame the next one
/// is looked for where the bad frame's length says it ends, then at every
/// offset (cheap tests first: a frame's tag, a batch's sequence number
/// following the last one's).
pub fn salvage(number: u64, bytes: &[u8]) -> Salvage {
    let written = bytes
        .iter()
        .rposition(|&byte| byte != 0)
        .map_or(0, |last| last + 1);
    let mut frames = Vec::new();
    let mut bad: Vec<(u64, u64)> = Vec::new();
    let mut next_seq: Option<u64> = None;
    let frame_at = |at: usize, next_seq: Option<u64>| -> Option<(usize, SalvagedFrame)> {
        let header = bytes.get(at..at + FRAME_HEADER_BYTES)?;
        let payload_len = u32::from_le_bytes(header[..4].try_into().expect("4 bytes")) as usize;
        let crc = u32::from_le_bytes(header[4..].try_into().expect("4 bytes"));
        let start = at + FRAME_HEADER_BYTES;
        let payload = bytes.get(start..start.checked_add(payload_len)?)?;
        let plausible = match payload.first() {
            Some(&TAG_HEADER) => at == 0,
            Some(&TAG_BATCH) => {
                payload.len() >= BATCH_HEADER_BYTES && {
                    let first_seq = u64::from_le_bytes(payload[1..9].try_into().expect("8 bytes"));
                    next_seq.is_none_or(|seq| first_seq >= seq && first_seq - seq < 1 << 40)
                }
            }
            Some(&TAG_TRAILER) => payload.len() == TRAILER_BYTES,
            _ => false,
        };
        if !plausible || block_crc(number, at as u64, payload) != crc {
            return None;
        }
        let frame = match payload[0] {
            TAG_HEADER => SalvagedFrame::Header(LogHeader::decode(payload).ok()?),
            TAG_BATCH => {
                let (first_seq, batch) = decode_batch(payload).ok()?;
                SalvagedFrame::Batch(first_seq, batch)
            }
            _ => {
                let u64_at = |at: usize| u64::from_le_bytes(payload[at..at + 8].try_into().expect("8 bytes"));
                SalvagedFrame::Trailer(LogTrailer {
                    next: u64_at(1),
                    end_seq: u64_at(9),
                })
            }
        };
        Some((start + payload_len, frame))
    };
    let mut at = 0usize;
    while at < written {
        if let Some((end, frame)) = frame_at(at, next_seq) {
            if let SalvagedFrame::Batch(first_seq, batch) = &frame {
                next_seq = Some(first_seq + batch.len() as u64);
            }
            frames.push((at as u64, frame));
            at = end;
            continue;
        }
        // A bad frame: resume where its own length says it ends, if a good
        // frame starts there, else at the first offset where one does.
        let claimed = bytes.get(at..at + 4).map(|len| {
            at + FRAME_HEADER_BYTES + u32::from_le_bytes(len.try_into().expect("4 bytes")) as usize
        });
        let resume = claimed
            .filter(|&end| end < written && frame_at(end, next_seq).is_some())
            .or_else(|| (at + 1..written).find(|&offset| frame_at(offset, next_seq).is_some()))
            .unwrap_or(written);
        bad.push((at as u64, resume as u64));
        at = resume;
    }
    (frames, bad)
}

#[cfg(test)]
mod tests {
    use super::*;
    use spillway_core::{ErrorKind, SimFs};

    fn header(number: u64, first_seq: u64, padded: bool) -> LogHeader {
        LogHeader {
            store_id: 99,
            number,
            previous: number - 1,
            first_seq,
            padded,
            merge_name: "aggregate:sum".into(),
        }
    }

    type Replayed = (Vec<(WriteBatch, u64)>, Option<LogContents>);

    fn batches(fs: &SimFs, dir: &Path, number: u64) -> Result<Replayed> {
        let mut replayed = Vec::new();
        let contents = read(fs, dir, number, |batch, seq| {
            replayed.push((batch, seq));
            Ok(())
        })?;
        Ok((replayed, contents))
    }

    #[test]
    fn batches_replay_in_order_between_a_header_and_a_trailer() {
        let fs = SimFs::new();
        let dir = Path::new("/kv");
        fs.create_dir_all(dir).unwrap();
        for padded in [false, true] {
            let number = 3 + u64::from(padded);
            let mut wal = Wal::create(&fs, dir, &header(number, 10, padded)).unwrap();
            let mut batch = WriteBatch::new();
            batch.put(b"a", b"1").delete(b"b");
            let mut ran = 0;
            wal.append(&batch, 10, &mut || ran += 1).unwrap();
            let mut second = WriteBatch::new();
            second.merge(b"c", b"x");
            let end = wal.append(&second, 12, &mut || ran += 1).unwrap();
            assert_eq!(ran, 2, "each append runs its work once");
            wal.sync().sync_to(end).unwrap();
            let (replayed, contents) = batches(&fs, dir, number).unwrap();
            let contents = contents.unwrap();
            assert_eq!(replayed, vec![(batch.clone(), 10), (second.clone(), 12)]);
            assert_eq!((contents.end_seq, contents.trailer), (13, None));
            assert_eq!(contents.header, header(number, 10, padded));
            assert_eq!(contents.end.end, end);
            // A padded log keeps zeros after its last frame: a crash tail.
            assert_eq!(contents.end.padded_crash_tail(), padded);
            assert_eq!(
                read_header(&fs, dir, number).unwrap(),
                Some(header(number, 10, padded))
            );

            wal.seal(LogTrailer { next: 9, end_seq: 13 }).unwrap();
            let (_, contents) = batches(&fs, dir, number).unwrap();
            assert_eq!(
                contents.unwrap().trailer,
                Some(LogTrailer { next: 9, end_seq: 13 })
            );
        }
        assert_eq!(parse_name(&file_name(3)), Some(3));
        assert_eq!(parse_name("x3.log"), None);
    }

    #[test]
    fn a_broken_structure_is_corruption_naming_the_log() {
        let fs = SimFs::new();
        let dir = Path::new("/kv");
        fs.create_dir_all(dir).unwrap();
        // A batch numbered out of order.
        let mut wal = Wal::create(&fs, dir, &header(5, 0, false)).unwrap();
        let mut batch = WriteBatch::new();
        batch.put(b"k", b"v");
        wal.append(&batch, 0, &mut || {}).unwrap();
        wal.append(&batch, 5, &mut || {}).unwrap();
        let error = batches(&fs, dir, 5).unwrap_err();
        assert_eq!(error.kind(), ErrorKind::Corruption);
        assert!(error.to_string().contains("000005.log"), "{error}");
        assert!(
            error.to_string().contains("from 5, the log is at write 1"),
            "{error}"
        );

        // A trailer whose end disagrees with the batches.
        let mut wal = Wal::create(&fs, dir, &header(6, 0, true)).unwrap();
        wal.append(&batch, 0, &mut || {}).unwrap();
        wal.seal(LogTrailer { next: 7, end_seq: 4 }).unwrap();
        let error = batches(&fs, dir, 6).unwrap_err();
        assert!(error.to_string().contains("ends at write 4"), "{error}");

        // A frame whose checksum holds but which is no batch.
        let mut log = LogWriter::create(&fs, &dir.join(file_name(8)), 8).unwrap();
        log.append_with(|frame| header(8, 0, false).encode(frame))
            .unwrap();
        log.append(b"\x02not a batch at all").unwrap();
        let error = batches(&fs, dir, 8).unwrap_err();
        assert_eq!(error.kind(), ErrorKind::Corruption);

        // A log that is only zeros was never started.
        fs.create_or_truncate(&dir.join(file_name(9)))
            .unwrap()
            .write_at(&[0; 4096], 0)
            .unwrap();
        assert!(batches(&fs, dir, 9).unwrap().1.is_none());
        assert_eq!(read_header(&fs, dir, 9).unwrap(), None);
    }

    #[test]
    fn salvage_keeps_the_frames_on_both_sides_of_a_damaged_one() {
        let fs = SimFs::new();
        let dir = Path::new("/kv");
        fs.create_dir_all(dir).unwrap();
        let mut wal = Wal::create(&fs, dir, &header(4, 0, true)).unwrap();
        let mut seq = 0;
        let mut ends = Vec::new();
        for round in 0..6u64 {
            let mut batch = WriteBatch::new();
            for i in 0..(round + 2) {
                batch.put(format!("key {round} {i}").as_bytes(), &[round as u8; 30]);
            }
            ends.push(wal.append(&batch, seq, &mut || {}).unwrap());
            seq += batch.len() as u64;
        }
        wal.seal(LogTrailer {
            next: 0,
            end_seq: seq,
        })
        .unwrap();
        let path = dir.join(file_name(4));
        let file = fs.open_read_write(&path).unwrap();
        let mut bytes = Vec::new();
        file.read_exact_append(&mut bytes, file.len().unwrap() as usize, 0)
            .unwrap();
        let (frames, bad) = salvage(4, &bytes);
        assert_eq!(frames.len(), 8, "header, six batches, trailer");
        assert!(bad.is_empty());

        // A flipped byte in the third batch, and a flipped length in the fifth.
        bytes[(ends[1] + 20) as usize] ^= 1;
        bytes[(ends[3] + 1) as usize] ^= 0x40;
        let (frames, bad) = salvage(4, &bytes);
        let seqs: Vec<u64> = frames
            .iter()
            .filter_map(|(_, frame)| match frame {
                SalvagedFrame::Batch(seq, _) => Some(*seq),
                _ => None,
            })
            .collect();
        assert_eq!(seqs, vec![0, 2, 9, 20], "the batches around the damaged ones");
        assert_eq!(bad, vec![(ends[1], ends[2]), (ends[3], ends[4])]);
        assert!(matches!(frames.last(), Some((_, SalvagedFrame::Trailer(_)))));
    }
}
