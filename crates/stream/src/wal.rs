//! The write-ahead log: every batch is logged before it is acknowledged,
//! so acknowledged records survive a crash before their segment is
//! written.
//!
//! One log per buffer, numbered in the order the buffers were made. Its
//! first frame is a header naming the store, the log and the sequence
//! number of its first write; every other frame is a batch:
//!
//! ```text
//! frame:   payload length u32 | block_crc(log number, frame offset, payload) u32 | payload
//! header:  magic "SPWWALv2" | store id u64 | log number u64 | first seq u64 | flags u32 (bit 0: padded)
//! batch:   first seq u64 | writes u32 | per write: op u8 | key u64 | time u64 | value length u32 | value
//! ```
//!
//! A log of a store that syncs its writes is *padded* (`LogWriter::padded`):
//! zeros made durable before any frame is written into them always follow
//! its last frame, so after any crash it ends in zeros or in a torn write
//! with zeros after it, and a log that ends at or inside a frame was cut
//! by something other than a crash. What a log's end must look like is
//! judged by recovery (`survey`), which knows whether a log is the newest.

use std::path::Path;
use std::sync::Arc;

use spillway_core::log::{read_log, LogEnd, LogSync, LogWriter, Tail, FRAME_HEADER_BYTES};
use spillway_core::{block_crc, Error, Fs, FsFile, Result};

use crate::batch::{Batch, Op};

const WRITE_HEADER_BYTES: usize = 1 + 8 + 8 + 4;
const HEADER_MAGIC: &[u8; 8] = b"SPWWALv2";
const HEADER_PAYLOAD_BYTES: usize = 8 + 8 + 8 + 8 + 4;
const FLAG_PADDED: u32 = 1;
/// Zeros a new padded log starts with (and grows by at least).
const PADDING_BYTES: usize = 64 << 10;
/// The fewest bytes of a batch frame's payload (a batch of no writes).
const BATCH_PAYLOAD_BYTES_MIN: usize = 12;

/// The file name of log `number`.
pub fn file_name(number: u64) -> String {
    format!("{number:012}.wal")
}

/// The number a log file name stands for.
pub fn parse_name(name: &str) -> Option<u64> {
    name.strip_suffix(".wal")?.parse().ok()
}

/// A log's first frame: whose it is and where it starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// The store's id (see the manifest).
    pub store_id: u64,
    /// The log's number.
    pub number: u64,
    /// The sequence number of its first write.
    pub first_seq: u64,
    /// Whether zeros always follow its last frame.
    pub padded: bool,
}

impl Header {
    fn encode(&self) -> Vec<u8> {
        let mut payload = Vec::with_capacity(HEADER_PAYLOAD_BYTES);
        payload.extend_from_slice(HEADER_MAGIC);
        for field in [self.store_id, self.number, self.first_seq] {
            payload.extend_from_slice(&field.to_le_bytes());
        }
        let flags = if self.padded { FLAG_PADDED } else { 0 };
        payload.extend_from_slice(&flags.to_le_bytes());
        payload
    }

    fn decode(payload: &[u8]) -> Option<Header> {
        if payload.len() != HEADER_PAYLOAD_BYTES || !payload.starts_with(HEADER_MAGIC) {
            return None;
        }
        let u64_at = |at: usize| u64::from_le_bytes(payload[at..at + 8].try_into().expect("8 bytes"));
        let flags = u32::from_le_bytes(payload[32..36].try_into().expect("4 bytes"));
        Some(Header {
            store_id: u64_at(8),
            number: u64_at(16),
            first_seq: u64_at(24),
            padded: flags & FLAG_PADDED != 0,
        })
    }
}

/// An open log being appended to (under the writers' lock).
#[derive(Debug)]
pub struct Wal {
    log: LogWriter,
}

/// The part of a log that syncs, outside the writers' lock, so writers
/// go on appending while one of them waits for the disk.
pub type WalSync = LogSync;

/// A file of zeros made ready for a padded log before it is needed (by
/// the flusher thread, off the writers' path): when a buffer is frozen,
/// the next log only has its header written into it, and its frames go
/// over zeros already durable instead of growing the file (each growth
/// costs the writer a sync). Until then it is a log with no frame, which
/// recovery removes.
#[derive(Debug)]
pub struct Spare {
    number: u64,
    file: Box<dyn FsFile>,
    len: u64,
}

impl Spare {
    /// Makes log file `number` in `dir`: `len` bytes of zeros, durable.
    pub fn prepare(fs: &dyn Fs, dir: &Path, number: u64, len: u64) -> Result<Spare> {
        let file = fs.create_or_truncate(&dir.join(file_name(number)))?;
        let zeros = vec![0u8; (len as usize).min(1 << 20)];
        let mut offset = 0;
        while offset < len {
            let piece = (zeros.len() as u64).min(len - offset) as usize;
            file.write_at(&zeros[..piece], offset)?;
            offset += piece as u64;
        }
        file.sync_data()?;
        Ok(Spare { number, file, len })
    }

    /// The number of the log it is made for.
    pub fn number(&self) -> u64 {
        self.number
    }
}

/// The frame holding `header`, for the start of its log.
fn header_frame(header: &Header) -> Vec<u8> {
    let payload = header.encode();
    let mut frame = Vec::with_capacity(FRAME_HEADER_BYTES + payload.len());
    frame.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    frame.extend_from_slice(&block_crc(header.number, 0, &payload).to_le_bytes());
    frame.extend_from_slice(&payload);
    frame
}

impl Wal {
    /// Starts the padded log `header` describes in `spare` (made for its
    /// number): writes its header over the zeros, durable.
    pub fn start(spare: Spare, header: Header) -> Result<Wal> {
        debug_assert!(header.padded && header.number == spare.number);
        let frame = header_frame(&header);
        spare.file.write_at(&frame, 0)?;
        spare.file.sync_data()?;
        let end = LogEnd {
            end: frame.len() as u64,
            len: spare.len,
            tail: Tail::Zeros,
        };
        Ok(Wal {
            log: LogWriter::reopen_padded(spare.file, header.number, end)?,
        })
    }

    /// Creates the log `header` describes in `dir`, its header durable
    /// (and, for a padded log, zeros after it). The caller makes the name
    /// durable: the manifest that lists the log syncs the directory.
    pub fn create(fs: &dyn Fs, dir: &Path, header: Header) -> Result<Wal> {
        let path = dir.join(file_name(header.number));
        let file = fs.create_or_truncate(&path)?;
        let mut frame = header_frame(&header);
        let end = frame.len() as u64;
        if header.padded {
            // Header and padding in one write, made durable by one sync.
            frame.resize(PADDING_BYTES, 0);
        }
        file.write_at(&frame, 0)?;
        file.sync_data()?;
        let log = if header.padded {
            let end = LogEnd {
                end,
                len: frame.len() as u64,
                tail: Tail::Zeros,
            };
            LogWriter::reopen_padded(file, header.number, end)?
        } else {
            LogWriter::reopen(file, header.number, end)?
        };
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

    /// The log's number.
    pub fn number(&self) -> u64 {
        self.log.number()
    }

    /// The handle that syncs the log.
    pub fn sync(&self) -> &Arc<WalSync> {
        self.log.sync()
    }
}

/// What [`replay`] found in a log.
#[derive(Debug, Clone, Copy)]
pub struct Replayed {
    /// Its header (`None`: no frame at all, as in a log whose creation a
    /// crash cut short).
    pub header: Option<Header>,
    /// The sequence number after its last write (`None` without a header).
    pub end_seq: Option<u64>,
    /// Writes it holds.
    pub writes: u64,
    /// Where its frames end, and what follows.
    pub end: LogEnd,
}

/// Reads log `number` at `path` and calls `visit` with each batch and its
/// first sequence number. Checks that the first frame is a header naming
/// log `number`, and that the batches continue each other's sequence
/// numbers from the header's; what may follow the last frame is the
/// caller's to judge (it knows whether the log is the newest).
pub fn replay(
    fs: &dyn Fs,
    path: &Path,
    number: u64,
    mut visit: impl FnMut(&Batch, u64) -> Result<()>,
) -> Result<Replayed> {
    let mut batch = Batch::new();
    let mut header: Option<Header> = None;
    let mut expected_seq = 0;
    let mut writes = 0;
    let end = read_log(fs, path, number, |at, payload| {
        let Some(current) = header else {
            let found = Header::decode(payload)
                .ok_or_else(|| Error::corruption(path, at, "log: the first frame is not a log header"))?;
            if found.number != number {
                return Err(Error::corruption(
                    path,
                    at,
                    format!("log header names log {}, not {number}", found.number),
                ));
            }
            expected_seq = found.first_seq;
            header = Some(found);
            return Ok(());
        };
        let first_seq = decode_payload(payload, &mut batch)
            .ok_or_else(|| Error::corruption(path, at, "log frame: malformed payload"))?;
        if first_seq != expected_seq {
            return Err(Error::corruption(
                path,
                at,
                format!(
                    "log frame starts at seq {first_seq}, expected {expected_seq} (log {} starts at {})",
                    current.number, current.first_seq
                ),
            ));
        }
        expected_seq += batch.len() as u64;
        writes += batch.len() as u64;
        visit(&batch, first_seq)
    })?;
    Ok(Replayed {
        header,
        end_seq: header.map(|_| expected_seq),
        writes,
        end,
    })
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

/// What [`salvage`] read of a log.
#[derive(Debug, Default)]
pub struct SalvagedLog {
    /// Its header, if that frame reads back.
    pub header: Option<Header>,
    /// Writes read back.
    pub writes: u64,
    /// Byte ranges `(offset, length)` that hold no readable frame but
    /// are not the zeros after the last one.
    pub damaged: Vec<(u64, u64)>,
}

/// Reads every frame of log `number` at `path` that passes its checksum,
/// stepping over damaged bytes to the next frame that does: calls `visit`
/// with each batch and its first sequence number, in the log's order.
/// Batches must number their writes from `seq_floor` on (a frame found
/// after damage is only taken if it does, which keeps the search from
/// taking random bytes for a frame). For repair.
pub fn salvage(
    fs: &dyn Fs,
    path: &Path,
    number: u64,
    seq_floor: u64,
    mut visit: impl FnMut(&Batch, u64),
) -> Result<SalvagedLog> {
    let file = fs.open_read(path)?;
    let len = file.len()? as usize;
    let mut bytes = Vec::with_capacity(len);
    file.read_exact_append(&mut bytes, len, 0)?;
    let written = bytes
        .iter()
        .rposition(|&byte| byte != 0)
        .map_or(0, |last| last + 1);
    let mut salvaged = SalvagedLog::default();
    let mut batch = Batch::new();
    let mut floor = seq_floor;
    let mut at = 0usize;
    while at < written {
        let frame = frame_at(number, &bytes, at);
        let good = match frame {
            Some(payload) if at == 0 && Header::decode(payload).is_some() => {
                let header = Header::decode(payload).expect("checked");
                floor = floor.max(header.first_seq);
                salvaged.header = Some(header);
                true
            }
            Some(payload) => match decode_payload(payload, &mut batch) {
                Some(first_seq) if first_seq >= floor => {
                    floor = first_seq + batch.len() as u64;
                    salvaged.writes += batch.len() as u64;
                    visit(&batch, first_seq);
                    true
                }
                _ => false,
            },
            None => false,
        };
        if good {
            at += FRAME_HEADER_BYTES + frame.expect("good").len();
            continue;
        }
        let next = (at + 1..written)
            .find(|&candidate| {
                frame_at_if(number, &bytes, candidate, |payload| {
                    plausible_batch(payload, floor)
                })
                .is_some()
            })
            .unwrap_or(written);
        salvaged.damaged.push((at as u64, (next - at) as u64));
        at = next;
    }
    Ok(salvaged)
}

/// The payload of the frame of log `number` at `at` in `bytes`, if one
/// starts there and passes its checksum.
fn frame_at(number: u64, bytes: &[u8], at: usize) -> Option<&[u8]> {
    frame_at_if(number, bytes, at, |_| true)
}

/// [`frame_at`], trying the checksum only on a payload `plausible` takes
/// (searching damaged bytes, most offsets fail this first).
fn frame_at_if(number: u64, bytes: &[u8], at: usize, plausible: impl Fn(&[u8]) -> bool) -> Option<&[u8]> {
    let header = bytes.get(at..at + FRAME_HEADER_BYTES)?;
    let payload_len = u32::from_le_bytes(header[..4].try_into().expect("4 bytes")) as usize;
    let crc = u32::from_le_bytes(header[4..].try_into().expect("4 bytes"));
    let start = at + FRAME_HEADER_BYTES;
    let payload = bytes.get(start..start.checked_add(payload_len)?)?;
    (plausible(payload) && block_crc(number, at as u64, payload) == crc).then_some(payload)
}

/// Whether `payload` could be a batch numbered from `floor` on (a cheap
/// test before a checksum is trusted after damage).
fn plausible_batch(payload: &[u8], floor: u64) -> bool {
    if payload.len() < BATCH_PAYLOAD_BYTES_MIN {
        return false;
    }
    let first_seq = u64::from_le_bytes(payload[..8].try_into().expect("8 bytes"));
    let writes = u32::from_le_bytes(payload[8..12].try_into().expect("4 bytes")) as usize;
    payload.len() >= BATCH_PAYLOAD_BYTES_MIN + writes * WRITE_HEADER_BYTES
        && first_seq >= floor
        && first_seq - floor < 1 << 40
}

#[cfg(test)]
mod tests {
    use super::*;
    use spillway_core::SimFs;

    fn batch_of(keys: std::ops::Range<u64>) -> Batch {
        let mut batch = Batch::new();
        for key in keys {
            batch.append(key, key * 10, &(key as f64).to_le_bytes());
        }
        batch
    }

    #[test]
    fn a_log_starts_with_its_header_and_replays_its_batches_in_order() {
        for padded in [false, true] {
            let fs = SimFs::new();
            let dir = Path::new("/w");
            fs.create_dir_all(dir).unwrap();
            let header = Header {
                store_id: 77,
                number: 3,
                first_seq: 100,
                padded,
            };
            let mut wal = Wal::create(&fs, dir, header).unwrap();
            wal.append(&batch_of(0..5), 100).unwrap();
            let end = wal.append(&batch_of(5..7), 105).unwrap();
            wal.sync().sync_to(end).unwrap();
            let path = dir.join(file_name(3));
            let mut seen = Vec::new();
            let replayed = replay(&fs, &path, 3, |batch, first_seq| {
                seen.push((first_seq, batch.len()));
                Ok(())
            })
            .unwrap();
            assert_eq!(seen, [(100, 5), (105, 2)]);
            assert_eq!(replayed.header, Some(header));
            assert_eq!((replayed.end_seq, replayed.writes), (Some(107), 7));
            let tail = if padded { Tail::Zeros } else { Tail::Clean };
            assert_eq!(replayed.end.tail, tail);
            // Read as another log, the checksums fail.
            assert!(replay(&fs, &path, 4, |_, _| Ok(())).is_err());
        }
    }

    #[test]
    fn salvage_steps_over_a_damaged_frame_to_the_frames_after_it() {
        let fs = SimFs::new();
        let dir = Path::new("/w");
        fs.create_dir_all(dir).unwrap();
        let header = Header {
            store_id: 1,
            number: 5,
            first_seq: 0,
            padded: true,
        };
        let mut wal = Wal::create(&fs, dir, header).unwrap();
        let mut ends = Vec::new();
        for part in 0..4u64 {
            ends.push(
                wal.append(&batch_of(part * 10..part * 10 + 10), part * 10)
                    .unwrap(),
            );
        }
        wal.sync().sync_to(ends[3]).unwrap();
        let path = dir.join(file_name(5));
        // A flipped byte in the second batch's payload, then one in the
        // third's length.
        let file = fs.open_read_write(&path).unwrap();
        for at in [ends[0] + 20, ends[1] + 1] {
            let mut byte = [0u8];
            file.read_exact_at(&mut byte, at).unwrap();
            file.write_at(&[byte[0] ^ 0x04], at).unwrap();
        }
        assert_eq!(
            replay(&fs, &path, 5, |_, _| Ok(())).unwrap_err().kind(),
            spillway_core::ErrorKind::Corruption
        );
        let mut seen = Vec::new();
        let salvaged = salvage(&fs, &path, 5, 0, |batch, first_seq| {
            seen.push((first_seq, batch.len()))
        })
        .unwrap();
        assert_eq!(seen, [(0, 10), (30, 10)]);
        assert_eq!(salvaged.header, Some(header));
        assert_eq!(salvaged.damaged, [(ends[0], ends[2] - ends[0])]);
    }
}
