//! The decoders of the store's files, over byte images: for the fuzz
//! targets (`crates/kv/fuzz`) and for tools that check a file alone. Each
//! returns what it decoded or an error, never panics, and allocates only
//! what the bytes really hold.

use std::path::Path;
use std::sync::Arc;

use spillway_core::{block_crc, Error, Fs, Result, SimFs};

use crate::list::{self, ListFile, FOOTER_BYTES};
use crate::manifest;
use crate::wal;

/// Writes `bytes` as file `name` of a fresh in-memory directory.
fn image(name: &str, bytes: &[u8]) -> Result<(Arc<SimFs>, &'static Path)> {
    let fs = Arc::new(SimFs::new());
    let dir = Path::new("/image");
    fs.create_dir_all(dir)?;
    let file = fs.create_or_truncate(&dir.join(name))?;
    file.write_at(bytes, 0)?;
    Ok((fs, dir))
}

/// Decodes a write-ahead log numbered `number`; returns the writes of its
/// whole frames.
pub fn check_log(number: u64, bytes: &[u8]) -> Result<u64> {
    let (fs, dir) = image(&wal::file_name(number), bytes)?;
    let mut writes = 0;
    wal::read(fs.as_ref(), dir, number, |batch, _| {
        writes += batch.len() as u64;
        Ok(())
    })?;
    Ok(writes)
}

/// Opens a list file numbered `number` as a store does, reading its
/// footer, filter, index and sketch but no block; returns its blocks.
pub fn open_list(number: u64, bytes: &[u8]) -> Result<u32> {
    let (fs, dir) = image(&list::file_name(number), bytes)?;
    Ok(ListFile::open(fs.as_ref(), dir, number)?.blocks())
}

/// Opens a list file numbered `number` (footer, filter, index, sketch)
/// and reads it whole, checking everything; returns its records.
pub fn check_list(number: u64, bytes: &[u8]) -> Result<u64> {
    let (fs, dir) = image(&list::file_name(number), bytes)?;
    let file = ListFile::open(fs.as_ref(), dir, number)?;
    let handle = fs.open_read(file.path())?;
    file.verify(handle.as_ref(), &spillway_core::Interrupt::new())
}

/// Reads a manifest numbered `number` (its lists are not opened: a
/// manifest that names any fails with `InvalidArgument`); returns the
/// nodes of the tree it describes.
pub fn check_manifest(number: u64, bytes: &[u8]) -> Result<usize> {
    let (fs, dir) = image(&manifest::file_name(number), bytes)?;
    let current = fs.create_or_truncate(&dir.join(manifest::CURRENT))?;
    current.write_at(format!("{}\n", manifest::file_name(number)).as_bytes(), 0)?;
    let recovered = manifest::recover(fs.as_ref(), dir, |file, _| {
        Err(Error::InvalidArgument(format!(
            "the manifest names list {file}; lists are not part of the image"
        )))
    })?;
    let recovered = recovered.ok_or_else(|| Error::Internal("the image lost its CURRENT".into()))?;
    Ok(recovered.tree.len())
}

/// The keys of the records in every good block of the list file image
/// `bytes` (numbered `number`), read as repair reads them: what a damage
/// to the file can take.
pub fn list_keys(number: u64, bytes: &[u8]) -> Result<Vec<Vec<u8>>> {
    let path = Path::new("/image").join(list::file_name(number));
    let footer = list::read_footer(&path, number, bytes)?;
    let salvaged = list::salvage_blocks(&path, number, bytes, footer.block_bytes, footer.blocks_end);
    Ok(salvaged.records.into_iter().map(|(_, _, key, _)| key).collect())
}

/// The keys written in every good frame of the log image `bytes`
/// (numbered `number`), read as repair reads them.
pub fn log_keys(number: u64, bytes: &[u8]) -> Vec<Vec<u8>> {
    let (frames, _) = wal::salvage(number, bytes);
    frames
        .iter()
        .filter_map(|(_, frame)| match frame {
            wal::SalvagedFrame::Batch(_, batch) => Some(batch.iter().map(|record| record.key.to_vec())),
            _ => None,
        })
        .flatten()
        .collect()
}

/// Rewrites every checksum of a list file image whose structure allows it
/// (footer, sections, blocks), so that a fuzzer's mutations reach the
/// checks behind the checksums.
pub fn reseal_list(number: u64, bytes: &mut [u8]) {
    let Some(footer_offset) = bytes.len().checked_sub(FOOTER_BYTES) else {
        return;
    };
    let u32_at = |bytes: &[u8], at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes"));
    let u64_at = |bytes: &[u8], at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"));
    let block_bytes = u32_at(bytes, footer_offset + 12) as usize;
    let index = u64_at(bytes, footer_offset + 28);
    let sketch = u64_at(bytes, footer_offset + 36);
    let filter = u64_at(bytes, footer_offset + 44);
    let ordered = filter <= index && index <= sketch && sketch <= footer_offset as u64;
    if ordered {
        let (filter, index, sketch) = (filter as usize, index as usize, sketch as usize);
        for (start, end) in [(filter, index), (index, sketch), (sketch, footer_offset)] {
            if end >= start + 4 {
                let crc = block_crc(number, start as u64, &bytes[start..end - 4]);
                bytes[end - 4..end].copy_from_slice(&crc.to_le_bytes());
            }
        }
        if block_bytes.is_power_of_two() && block_bytes >= 512 {
            let mut at = 0;
            while at + 8 <= filter {
                let end = at + 4 + u32_at(bytes, at) as usize;
                if end + 4 > filter {
                    break;
                }
                let crc = block_crc(number, at as u64, &bytes[at..end]);
                bytes[end..end + 4].copy_from_slice(&crc.to_le_bytes());
                at = (end + 4).next_multiple_of(block_bytes);
            }
        }
    }
    let crc = block_crc(
        number,
        footer_offset as u64,
        &bytes[footer_offset..bytes.len() - 4],
    );
    let len = bytes.len();
    bytes[len - 4..].copy_from_slice(&crc.to_le_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::WriteBatch;
    use crate::options::{Options, SyncMode};
    use crate::store::Store;
    use spillway_core::log::reseal_frames;
    use spillway_core::{ErrorKind, Limits};

    /// The files of a small store that has spilled and split.
    fn store_files() -> Vec<(String, Vec<u8>)> {
        let fs = Arc::new(SimFs::new());
        let dir = Path::new("/store");
        let options = Options {
            root_bytes: 8 << 10,
            node_bytes: 16 << 10,
            fan_out: 3,
            block_bytes: 512,
            // No rewrites for repeated keys: they would leave too few list
            // files to damage.
            unique_ratio_min: 0.0,
            sync: SyncMode::None,
            limits: Limits::default().with_key_bytes_max(64).with_value_bytes_max(512),
            ..Options::default()
        };
        let store = Store::open_on(fs.clone(), dir, options).unwrap();
        for round in 0..20u64 {
            let mut batch = WriteBatch::new();
            for i in 0..60u64 {
                let key = format!("key {}", (i * 7 + round * 13) % 500);
                if i % 9 == 0 {
                    batch.delete(key.as_bytes());
                } else {
                    batch.put(key.as_bytes(), &vec![round as u8; (i % 40) as usize]);
                }
            }
            store.write(&batch).unwrap();
        }
        store.settle().unwrap();
        store.put(b"in the log", b"only").unwrap();
        store.close().unwrap();
        fs.list_dir(dir)
            .unwrap()
            .into_iter()
            .map(|name| {
                let file = fs.open_read(&dir.join(&name)).unwrap();
                let mut bytes = Vec::new();
                file.read_exact_append(&mut bytes, file.len().unwrap() as usize, 0)
                    .unwrap();
                (name, bytes)
            })
            .collect()
    }

    /// Runs `check` on `bytes` with random bytes changed, as they are and
    /// resealed; a changed file decodes or fails with `Corruption`, never
    /// panics.
    fn mutate(
        bytes: &[u8],
        seed: u64,
        check: impl Fn(&[u8]) -> Result<u64>,
        reseal: impl Fn(&mut [u8]),
    ) -> (u64, u64) {
        let mut state = seed;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let (mut refused, mut resealed_refused) = (0, 0);
        if bytes.is_empty() {
            return (0, 0);
        }
        for _ in 0..400 {
            let mut changed = bytes.to_vec();
            for _ in 0..1 + next() % 3 {
                let at = (next() % changed.len() as u64) as usize;
                changed[at] ^= 1 << (next() % 8);
            }
            if changed.len() > 1 && next() % 8 == 0 {
                changed.truncate((next() % changed.len() as u64) as usize);
            }
            for (resealed, count) in [(false, &mut refused), (true, &mut resealed_refused)] {
                if resealed {
                    reseal(&mut changed);
                }
                if let Err(error) = check(&changed) {
                    assert!(
                        matches!(error.kind(), ErrorKind::Corruption | ErrorKind::InvalidArgument),
                        "{error}"
                    );
                    *count += 1;
                }
            }
        }
        (refused, resealed_refused)
    }

    #[test]
    fn every_file_decodes_and_damage_is_refused_never_a_panic() {
        let files = store_files();
        let mut seen = (0, 0, 0);
        let mut refused_lists = 0;
        for (seed, (name, bytes)) in files.iter().enumerate() {
            let seed = seed as u64 + 1;
            if let Some(number) = list::parse_name(name) {
                assert!(check_list(number, bytes).unwrap() > 0);
                assert!(open_list(number, bytes).unwrap() > 0);
                mutate(
                    bytes,
                    seed,
                    |bytes| open_list(number, bytes).map(u64::from),
                    |bytes| reseal_list(number, bytes),
                );
                let (refused, _) = mutate(
                    bytes,
                    seed,
                    |bytes| check_list(number, bytes),
                    |bytes| reseal_list(number, bytes),
                );
                // A block's zero padding is outside its checksum, so flips
                // there go unseen: a list of one part-filled block (its
                // size depends on when the worker split what) lets a
                // quarter through. Over all lists nearly every flip is seen.
                refused_lists += refused;
                seen.0 += 1;
            } else if let Some(number) = wal::parse_name(name) {
                check_log(number, bytes).unwrap();
                mutate(
                    bytes,
                    seed,
                    |bytes| check_log(number, bytes),
                    |bytes| reseal_frames(number, bytes),
                );
                seen.1 += 1;
            } else if let Some(number) = manifest::parse_name(name) {
                assert!(
                    check_manifest(number, bytes).is_err(),
                    "a real manifest names lists"
                );
                mutate(
                    bytes,
                    seed,
                    |bytes| check_manifest(number, bytes).map(|nodes| nodes as u64),
                    |bytes| reseal_frames(number, bytes),
                );
                seen.2 += 1;
            }
        }
        assert!(seen.0 > 3 && seen.1 > 0 && seen.2 == 1, "{seen:?}");
        assert!(
            refused_lists * 10 > seen.0 * 400 * 8,
            "{refused_lists} of {} damaged list images refused",
            seen.0 * 400
        );
    }
}
