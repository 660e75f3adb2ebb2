//! List files: a non-root node's hash-sorted lists (seed 001 §3.1), one
//! file per list, with the indexes a GET needs written into the file so
//! that opening a store reads them, never the records.
//!
//! ```text
//! file    = block* | filter section | index section | sketch section | footer
//! block   = payload length u32 LE | records | crc u32 LE | zeros to a multiple of block_bytes
//!           crc = block_crc(file number, block offset, payload length ‖ records)
//! section = bytes | block_crc(file number, section offset, bytes) u32 LE
//!   filter: the Bloom filter (bloom.rs)
//!   index:  per block: first hash u64 LE | first page u32 LE (bit 31: the block starts
//!           with the hash the previous block ends with)
//!   sketch: the KMV sketch (kmv.rs)
//! footer  = magic "SPWLIST1" | version u32 (2) | block_bytes u32 | records u64 | blocks u32 |
//!           index offset u64 | sketch offset u64 | filter offset u64 (= end of the blocks) |
//!           lowest hash u64 | highest hash u64 | store id u64 | first write u64 | last write u64 |
//!           cover low u64 | cover high u64 | crc u32 (block_crc(file number, footer offset, ...))
//! ```
//!
//! The footer's [`ListMeta`] says where the records came from: the store
//! (its random identity), the sequence numbers of the writes they hold
//! (a root spill's lists take the frozen root's; a rewrite's, the union of
//! its inputs') and the hashes the list was written for (the child or
//! node it was written into). Repair orders lists by them when the
//! manifest cannot be trusted (repair.rs).
//!
//! Records are sorted by (hash, key), at most one per key. A block holds
//! whole records; a record longer than a block gets a block of its own,
//! as many pages long as it needs. The first-hash index (seed 001 §3.4.2)
//! finds the one block that can hold a hash; the flag marks blocks that
//! continue a run of equal hashes (colliding keys), so a lookup knows to
//! start one block earlier.
//!
//! A node refers to a list through a [`ListRef`]: a file, a run of its
//! blocks and a hash range. A fast split gives two leaves refs to the same
//! file with disjoint ranges; the blocks at the cut are shared and readers
//! skip the records outside their range.

use std::path::Path;

use spillway_core::fs::DIRECT_IO_ALIGNMENT_BYTES;
use spillway_core::{block_crc, Error, Hash64, Result};

mod file;
mod reader;
mod writer;

pub use file::{salvage_blocks, ListFile, OwnedRecord};
pub use reader::ListRef;
pub use writer::ListWriter;

/// A list file's number (its name; mixed into its checksums).
pub type FileNumber = u64;

pub(super) const MAGIC: &[u8; 8] = b"SPWLIST1";
pub(super) const VERSION: u32 = 2;
/// Bytes of the footer at the end of every list file.
pub const FOOTER_BYTES: usize = 112;
/// Bytes of the footer of version 1 (without [`ListMeta`]), told apart
/// to name the format in the error.
pub(super) const FOOTER_V1_BYTES: usize = 72;
pub(super) const BLOCK_HEADER_BYTES: usize = 4;
pub(super) const BLOCK_TRAILER_BYTES: usize = 4;
pub(super) const INDEX_ENTRY_BYTES: usize = 12;
/// Bit 31 of an index entry's page: the block continues a run of equal hashes.
pub(super) const CONTINUES: u32 = 1 << 31;
/// Bytes a writer gathers before it writes them.
pub(super) const WRITE_CHUNK_BYTES: usize = 1 << 20;
/// What direct writes align their offsets and lengths to.
pub(super) const ALIGNMENT: usize = DIRECT_IO_ALIGNMENT_BYTES as usize;
/// Bytes a cursor reads at once.
pub(super) const READ_CHUNK_BYTES: usize = 256 << 10;

/// The file name of list `number`.
pub fn file_name(number: FileNumber) -> String {
    format!("{number:06}.list")
}

/// The number a list file name stands for.
pub fn parse_name(name: &str) -> Option<FileNumber> {
    let digits = name.strip_suffix(".list")?;
    (!digits.is_empty() && digits.bytes().all(|byte| byte.is_ascii_digit()))
        .then(|| digits.parse().ok())
        .flatten()
}

/// Where a list's records came from, as its footer records it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ListMeta {
    /// The identity of the store that wrote it.
    pub store_id: u64,
    /// The lowest sequence number of the writes its records may hold.
    pub seq_min: u64,
    /// The highest sequence number of the writes its records may hold.
    pub seq_max: u64,
    /// The lowest hash it was written for: its records are all of the
    /// writes `seq_min..=seq_max` in `cover_low..=cover_high` (collapsed;
    /// tombstones dropped if written at a leaf).
    pub cover_low: Hash64,
    /// The highest hash it was written for.
    pub cover_high: Hash64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Footer {
    pub(super) block_bytes: u32,
    pub(super) records: u64,
    pub(super) blocks: u32,
    pub(super) index_offset: u64,
    pub(super) sketch_offset: u64,
    pub(super) filter_offset: u64,
    pub(super) lowest_hash: Hash64,
    pub(super) highest_hash: Hash64,
    pub(super) meta: ListMeta,
}

impl Footer {
    pub(super) fn encode(&self, number: FileNumber, offset: u64, out: &mut Vec<u8>) {
        let start = out.len();
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&VERSION.to_le_bytes());
        out.extend_from_slice(&self.block_bytes.to_le_bytes());
        out.extend_from_slice(&self.records.to_le_bytes());
        out.extend_from_slice(&self.blocks.to_le_bytes());
        let meta = &self.meta;
        for field in [
            self.index_offset,
            self.sketch_offset,
            self.filter_offset,
            self.lowest_hash,
            self.highest_hash,
            meta.store_id,
            meta.seq_min,
            meta.seq_max,
            meta.cover_low,
            meta.cover_high,
        ] {
            out.extend_from_slice(&field.to_le_bytes());
        }
        let crc = block_crc(number, offset, &out[start..]);
        out.extend_from_slice(&crc.to_le_bytes());
        debug_assert_eq!(out.len() - start, FOOTER_BYTES);
    }

    pub(super) fn decode(path: &Path, number: FileNumber, offset: u64, bytes: &[u8]) -> Result<Footer> {
        let corrupt = |what: String| Error::corruption(path, offset, format!("list footer: {what}"));
        let u32_at = |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes"));
        let u64_at = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"));
        let v1 = bytes.len().checked_sub(FOOTER_V1_BYTES).map(|at| &bytes[at..]);
        if v1.is_some_and(|v1| &v1[..8] == MAGIC && v1[8..12] == 1u32.to_le_bytes()) {
            return Err(corrupt(
                "a list file of format version 1, written by an older Spillway: this build reads version 2 \
                 (stores with store identities and log chains); load the data into a new store"
                    .into(),
            ));
        }
        if bytes.len() != FOOTER_BYTES || &bytes[..8] != MAGIC {
            return Err(corrupt("not a list file (bad magic)".into()));
        }
        if block_crc(number, offset, &bytes[..FOOTER_BYTES - 4]) != u32_at(FOOTER_BYTES - 4) {
            return Err(corrupt("checksum mismatch".into()));
        }
        let version = u32_at(8);
        if version != VERSION {
            return Err(corrupt(format!("version {version}, this build reads {VERSION}")));
        }
        let footer = Footer {
            block_bytes: u32_at(12),
            records: u64_at(16),
            blocks: u32_at(24),
            index_offset: u64_at(28),
            sketch_offset: u64_at(36),
            filter_offset: u64_at(44),
            lowest_hash: u64_at(52),
            highest_hash: u64_at(60),
            meta: ListMeta {
                store_id: u64_at(68),
                seq_min: u64_at(76),
                seq_max: u64_at(84),
                cover_low: u64_at(92),
                cover_high: u64_at(100),
            },
        };
        let block_bytes = u64::from(footer.block_bytes);
        let sections_in_order = footer.filter_offset <= footer.index_offset
            && footer.index_offset <= footer.sketch_offset
            && footer.sketch_offset <= offset;
        if !block_bytes.is_power_of_two()
            || block_bytes < 512
            || !sections_in_order
            || !footer.filter_offset.is_multiple_of(block_bytes)
            || footer.blocks == 0
            || footer.records < u64::from(footer.blocks)
            || footer.sketch_offset - footer.index_offset
                != footer.blocks as u64 * INDEX_ENTRY_BYTES as u64 + 4
            || footer.lowest_hash > footer.highest_hash
            || footer.meta.seq_min > footer.meta.seq_max
            || footer.meta.cover_low > footer.lowest_hash
            || footer.meta.cover_high < footer.highest_hash
        {
            return Err(corrupt(format!("inconsistent fields {footer:?}")));
        }
        Ok(footer)
    }
}

/// The [`ListMeta`] of the footer `bytes` of list `number` at `path`,
/// which starts at `offset`: a footer read alone.
pub fn footer_meta(path: &Path, number: FileNumber, offset: u64, bytes: &[u8]) -> Result<ListMeta> {
    Footer::decode(path, number, offset, bytes).map(|footer| footer.meta)
}

/// What a list's footer says, for repair.
#[derive(Debug, Clone, Copy)]
pub struct FooterSummary {
    /// Bytes of a block.
    pub block_bytes: u32,
    /// Where the blocks end (the filter's offset).
    pub blocks_end: u64,
    /// Records in the file.
    pub records: u64,
    /// Where the records came from.
    pub meta: ListMeta,
}

/// Reads the footer of the list file in `bytes` (number `number`, at
/// `path`): what repair needs to place a file whose sections may be
/// damaged.
pub fn read_footer(path: &Path, number: FileNumber, bytes: &[u8]) -> Result<FooterSummary> {
    let Some(footer_offset) = bytes.len().checked_sub(FOOTER_BYTES) else {
        return Err(Error::corruption(
            path,
            0,
            format!("list file of {} bytes has no footer", bytes.len()),
        ));
    };
    let footer = Footer::decode(path, number, footer_offset as u64, &bytes[footer_offset..])?;
    Ok(FooterSummary {
        block_bytes: footer.block_bytes,
        blocks_end: footer.filter_offset,
        records: footer.records,
        meta: footer.meta,
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use std::sync::Arc;

    use spillway_core::{hash64, Fs, SimFs};

    use super::file::BlockPages;
    use super::*;
    use crate::bloom::FilterBits;
    use crate::cache::FileCache;
    use crate::record::{Kind, RecordRef};

    /// A record as the test writes it: hash, key, value.
    pub(crate) type Written = (Hash64, Vec<u8>, Vec<u8>);

    /// Writes list `number` of `keys` keys (sorted by hash), the value of
    /// every `big`-th key larger than a block; returns it and its keys.
    pub(crate) fn write(
        fs: &Arc<SimFs>,
        number: FileNumber,
        keys: u64,
        big: u64,
    ) -> (Arc<ListFile>, Vec<Written>) {
        let mut records: Vec<Written> = (0..keys)
            .map(|i| {
                let key = format!("key {i}").into_bytes();
                let len = if big > 0 && i % big == 0 { 1500 } else { 40 };
                (hash64(&key), key, vec![i as u8; len])
            })
            .collect();
        records.sort();
        let meta = ListMeta {
            store_id: 7,
            seq_min: number * 100,
            seq_max: number * 100 + 99,
            cover_low: 0,
            cover_high: u64::MAX,
        };
        let mut writer = ListWriter::create(
            fs.as_ref(),
            Path::new("/l"),
            number,
            512,
            FilterBits::fixed(10),
            meta,
        )
        .unwrap();
        for (hash, key, value) in &records {
            let record = RecordRef {
                hash: *hash,
                kind: Kind::Put,
                key,
                value,
            };
            writer.add(&record).unwrap();
        }
        (writer.finish().unwrap(), records)
    }

    #[test]
    fn one_page_blocks_keep_one_bit_of_index_beside_each_first_hash() {
        let fs = Arc::new(SimFs::new());
        fs.create_dir_all(Path::new("/l")).unwrap();
        let cache = FileCache::new(fs.clone(), 8);
        for (number, big) in [(1, 0), (2, 7)] {
            let (written, records) = write(&fs, number, 2000, big);
            let opened = ListFile::open(fs.as_ref(), Path::new("/l"), number).unwrap();
            for file in [&written, &opened] {
                // Values larger than a block make blocks of several pages: pages are listed.
                match (&file.pages, big) {
                    (BlockPages::OnePage { continues, .. }, 0) => {
                        assert_eq!(continues.len(), (file.blocks() as usize).div_ceil(64))
                    }
                    (BlockPages::Listed(entries), 7) => assert_eq!(entries.len(), file.blocks() as usize),
                    (pages, _) => panic!("{pages:?} for big = {big}"),
                }
                let offsets: Vec<u64> = (0..=file.blocks())
                    .map(|block| file.block_offset(block))
                    .collect();
                assert!(offsets.windows(2).all(|pair| pair[0] < pair[1]), "{offsets:?}");
                assert_eq!(offsets[file.blocks() as usize], file.footer.filter_offset);
                let list = ListRef::whole(file.clone());
                let mut buffer = Vec::new();
                for (hash, key, value) in &records {
                    let mut found = None;
                    list.get(&cache, *hash, key, &mut buffer, |kind, bytes| {
                        found = Some((kind, bytes.to_vec()))
                    })
                    .unwrap();
                    assert_eq!(found, Some((Kind::Put, value.clone())), "key {key:?}");
                }
            }
            let index = written.first_hashes.len() * size_of::<Hash64>();
            let entries = written.blocks() as usize * size_of::<u32>();
            let sections = written.bloom.memory_bytes() + written.sketch.memory_bytes() + index;
            if big == 0 {
                assert!(
                    written.index_memory_bytes() < sections + entries / 8,
                    "{}",
                    written.index_memory_bytes()
                );
            } else {
                assert_eq!(written.index_memory_bytes(), sections + entries);
            }
        }
    }
}
