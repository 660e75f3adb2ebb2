//! Chunks: the checksummed unit of partition files and binary outputs.
//!
//! A partition file is the chunks phase one appended to it, one per input
//! block that produced records of the partition; a binary output file is
//! the chunks of one reducer. Each chunk is a header and a payload of
//! framed records ([`Pairs`](crate::Pairs)):
//!
//! ```text
//! offset  bytes  field
//!      0      4  magic "SPMR"
//!      4      2  version (1)
//!      6      2  flags (0)
//!      8      4  partition
//!     12      4  records in the payload
//!     16      4  payload bytes
//!     20      4  source input file (u32::MAX: none, an output chunk)
//!     24      8  source block offset
//!     32      4  reserved (0)
//!     36      4  crc32c of bytes 0..36 and the payload
//!     40         payload
//! ```
//!
//! All integers little-endian. The source (input file, block offset) is
//! the provenance of every record in the chunk; with the record's index in
//! the payload it is the seed's (file id, offset, index) triple, stored once
//! per chunk rather than 20 bytes per record. Map is deterministic, so two
//! chunks with one source and partition hold the same records, and phase
//! two keeps the first (see the crate's DESIGN.md, "Recovery").

use std::path::Path;

use spillway_core::{crc32c, Error, FsFile, Result};

/// Bytes of a chunk header.
pub const CHUNK_HEADER_BYTES: usize = 40;
const MAGIC: &[u8; 4] = b"SPMR";
const VERSION: u16 = 1;
const NO_SOURCE: u32 = u32::MAX;
/// The largest payload a chunk may declare: its length field is 32 bits,
/// and a writer cuts chunks far below this.
pub const CHUNK_PAYLOAD_MAX: usize = 1 << 30;

/// A chunk's header fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkHeader {
    /// The partition whose records the payload holds.
    pub partition: u32,
    /// Records in the payload.
    pub records: u32,
    /// Bytes of the payload.
    pub payload_bytes: u32,
    /// The input block the records came from: (input file, block offset).
    pub source: Option<(u32, u64)>,
    crc: u32,
}

impl ChunkHeader {
    /// Reads the header at the start of `bytes`, which lie at `offset` in
    /// `path`, checking everything but the checksum (which covers the
    /// payload: see [`checked_payload`](Self::checked_payload)).
    pub fn decode(path: &Path, offset: u64, bytes: &[u8]) -> Result<Self> {
        let corrupt = |what: String| Error::corruption(path, offset, what);
        if bytes.len() < CHUNK_HEADER_BYTES {
            return Err(corrupt(format!(
                "{} bytes left where a {CHUNK_HEADER_BYTES}-byte chunk header belongs (a truncated file?)",
                bytes.len()
            )));
        }
        let u32_at = |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap());
        if &bytes[..4] != MAGIC {
            return Err(corrupt(format!(
                "no chunk header here: magic {:02x?}, expected \"SPMR\"",
                &bytes[..4]
            )));
        }
        let version = u16::from_le_bytes([bytes[4], bytes[5]]);
        if version != VERSION {
            return Err(corrupt(format!(
                "chunk version {version}; this build reads version {VERSION}"
            )));
        }
        let payload_bytes = u32_at(16);
        if payload_bytes as usize > CHUNK_PAYLOAD_MAX {
            return Err(corrupt(format!(
                "a chunk payload of {payload_bytes} bytes is over the limit"
            )));
        }
        let source = match u32_at(20) {
            NO_SOURCE => None,
            file => Some((file, u64::from_le_bytes(bytes[24..32].try_into().unwrap()))),
        };
        Ok(ChunkHeader {
            partition: u32_at(8),
            records: u32_at(12),
            payload_bytes,
            source,
            crc: u32_at(36),
        })
    }

    /// The payload following this header in `bytes` (the chunk, read from
    /// `offset` in `path`), after checking its length, checksum and record
    /// count.
    pub fn checked_payload<'a>(&self, path: &Path, offset: u64, bytes: &'a [u8]) -> Result<&'a [u8]> {
        let end = CHUNK_HEADER_BYTES + self.payload_bytes as usize;
        if bytes.len() < end {
            return Err(Error::corruption(
                path,
                offset,
                format!(
                    "a chunk of {} payload bytes, but only {} bytes follow its header (a truncated file?)",
                    self.payload_bytes,
                    bytes.len() - CHUNK_HEADER_BYTES
                ),
            ));
        }
        let payload = &bytes[CHUNK_HEADER_BYTES..end];
        let computed = checksum(&bytes[..36], payload);
        if computed != self.crc {
            return Err(Error::corruption(
                path,
                offset,
                format!(
                    "chunk checksum mismatch: stored {:#010x}, computed {computed:#010x} over {} payload bytes",
                    self.crc, self.payload_bytes
                ),
            ));
        }
        let records = crate::record::count_pairs(payload).map_err(|error| error.at(path, offset))?;
        if records != u64::from(self.records) {
            return Err(Error::corruption(
                path,
                offset,
                format!(
                    "the chunk header counts {} records, its payload holds {records}",
                    self.records
                ),
            ));
        }
        Ok(payload)
    }

    /// Bytes of the whole chunk, header included.
    pub fn chunk_bytes(&self) -> u64 {
        CHUNK_HEADER_BYTES as u64 + u64::from(self.payload_bytes)
    }
}

fn checksum(header: &[u8], payload: &[u8]) -> u32 {
    crc32c::crc32c_append(crc32c(header), payload)
}

/// Appends a chunk of `payload` (framed records, `records` of them) to
/// `out`.
pub fn encode(partition: u32, records: u64, source: Option<(u32, u64)>, payload: &[u8], out: &mut Vec<u8>) {
    assert!(
        payload.len() <= CHUNK_PAYLOAD_MAX,
        "a chunk payload of {} bytes",
        payload.len()
    );
    assert!(records <= u64::from(u32::MAX), "{records} records in one chunk");
    let start = out.len();
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&VERSION.to_le_bytes());
    out.extend_from_slice(&0u16.to_le_bytes());
    out.extend_from_slice(&partition.to_le_bytes());
    out.extend_from_slice(&(records as u32).to_le_bytes());
    out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    assert!(
        source.is_none_or(|(file, _)| file != NO_SOURCE),
        "input file {NO_SOURCE} is reserved"
    );
    let (file, offset) = source.unwrap_or((NO_SOURCE, 0));
    out.extend_from_slice(&file.to_le_bytes());
    out.extend_from_slice(&offset.to_le_bytes());
    out.extend_from_slice(&0u32.to_le_bytes());
    let crc = checksum(&out[start..], payload);
    out.extend_from_slice(&crc.to_le_bytes());
    out.extend_from_slice(payload);
}

/// Reads and decodes the chunk header at `offset` of `file` (`file_len`
/// bytes long, named `path`).
pub fn read_header(path: &Path, file: &dyn FsFile, offset: u64, file_len: u64) -> Result<ChunkHeader> {
    let available = (file_len - offset).min(CHUNK_HEADER_BYTES as u64) as usize;
    let mut bytes = [0u8; CHUNK_HEADER_BYTES];
    file.read_exact_at(&mut bytes[..available], offset)?;
    let header = ChunkHeader::decode(path, offset, &bytes[..available])?;
    if offset + header.chunk_bytes() > file_len {
        return Err(Error::corruption(
            path,
            offset,
            format!(
                "a chunk of {} bytes runs past the end of the {file_len}-byte file (a truncated file?)",
                header.chunk_bytes()
            ),
        ));
    }
    Ok(header)
}

/// One checked chunk of a buffer: where it starts, its header and payload.
#[derive(Debug, Clone, Copy)]
pub struct Chunk<'a> {
    /// Offset of the chunk in its file.
    pub offset: u64,
    /// Its header.
    pub header: ChunkHeader,
    /// Its framed records.
    pub payload: &'a [u8],
}

/// Every chunk of `bytes` (a whole file, named `path`), checked, in order;
/// the first damaged chunk ends the walk with its error.
pub fn chunks<'a>(path: &'a Path, bytes: &'a [u8]) -> impl Iterator<Item = Result<Chunk<'a>>> + 'a {
    let mut at = 0usize;
    std::iter::from_fn(move || {
        if at >= bytes.len() {
            return None;
        }
        let offset = at as u64;
        let chunk = ChunkHeader::decode(path, offset, &bytes[at..]).and_then(|header| {
            let payload = header.checked_payload(path, offset, &bytes[at..])?;
            Ok(Chunk {
                offset,
                header,
                payload,
            })
        });
        at = match &chunk {
            Ok(chunk) => at + chunk.header.chunk_bytes() as usize,
            Err(_) => bytes.len(),
        };
        Some(chunk)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::PairBuf;
    use spillway_core::ErrorKind;

    fn two_chunks() -> Vec<u8> {
        let mut records = PairBuf::default();
        records.push(b"apple", b"1");
        records.push(b"pear", b"22");
        let mut bytes = Vec::new();
        encode(
            3,
            records.records(),
            Some((1, 4096)),
            records.as_bytes(),
            &mut bytes,
        );
        encode(3, 0, None, &[], &mut bytes);
        bytes
    }

    #[test]
    fn chunks_read_back_with_their_provenance() {
        let bytes = two_chunks();
        let path = Path::new("part-3");
        let chunks: Vec<Chunk<'_>> = chunks(path, &bytes).map(|chunk| chunk.unwrap()).collect();
        assert_eq!(chunks.len(), 2);
        assert_eq!(chunks[0].header.partition, 3);
        assert_eq!(chunks[0].header.records, 2);
        assert_eq!(chunks[0].header.source, Some((1, 4096)));
        assert_eq!(chunks[1].header.source, None);
        assert_eq!(chunks[1].offset, chunks[0].header.chunk_bytes());
        let pairs: Vec<_> = crate::record::Pairs::new(chunks[0].payload)
            .map(|pair| pair.unwrap().key)
            .collect();
        assert_eq!(pairs, [&b"apple"[..], &b"pear"[..]]);
    }

    #[test]
    fn every_flipped_bit_and_every_truncation_is_a_corruption_error() {
        let bytes = two_chunks();
        let path = Path::new("part-3");
        for at in 0..bytes.len() {
            for bit in [0x01u8, 0x80] {
                let mut damaged = bytes.clone();
                damaged[at] ^= bit;
                let error = chunks(path, &damaged).find_map(|chunk| chunk.err());
                let error = error.unwrap_or_else(|| panic!("flip {bit:#x} at {at} went unnoticed"));
                assert_eq!(error.kind(), ErrorKind::Corruption, "{error}");
            }
        }
        let first_len = ChunkHeader::decode(path, 0, &bytes).unwrap().chunk_bytes() as usize;
        for cut in (1..bytes.len()).filter(|&cut| cut != first_len) {
            let error = chunks(path, &bytes[..cut]).find_map(|chunk| chunk.err());
            let error = error.unwrap_or_else(|| panic!("a cut at {cut} went unnoticed"));
            assert!(error.to_string().contains("part-3"), "{error}");
        }
    }
}
