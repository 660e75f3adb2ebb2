//! The manifest: which segments make up the store. A segment exists for
//! readers once the manifest names it, and the manifest is replaced
//! atomically (written aside, synced, renamed, directory synced), so a
//! crash leaves either the old list or the new one.
//!
//! ```text
//! magic "SPWMANv1" | version u32 | next segment id u64 | next seq u64 | segments u32
//! per segment: id u64 | first seq u64 | last seq u64
//! crc32c of all the above u32
//! ```

use std::path::Path;

use spillway_core::fs::replace_file;
use spillway_core::{crc32c, Error, Fs, Result};

/// The manifest's file name.
pub const FILE_NAME: &str = "MANIFEST";
const MAGIC: &[u8; 8] = b"SPWMANv1";
const VERSION: u32 = 1;

/// A segment as the manifest lists it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Listed {
    /// Its id (file number).
    pub id: u64,
    /// First sequence number it holds.
    pub first_seq: u64,
    /// Last sequence number it holds.
    pub last_seq: u64,
}

/// The store's durable state.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Manifest {
    /// The id the next segment gets.
    pub next_segment_id: u64,
    /// Every write numbered below this is in a listed segment.
    pub next_seq: u64,
    /// The segments, oldest writes first.
    pub segments: Vec<Listed>,
}

impl Manifest {
    fn encode(&self) -> Vec<u8> {
        let mut bytes = Vec::with_capacity(36 + self.segments.len() * 24);
        bytes.extend_from_slice(MAGIC);
        bytes.extend_from_slice(&VERSION.to_le_bytes());
        bytes.extend_from_slice(&self.next_segment_id.to_le_bytes());
        bytes.extend_from_slice(&self.next_seq.to_le_bytes());
        bytes.extend_from_slice(&(self.segments.len() as u32).to_le_bytes());
        for segment in &self.segments {
            for field in [segment.id, segment.first_seq, segment.last_seq] {
                bytes.extend_from_slice(&field.to_le_bytes());
            }
        }
        let crc = crc32c(&bytes);
        bytes.extend_from_slice(&crc.to_le_bytes());
        bytes
    }

    fn decode(path: &Path, bytes: &[u8]) -> Result<Manifest> {
        let corrupt = |what: &str| Error::corruption(path, 0, format!("manifest: {what}"));
        if bytes.len() < 36 || &bytes[..8] != MAGIC {
            return Err(corrupt("not a stream manifest (bad magic or too short)"));
        }
        let (body, crc) = bytes.split_at(bytes.len() - 4);
        if crc32c(body) != u32::from_le_bytes(crc.try_into().expect("4 bytes")) {
            return Err(corrupt("checksum mismatch"));
        }
        let u64_at = |at: usize| u64::from_le_bytes(body[at..at + 8].try_into().expect("8 bytes"));
        let version = u32::from_le_bytes(body[8..12].try_into().expect("4 bytes"));
        if version != VERSION {
            return Err(corrupt(&format!("version {version}, this build reads {VERSION}")));
        }
        let count = u32::from_le_bytes(body[28..32].try_into().expect("4 bytes")) as usize;
        if body.len() != 32 + count * 24 {
            return Err(corrupt("length disagrees with its segment count"));
        }
        let manifest = Manifest {
            next_segment_id: u64_at(12),
            next_seq: u64_at(20),
            segments: (0..count)
                .map(|i| Listed {
                    id: u64_at(32 + i * 24),
                    first_seq: u64_at(40 + i * 24),
                    last_seq: u64_at(48 + i * 24),
                })
                .collect(),
        };
        let ordered = manifest
            .segments
            .windows(2)
            .all(|pair| pair[0].last_seq < pair[1].first_seq);
        let below = manifest
            .segments
            .iter()
            .all(|segment| segment.id < manifest.next_segment_id && segment.last_seq < manifest.next_seq);
        if !ordered || !below {
            return Err(corrupt("segments out of order or beyond its counters"));
        }
        Ok(manifest)
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
        replace_file(fs, dir, FILE_NAME, &self.encode())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use spillway_core::{ErrorKind, SimFs};

    #[test]
    fn a_manifest_round_trips_and_a_flipped_bit_is_corruption() {
        let fs = SimFs::new();
        let dir = Path::new("/s");
        fs.create_dir_all(dir).unwrap();
        assert_eq!(Manifest::read(&fs, dir).unwrap(), None);
        let manifest = Manifest {
            next_segment_id: 3,
            next_seq: 100,
            segments: vec![
                Listed {
                    id: 1,
                    first_seq: 0,
                    last_seq: 49,
                },
                Listed {
                    id: 2,
                    first_seq: 50,
                    last_seq: 99,
                },
            ],
        };
        manifest.write(&fs, dir).unwrap();
        assert_eq!(Manifest::read(&fs, dir).unwrap(), Some(manifest.clone()));
        let mut bytes = manifest.encode();
        bytes[40] ^= 1;
        let error = Manifest::decode(Path::new("/s/MANIFEST"), &bytes).unwrap_err();
        assert_eq!(error.kind(), ErrorKind::Corruption);
        assert!(error.to_string().contains("checksum"), "{error}");
    }
}
