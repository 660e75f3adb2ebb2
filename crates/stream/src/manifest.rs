//! The manifest: every file the store needs. A segment exists for readers
//! once the manifest names it, a log is named before any write goes into
//! it, and the manifest is replaced atomically (written aside, synced,
//! renamed, directory synced), so a crash leaves either the old list or
//! the new one. A file the manifest does not name is a leftover of work
//! cut short, or damage: recovery tells the two apart (see `survey`).
//!
//! ```text
//! magic "SPWMANv1" | version u32 (2) | store id u64 | next segment id u64 | next log number u64 |
//! next seq u64 | closed at u64 | logs u32 | segments u32
//! per log:     number u64 | first seq u64
//! per segment: id u64 | first seq u64 | last seq u64 | records u64 | bytes u64 |
//!              key min u64 | key max u64 | time min u64 | time max u64
//! crc32c of all the above u32
//! ```
//!
//! `closed at` is [`NOT_CLOSED`] unless the store was closed cleanly: then
//! it is the sequence number the newest log ends at (exclusive). A segment
//! with neither records nor shadows has key and time ranges `MAX..=0`.

use std::path::Path;

use spillway_core::fs::replace_file;
use spillway_core::{crc32c, Error, Fs, Result};

use crate::segment::{Extent, SegmentMeta};

/// The manifest's file name.
pub const FILE_NAME: &str = "MANIFEST";
/// What `replace_file` writes it to first.
pub const TEMPORARY_NAME: &str = "MANIFEST.tmp";
const MAGIC: &[u8; 8] = b"SPWMANv1";
/// Version 2 added the store id, the live logs, the next log number, the
/// clean close, and per segment its records, bytes and ranges.
const VERSION: u32 = 2;
const HEADER_BYTES: usize = 8 + 4 + 5 * 8 + 4 + 4;
const LOG_BYTES: usize = 2 * 8;
const SEGMENT_BYTES: usize = 9 * 8;
/// `closed_at` of a store that is open, or was not closed cleanly.
pub const NOT_CLOSED: u64 = u64::MAX;

/// A segment as the manifest lists it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Listed {
    /// Its id (file number).
    pub id: u64,
    /// First sequence number it holds.
    pub first_seq: u64,
    /// Last sequence number it holds.
    pub last_seq: u64,
    /// Live records.
    pub records: u64,
    /// The file's length.
    pub bytes: u64,
    /// Where its records and shadows lie (`None`: it holds neither).
    pub extent: Option<Extent>,
}

impl Listed {
    /// The entry of the segment `meta` describes.
    pub fn of(meta: &SegmentMeta) -> Listed {
        Listed {
            id: meta.id,
            first_seq: meta.first_seq,
            last_seq: meta.last_seq,
            records: meta.records,
            bytes: meta.bytes,
            extent: meta.extent(),
        }
    }
}

/// A log that holds writes not yet in segments, as the manifest lists it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LiveLog {
    /// Its number (file name).
    pub number: u64,
    /// The sequence number of its first write: the manifest's `next_seq`
    /// for the oldest live log, where the log before ends for the others.
    pub first_seq: u64,
}

/// The store's durable state.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Manifest {
    /// Random, chosen when the store was made: every segment footer and
    /// log header carries it, so a file of another store is refused.
    pub store_id: u64,
    /// The id the next segment gets.
    pub next_segment_id: u64,
    /// The number the next log gets.
    pub next_log_number: u64,
    /// Every write numbered below this is in a listed segment.
    pub next_seq: u64,
    /// After a clean close, the sequence number the newest log ends at
    /// (so that a shorter or older copy of it is noticed); else
    /// [`NOT_CLOSED`].
    pub closed_at: u64,
    /// The logs holding writes not yet in segments, oldest first: the
    /// active buffer's, after the one being flushed if any.
    pub logs: Vec<LiveLog>,
    /// The segments, oldest writes first.
    pub segments: Vec<Listed>,
}

impl Manifest {
    /// The manifest of a new, empty store.
    pub fn new(store_id: u64) -> Manifest {
        Manifest {
            store_id,
            next_segment_id: 1,
            next_log_number: 1,
            next_seq: 0,
            closed_at: NOT_CLOSED,
            logs: Vec::new(),
            segments: Vec::new(),
        }
    }

    /// The manifest's bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut bytes = Vec::with_capacity(
            HEADER_BYTES + self.logs.len() * LOG_BYTES + self.segments.len() * SEGMENT_BYTES + 4,
        );
        bytes.extend_from_slice(MAGIC);
        bytes.extend_from_slice(&VERSION.to_le_bytes());
        for field in [
            self.store_id,
            self.next_segment_id,
            self.next_log_number,
            self.next_seq,
            self.closed_at,
        ] {
            bytes.extend_from_slice(&field.to_le_bytes());
        }
        bytes.extend_from_slice(&(self.logs.len() as u32).to_le_bytes());
        bytes.extend_from_slice(&(self.segments.len() as u32).to_le_bytes());
        for log in &self.logs {
            bytes.extend_from_slice(&log.number.to_le_bytes());
            bytes.extend_from_slice(&log.first_seq.to_le_bytes());
        }
        for segment in &self.segments {
            let extent = segment.extent.unwrap_or(Extent {
                key_min: u64::MAX,
                key_max: 0,
                time_min: u64::MAX,
                time_max: 0,
            });
            for field in [
                segment.id,
                segment.first_seq,
                segment.last_seq,
                segment.records,
                segment.bytes,
                extent.key_min,
                extent.key_max,
                extent.time_min,
                extent.time_max,
            ] {
                bytes.extend_from_slice(&field.to_le_bytes());
            }
        }
        let crc = crc32c(&bytes);
        bytes.extend_from_slice(&crc.to_le_bytes());
        bytes
    }

    /// Decodes and checks the manifest's `bytes` (`path` names it in errors).
    pub fn decode(path: &Path, bytes: &[u8]) -> Result<Manifest> {
        let corrupt = |what: &str| Error::corruption(path, 0, format!("manifest: {what}"));
        if bytes.len() < 12 || &bytes[..8] != MAGIC {
            return Err(corrupt("not a stream manifest (bad magic or too short)"));
        }
        let version = u32::from_le_bytes(bytes[8..12].try_into().expect("4 bytes"));
        if version == 1 {
            return Err(Error::InvalidArgument(format!(
                "{} is a stream index manifest of format version 1, written by an older Spillway; \
                 this build reads version 2 (which names every file the store needs). Read the \
                 records out with the Spillway that wrote them and ingest them again",
                path.display()
            )));
        }
        if bytes.len() < HEADER_BYTES + 4 {
            return Err(corrupt("too short"));
        }
        let (body, crc) = bytes.split_at(bytes.len() - 4);
        if crc32c(body) != u32::from_le_bytes(crc.try_into().expect("4 bytes")) {
            return Err(corrupt("checksum mismatch"));
        }
        if version != VERSION {
            return Err(corrupt(&format!("version {version}, this build reads {VERSION}")));
        }
        let u64_at = |at: usize| u64::from_le_bytes(body[at..at + 8].try_into().expect("8 bytes"));
        let u32_at = |at: usize| u32::from_le_bytes(body[at..at + 4].try_into().expect("4 bytes")) as usize;
        let log_count = u32_at(52);
        let segment_count = u32_at(56);
        if body.len() as u64
            != (HEADER_BYTES + log_count * LOG_BYTES) as u64 + segment_count as u64 * SEGMENT_BYTES as u64
        {
            return Err(corrupt("length disagrees with its counts of logs and segments"));
        }
        let logs: Vec<LiveLog> = (0..log_count)
            .map(|i| {
                let at = HEADER_BYTES + i * LOG_BYTES;
                LiveLog {
                    number: u64_at(at),
                    first_seq: u64_at(at + 8),
                }
            })
            .collect();
        let segments_at = HEADER_BYTES + log_count * LOG_BYTES;
        let segments: Vec<Listed> = (0..segment_count)
            .map(|i| {
                let at = segments_at + i * SEGMENT_BYTES;
                let extent = Extent {
                    key_min: u64_at(at + 40),
                    key_max: u64_at(at + 48),
                    time_min: u64_at(at + 56),
                    time_max: u64_at(at + 64),
                };
                Listed {
                    id: u64_at(at),
                    first_seq: u64_at(at + 8),
                    last_seq: u64_at(at + 16),
                    records: u64_at(at + 24),
                    bytes: u64_at(at + 32),
                    extent: (extent.key_min <= extent.key_max).then_some(extent),
                }
            })
            .collect();
        let manifest = Manifest {
            store_id: u64_at(12),
            next_segment_id: u64_at(20),
            next_log_number: u64_at(28),
            next_seq: u64_at(36),
            closed_at: u64_at(44),
            logs,
            segments,
        };
        manifest.check().map_err(|what| corrupt(&what))?;
        Ok(manifest)
    }

    /// The relations between the fields, or what breaks them.
    fn check(&self) -> std::result::Result<(), String> {
        let segments_ordered = self
            .segments
            .windows(2)
            .all(|pair| pair[0].last_seq < pair[1].first_seq && pair[0].id != pair[1].id);
        let segments_below = self.segments.iter().all(|segment| {
            segment.id < self.next_segment_id
                && segment.first_seq <= segment.last_seq
                && segment.last_seq < self.next_seq
                && segment
                    .extent
                    .is_none_or(|extent| extent.time_min <= extent.time_max)
        });
        if !segments_ordered || !segments_below {
            return Err("segments out of order or beyond its counters".into());
        }
        // In the order of their writes; numbered apart (not always in
        // order: a log made ready ahead of time may be used after one
        // made later).
        let logs_ordered = self
            .logs
            .windows(2)
            .all(|pair| pair[0].number != pair[1].number && pair[0].first_seq < pair[1].first_seq);
        let logs_below = self.logs.iter().all(|log| log.number < self.next_log_number);
        let logs_start = self
            .logs
            .first()
            .is_none_or(|oldest| oldest.first_seq == self.next_seq);
        if !logs_ordered || !logs_below || !logs_start {
            return Err(
                "live logs out of order, beyond its counters, or not starting at its next seq".into(),
            );
        }
        let closed = self.closed_at == NOT_CLOSED
            || self
                .logs
                .last()
                .is_some_and(|newest| newest.first_seq <= self.closed_at);
        if !closed {
            return Err("closed at a sequence number before its newest log starts".into());
        }
        Ok(())
    }

    /// Reads the manifest of the store in `dir`, if there is one.
    pub fn read(fs: &dyn Fs, dir: &Path) -> Result<Option<Manifest>> {
        let path = dir.join(FILE_NAME);
        if !fs.exists(&path)? {
            return Ok(None);
        }
        let file = fs.open_read(&path)?;
        let len = file.len()? as usize;
        let mut bytes = Vec::with_capacity(len);
        file.read_exact_append(&mut bytes, len, 0)?;
        Manifest::decode(&path, &bytes).map(Some)
    }

    /// Replaces the manifest of the store in `dir` by this one, durably.
    pub fn write(&self, fs: &dyn Fs, dir: &Path) -> Result<()> {
        debug_assert_eq!(self.check(), Ok(()));
        replace_file(fs, dir, FILE_NAME, &self.encode())
    }

    /// The live log numbered `number`, if it is one.
    pub fn live_log(&self, number: u64) -> Option<&LiveLog> {
        self.logs.iter().find(|log| log.number == number)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use spillway_core::{ErrorKind, SimFs};

    fn sample() -> Manifest {
        Manifest {
            store_id: 0x5eed,
            next_segment_id: 3,
            next_log_number: 9,
            next_seq: 100,
            closed_at: NOT_CLOSED,
            logs: vec![
                LiveLog {
                    number: 7,
                    first_seq: 100,
                },
                LiveLog {
                    number: 8,
                    first_seq: 150,
                },
            ],
            segments: vec![
                Listed {
                    id: 1,
                    first_seq: 0,
                    last_seq: 49,
                    records: 40,
                    bytes: 4000,
                    extent: Some(Extent {
                        key_min: 3,
                        key_max: 90,
                        time_min: 0,
                        time_max: 7,
                    }),
                },
                Listed {
                    id: 2,
                    first_seq: 50,
                    last_seq: 99,
                    records: 0,
                    bytes: 96,
                    extent: None,
                },
            ],
        }
    }

    #[test]
    fn a_manifest_round_trips_and_a_flipped_bit_is_corruption() {
        let fs = SimFs::new();
        let dir = Path::new("/s");
        fs.create_dir_all(dir).unwrap();
        assert_eq!(Manifest::read(&fs, dir).unwrap(), None);
        let manifest = sample();
        manifest.write(&fs, dir).unwrap();
        assert_eq!(Manifest::read(&fs, dir).unwrap(), Some(manifest.clone()));
        let bytes = manifest.encode();
        for at in 0..bytes.len() {
            let mut flipped = bytes.clone();
            flipped[at] ^= 0x10;
            let error = Manifest::decode(Path::new("/s/MANIFEST"), &flipped).unwrap_err();
            assert_eq!(error.kind(), ErrorKind::Corruption, "byte {at}: {error}");
        }
        let error = Manifest::decode(Path::new("/s/MANIFEST"), &bytes[..bytes.len() / 2]).unwrap_err();
        assert_eq!(error.kind(), ErrorKind::Corruption, "{error}");
    }

    #[test]
    fn fields_that_contradict_each_other_are_corruption() {
        let broken: [fn(&mut Manifest); 5] = [
            |manifest| manifest.logs[0].first_seq = 99,
            |manifest| manifest.logs.swap(0, 1),
            |manifest| manifest.next_log_number = 8,
            |manifest| manifest.segments[1].last_seq = 100,
            |manifest| manifest.closed_at = 120,
        ];
        for (number, breaking) in broken.iter().enumerate() {
            let mut manifest = sample();
            breaking(&mut manifest);
            let error = Manifest::decode(Path::new("/s/MANIFEST"), &manifest.encode()).unwrap_err();
            assert_eq!(error.kind(), ErrorKind::Corruption, "case {number}: {error}");
        }
    }

    #[test]
    fn mutated_manifests_with_their_checksum_rewritten_are_refused_or_decoded_never_a_panic() {
        let original = sample().encode();
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut next = || {
            state ^= state >> 12;
            state ^= state << 25;
            state ^= state >> 27;
            state.wrapping_mul(0x2545_f491_4f6c_dd1d)
        };
        let mut refused = 0;
        for _ in 0..3000 {
            let mut bytes = original.clone();
            for _ in 0..1 + next() % 4 {
                let at = (next() % bytes.len() as u64) as usize;
                bytes[at] = next() as u8;
            }
            if next() % 8 == 0 {
                bytes.truncate((next() % bytes.len() as u64) as usize);
            }
            // The checksum rewritten, so the mutation reaches the checks
            // behind it.
            if bytes.len() >= 4 {
                let body = bytes.len() - 4;
                let crc = crc32c(&bytes[..body]);
                bytes[body..].copy_from_slice(&crc.to_le_bytes());
            }
            match Manifest::decode(Path::new("/s/MANIFEST"), &bytes) {
                Ok(manifest) => assert_eq!(manifest.check(), Ok(())),
                Err(error) => {
                    assert!(
                        matches!(error.kind(), ErrorKind::Corruption | ErrorKind::InvalidArgument),
                        "{error}"
                    );
                    refused += 1;
                }
            }
        }
        assert!(refused > 500, "most mutations break a relation: {refused}");
    }

    #[test]
    fn a_version_1_manifest_is_named_as_the_old_format() {
        // A version 1 manifest of an empty store, as the older build wrote it.
        let mut bytes = Vec::new();
        bytes.extend_from_slice(MAGIC);
        bytes.extend_from_slice(&1u32.to_le_bytes());
        bytes.extend_from_slice(&1u64.to_le_bytes());
        bytes.extend_from_slice(&0u64.to_le_bytes());
        bytes.extend_from_slice(&0u32.to_le_bytes());
        let crc = crc32c(&bytes);
        bytes.extend_from_slice(&crc.to_le_bytes());
        let error = Manifest::decode(Path::new("/s/MANIFEST"), &bytes).unwrap_err();
        assert_eq!(error.kind(), ErrorKind::InvalidArgument);
        assert!(error.to_string().contains("format version 1"), "{error}");
    }
}
