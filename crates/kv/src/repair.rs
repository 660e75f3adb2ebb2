//! Repair, as LevelDB's and RocksDB's `RepairDB` do: rebuild the store's
//! metadata from what its files prove, keep every record that can be
//! read, move what cannot be used into `lost/` (never deleting it), and
//! report what was lost.
//!
//! # Algorithm
//!
//! 1. Run recovery's checks and read every block: a store that passes is
//!    left as it is (so a second repair changes nothing).
//! 2. The store's identity and merge operator come from the manifest's
//!    snapshot if it can be read, else from the files (the most common).
//! 3. Every list file with a valid footer of the store is a rectangle:
//!    the hashes it was written for (its cover) by the writes it holds
//!    (its sequence numbers). Its blocks are read; a file with bad blocks
//!    or sections is rewritten from its good blocks under its own number
//!    (the original moves into `lost/`), so it keeps its place. A file
//!    without a valid footer cannot be placed and moves into `lost/`.
//! 4. Along one hash, the lists of a store never hold overlapping writes
//!    (data only moves down, and a node's later lists are newer): where
//!    two rectangles overlap, the later file (higher number) is the
//!    rewrite of the earlier one and supersedes it there. Each list keeps
//!    the parts of its cover no later overlapping list covers.
//! 5. Every log frame that passes its checksum is read (frames before and
//!    after a damaged one alike). A write of a log whose (hash, sequence
//!    number) lies in some list's rectangle is in that list already; the
//!    others are folded per key and written as lists of their own: a
//!    log's writes in each stretch of hashes between the covers of the
//!    lists that share its writes' sequence numbers, so that no two
//!    rectangles overlap but by the rule of step 4.
//! 6. The new tree is the root over one leaf holding every list part,
//!    oldest writes first (the worker reshapes it as it fills); a new log
//!    (empty, closed) starts the chain after the newest write, and a new
//!    manifest names both.
//! 7. The files the new store does not use move into `lost/`: damaged
//!    originals, files of other stores, the old logs, manifests and
//!    leftovers. CURRENT is written last.
//!
//! What cannot be recovered: records in blocks or frames that fail their
//! checksums (a key whose newest version was there reads as its older
//! version, if one survives, or not at all; a delete there is undone),
//! and the writes of a log that is gone whose root had not spilled.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::Arc;

use serde::Serialize;
use spillway_core::{Error, Fs, Hash64, Interrupt, Result};

use crate::collapse::Folded;
use crate::list::{self, FileNumber, FooterSummary, ListFile, ListMeta, ListRef, ListWriter, OwnedRecord};
use crate::manifest::{self, Counters, ManifestWriter};
use crate::merge::MergeOperator;
use crate::options::Options;
use crate::record::{Kind, RecordRef};
use crate::recovery::{self, read_whole};
use crate::tree::{Child, Node, Tree, ROOT};
use crate::wal::{self, LogHeader, LogTrailer, SalvagedFrame, Wal};

/// The folder, inside the store's directory, that repair moves into what
/// the store cannot use.
pub const LOST_DIR: &str = "lost";

/// What [`Store::repair`](crate::Store::repair) found and did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct RepairReport {
    /// Whether the store was rebuilt; `false` when it passed every check
    /// (nothing was changed).
    pub repaired: bool,
    /// What the checks found wrong (the error an open reported).
    pub problem: Option<String>,
    /// The manifest repair wrote.
    pub manifest: Option<String>,
    /// The log repair started (empty, the chain's first).
    pub log: Option<String>,
    /// List files kept as they were.
    pub lists_kept: Vec<String>,
    /// List files rewritten from their good blocks under their own names
    /// (the damaged originals are in `lost/`).
    pub lists_salvaged: Vec<String>,
    /// List files written from the writes of logs.
    pub lists_written: Vec<String>,
    /// Logs whose frames were read.
    pub logs_read: Vec<String>,
    /// Records in the repaired store's list files.
    pub records: u64,
    /// What could not be used: the files, byte ranges and records lost.
    pub lost: Vec<Loss>,
    /// Records lost, estimated (exact for log frames between good ones).
    pub records_lost: u64,
    /// Files moved into `lost/` (as they are named there).
    pub moved_to_lost: Vec<String>,
    /// Files left alone that cannot be accounted for.
    pub unaccounted: Vec<String>,
}

/// A part of the store that repair could not use.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Loss {
    /// The file, as it was named in the store.
    pub file: String,
    /// The damaged byte ranges, `(start, end)`.
    pub ranges: Vec<(u64, u64)>,
    /// Records lost, estimated.
    pub records: u64,
    /// What was wrong.
    pub what: String,
}

/// A list file repair can place: its number, where its records came from,
/// and the file (as it will be named).
struct Rectangle {
    number: FileNumber,
    meta: ListMeta,
    file: Arc<ListFile>,
}

/// A write of a log: sequence number, hash, kind, key, value.
type LogWrite = (u64, Hash64, Kind, Vec<u8>, Vec<u8>);

/// A log's writes as repair read them.
struct LogRead {
    number: u64,
    /// Its writes.
    writes: Vec<LogWrite>,
    /// The first and one past the last sequence number it holds.
    seqs: (u64, u64),
}

/// Files to write and renames to make, decided before anything changes.
struct Plan {
    /// Lists to write from log writes: number, meta, records in order.
    written: Vec<(FileNumber, ListMeta, Vec<OwnedRecord>)>,
    /// Salvaged copies: number, meta, block size, records.
    salvaged: Vec<(FileNumber, ListMeta, u32, Vec<OwnedRecord>)>,
    /// Names to move into `lost/`.
    to_lost: Vec<String>,
}

fn seq_overlap(a: &ListMeta, low: u64, high: u64) -> bool {
    a.seq_min <= high && low <= a.seq_max
}

fn cover_overlap(a: &ListMeta, b: &ListMeta) -> bool {
    a.cover_low <= b.cover_high && b.cover_low <= a.cover_high
}

/// `ranges` (sorted, disjoint, inclusive) without `low..=high`.
fn subtract(ranges: &[(u64, u64)], low: u64, high: u64) -> Vec<(u64, u64)> {
    let mut out = Vec::with_capacity(ranges.len() + 1);
    for &(start, end) in ranges {
        if end < low || start > high {
            out.push((start, end));
            continue;
        }
        if start < low {
            out.push((start, low - 1));
        }
        if end > high {
            out.push((high + 1, end));
        }
    }
    out
}

/// The most common of `values`, if any.
fn most_common<T: Eq + std::hash::Hash + Clone>(values: impl IntoIterator<Item = T>) -> Option<T> {
    let mut counts: HashMap<T, usize> = HashMap::new();
    for value in values {
        *counts.entry(value).or_default() += 1;
    }
    counts
        .into_iter()
        .max_by_key(|(_, count)| *count)
        .map(|(value, _)| value)
}

/// The merge operator's name a damaged store was written with: from its
/// manifest's snapshot, else from its logs' headers; `None` if neither
/// can be read.
pub(crate) fn stored_merge_name(fs: &dyn Fs, dir: &Path) -> Option<String> {
    let names = fs.list_dir(dir).ok()?;
    let manifests = names.iter().filter_map(|name| manifest::parse_name(name));
    let current = manifest::current(fs, dir).ok().flatten();
    for number in current.into_iter().chain(manifests) {
        if let Ok(bytes) = read_whole(fs, &dir.join(manifest::file_name(number))) {
            if let Some((_, name, _)) = manifest::snapshot_head(number, &bytes) {
                return Some(name);
            }
        }
    }
    most_common(
        names
            .iter()
            .filter_map(|name| wal::parse_name(name))
            .filter_map(|number| wal::read_header(fs, dir, number).ok().flatten())
            .map(|header| header.merge_name),
    )
}

/// Repairs the store in `dir` on `fs` (module docs); `merge` folds the
/// merge operands of logs that must be written as lists.
pub(crate) fn repair(
    fs: &dyn Fs,
    dir: &Path,
    merge: Option<Arc<dyn MergeOperator>>,
    interrupt: &Interrupt,
) -> Result<RepairReport> {
    if !fs.is_dir(dir)? {
        return Err(Error::InvalidArgument(format!(
            "{} is not a directory holding a key-value store",
            dir.display()
        )));
    }
    let names = fs.list_dir(dir)?;
    if !names.iter().any(|name| recovery::looks_like_store_file(name)) {
        return Err(Error::InvalidArgument(format!(
            "{} holds no key-value store (no manifest, list or log files)",
            dir.display()
        )));
    }
    let problem = match healthy(fs, dir, interrupt) {
        Ok(report) => return Ok(report),
        Err(error) if error.kind() == spillway_core::ErrorKind::Corruption => error.to_string(),
        Err(error) => return Err(error),
    };
    rebuild(fs, dir, merge, interrupt, problem)
}

/// The report for a store that passes every check (recovery's, and every
/// block of every list read), or the first error.
fn healthy(fs: &dyn Fs, dir: &Path, interrupt: &Interrupt) -> Result<RepairReport> {
    let Some(checked) = recovery::check(fs, dir, false, false)? else {
        return Err(Error::corruption(
            dir.join(manifest::CURRENT),
            0,
            "missing: no manifest is named",
        ));
    };
    let mut report = RepairReport {
        unaccounted: checked.unaccounted.clone(),
        ..RepairReport::default()
    };
    let mut files: Vec<_> = checked.recovered.tree.files().into_iter().collect();
    files.sort_by_key(|(number, _)| *number);
    for (number, file) in files {
        let handle = fs.open_read(file.path())?;
        report.records += file.verify(handle.as_ref(), interrupt)?;
        report.lists_kept.push(list::file_name(number));
    }
    report.logs_read = checked
        .chain
        .iter()
        .map(|&number| wal::file_name(number))
        .collect();
    Ok(report)
}

fn rebuild(
    fs: &dyn Fs,
    dir: &Path,
    merge: Option<Arc<dyn MergeOperator>>,
    interrupt: &Interrupt,
    problem: String,
) -> Result<RepairReport> {
    let mut report = RepairReport {
        repaired: true,
        problem: Some(problem),
        ..RepairReport::default()
    };
    let lost_dir = dir.join(LOST_DIR);
    let mut names = fs.list_dir(dir)?;
    // A salvaged copy an earlier repair left: put in place if its original
    // already went into lost/, else set aside now (this repair writes its
    // own under that name).
    let mut moved_early = Vec::new();
    for name in names.clone() {
        if let Some(target) = name.strip_suffix(".salvage") {
            if list::parse_name(target).is_some() && !names.iter().any(|other| other == target) {
                fs.rename(&dir.join(&name), &dir.join(target))?;
            } else {
                fs.create_dir_all(&lost_dir)?;
                let moved = free_name(fs, &lost_dir, &name)?;
                fs.rename(&dir.join(&name), &lost_dir.join(&moved))?;
                moved_early.push(format!("{LOST_DIR}/{moved}"));
            }
        }
    }
    let to_lost: Vec<String> = Vec::new();
    report.moved_to_lost = moved_early;
    names = fs.list_dir(dir)?;

    // The store's identity and merge operator.
    let current = manifest::current(fs, dir).ok().flatten();
    let manifests: Vec<u64> = names
        .iter()
        .filter_map(|name| manifest::parse_name(name))
        .collect();
    let mut head = None;
    for number in current.into_iter().chain(manifests.iter().rev().copied()) {
        if let Ok(bytes) = read_whole(fs, &dir.join(manifest::file_name(number))) {
            if let Some(found) = manifest::snapshot_head(number, &bytes) {
                head = Some(found);
                break;
            }
        }
    }
    let list_numbers: Vec<FileNumber> = {
        let mut numbers: Vec<_> = names.iter().filter_map(|name| list::parse_name(name)).collect();
        numbers.sort_unstable();
        numbers
    };
    let log_numbers: Vec<u64> = {
        let mut numbers: Vec<_> = names.iter().filter_map(|name| wal::parse_name(name)).collect();
        numbers.sort_unstable();
        numbers
    };
    let list_bytes: Vec<(FileNumber, Vec<u8>)> = list_numbers
        .iter()
        .map(|&number| Ok((number, read_whole(fs, &dir.join(list::file_name(number)))?)))
        .collect::<Result<_>>()?;
    let log_bytes: Vec<(u64, Vec<u8>)> = log_numbers
        .iter()
        .map(|&number| Ok((number, read_whole(fs, &dir.join(wal::file_name(number)))?)))
        .collect::<Result<_>>()?;
    let footers: Vec<(FileNumber, Result<FooterSummary>)> = list_bytes
        .iter()
        .map(|(number, bytes)| {
            let path = dir.join(list::file_name(*number));
            (*number, list::read_footer(&path, *number, bytes))
        })
        .collect();
    let salvaged_logs: Vec<(u64, wal::Salvage)> = log_bytes
        .iter()
        .map(|(number, bytes)| (*number, wal::salvage(*number, bytes)))
        .collect();
    let log_header = |frames: &[(u64, SalvagedFrame)]| -> Option<LogHeader> {
        frames.iter().find_map(|(_, frame)| match frame {
            SalvagedFrame::Header(header) => Some(header.clone()),
            _ => None,
        })
    };
    let (store_id, merge_name) = match head {
        Some((store_id, merge_name, _)) => (store_id, merge_name),
        None => {
            let ids = footers
                .iter()
                .filter_map(|(_, footer)| footer.as_ref().ok().map(|footer| footer.meta.store_id))
                .chain(
                    salvaged_logs
                        .iter()
                        .filter_map(|(_, (frames, _))| log_header(frames).map(|header| header.store_id)),
                );
            let store_id = most_common(ids).unwrap_or_else(|| crate::open::new_store_id(dir));
            let merge_name = most_common(
                salvaged_logs
                    .iter()
                    .filter_map(|(_, (frames, _))| log_header(frames))
                    .filter(|header| header.store_id == store_id)
                    .map(|header| header.merge_name),
            )
            .unwrap_or_default();
            (store_id, merge_name)
        }
    };
    // What the manifest says, if it can still be read: the lists it names
    // and where the writes ended (to name what is missing).
    let named = manifest::recover(fs, dir, |number, _| {
        Ok(ListFile::damaged(
            dir,
            number,
            &Error::corruption(dir, 0, "not opened by repair"),
        ))
    })
    .ok()
    .flatten();
    if let Some(merge) = &merge {
        if merge.name() != merge_name {
            return Err(Error::InvalidArgument(format!(
                "the store in {} was written with merge operator {merge_name:?}, repair was given {:?}",
                dir.display(),
                merge.name()
            )));
        }
    }
    interrupt.check()?;

    // Lists: place what can be placed, salvage what is damaged.
    let mut rectangles: Vec<Rectangle> = Vec::new();
    let mut plan = Plan {
        written: Vec::new(),
        salvaged: Vec::new(),
        to_lost,
    };
    let mut bytes_per_record = Vec::new();
    let mut block_sizes = Vec::new();
    for ((number, bytes), (_, footer)) in list_bytes.iter().zip(&footers) {
        let name = list::file_name(*number);
        let path = dir.join(&name);
        let FooterSummary {
            block_bytes,
            blocks_end,
            records,
            meta,
        } = match footer {
            Ok(footer) => *footer,
            Err(error) => {
                report.lost.push(Loss {
                    file: name.clone(),
                    ranges: vec![(0, bytes.len() as u64)],
                    records: 0,
                    what: format!("no valid footer, the file cannot be placed: {error}"),
                });
                plan.to_lost.push(name);
                continue;
            }
        };
        if meta.store_id != store_id {
            report.unaccounted.push(format!(
                "{name}: a list file of another store ({:016x}), moved into {LOST_DIR}/",
                meta.store_id
            ));
            plan.to_lost.push(name);
            continue;
        }
        block_sizes.push(block_bytes);
        let salvaged = list::salvage_blocks(&path, *number, bytes, block_bytes, blocks_end);
        let opened = if salvaged.bad.is_empty() {
            ListFile::open(fs, dir, *number).ok()
        } else {
            None
        };
        if salvaged.good_bytes > 0 && !salvaged.records.is_empty() {
            bytes_per_record.push(salvaged.good_bytes as f64 / salvaged.records.len() as f64);
        }
        match opened {
            Some(file) => {
                report.lists_kept.push(name);
                rectangles.push(Rectangle {
                    number: *number,
                    meta,
                    file,
                });
            }
            None => {
                let lost_records = records.saturating_sub(salvaged.records.len() as u64);
                report.lost.push(Loss {
                    file: name.clone(),
                    ranges: salvaged.bad.clone(),
                    records: lost_records,
                    what: if salvaged.bad.is_empty() {
                        "its filter, index or sketch failed its checksum; rebuilt from its blocks".into()
                    } else {
                        format!("{} blocks failed their checksums", salvaged.bad.len())
                    },
                });
                plan.to_lost.push(name.clone());
                if !salvaged.records.is_empty() {
                    report.lists_salvaged.push(name);
                    plan.salvaged.push((*number, meta, block_bytes, salvaged.records));
                }
            }
        }
    }
    let bytes_per_record = if bytes_per_record.is_empty() {
        64.0
    } else {
        bytes_per_record.iter().sum::<f64>() / bytes_per_record.len() as f64
    };
    for loss in &mut report.lost {
        if loss.records == 0 && loss.what.starts_with("no valid footer") {
            loss.records = (loss.ranges[0].1 as f64 / bytes_per_record).ceil() as u64;
        }
    }
    let block_bytes = most_common(block_sizes.iter().copied()).unwrap_or(Options::default().block_bytes);
    if let Some(named) = &named {
        // Lists the manifest names that are gone: their blocks, estimated.
        let mut blocks: BTreeMap<FileNumber, u32> = BTreeMap::new();
        for node in named.tree.nodes() {
            for list in &node.lists {
                let most = blocks.entry(list.file.number()).or_default();
                *most = (*most).max(list.end_block);
            }
        }
        // A manifest older than the lists here (a copy): the lists it names
        // may have been rewritten into later ones before they went.
        let newer = list_numbers
            .iter()
            .filter(|&&number| number >= named.counters.next_file)
            .count();
        let caveat = if newer > 1 {
            format!(
                "; {newer} list files here are newer than the manifest, which may be an older copy: \
                 they may hold these records, rewritten"
            )
        } else {
            String::new()
        };
        for (number, blocks) in blocks {
            if !list_numbers.contains(&number) {
                report.lost.push(Loss {
                    file: list::file_name(number),
                    ranges: Vec::new(),
                    records: (f64::from(blocks) * f64::from(block_bytes) / bytes_per_record).ceil() as u64,
                    what: format!(
                        "missing: {} named it as a list of the tree ({blocks} blocks; records estimated){caveat}",
                        manifest::file_name(named.manifest_number)
                    ),
                });
            }
        }
    }

    // Logs: every frame that can be read.
    let headers: Vec<LogHeader> = salvaged_logs
        .iter()
        .filter_map(|(_, (frames, _))| log_header(frames))
        .filter(|header| header.store_id == store_id)
        .collect();
    let mut logs: Vec<LogRead> = Vec::new();
    for (number, (frames, bad)) in salvaged_logs {
        let name = wal::file_name(number);
        let header = log_header(&frames);
        if header.as_ref().is_some_and(|header| header.store_id != store_id) {
            report
                .unaccounted
                .push(format!("{name}: a log of another store, moved into {LOST_DIR}/"));
            plan.to_lost.push(name);
            continue;
        }
        report.logs_read.push(name.clone());
        plan.to_lost.push(name.clone());
        let mut writes = Vec::new();
        let mut batches: Vec<(u64, u64, u64)> = Vec::new();
        for (offset, frame) in &frames {
            if let SalvagedFrame::Batch(first_seq, batch) = frame {
                batches.push((*offset, *first_seq, first_seq + batch.len() as u64));
                for (index, record) in batch.iter().enumerate() {
                    writes.push((
                        first_seq + index as u64,
                        record.hash,
                        record.kind,
                        record.key.to_vec(),
                        record.value.to_vec(),
                    ));
                }
            }
        }
        let first = header
            .as_ref()
            .map(|header| header.first_seq)
            .or_else(|| batches.first().map(|batch| batch.1));
        let sealed_end = frames.iter().find_map(|(_, frame)| match frame {
            SalvagedFrame::Trailer(trailer) => Some(trailer.end_seq),
            _ => None,
        });
        let end = batches.last().map(|batch| batch.2).or(first);
        if !bad.is_empty() {
            // Writes lost between good frames are counted exactly by their
            // sequence numbers; past the last good frame, by its bytes.
            let mut records = 0;
            for &(start, stop) in &bad {
                let before = batches
                    .iter()
                    .rev()
                    .find(|batch| batch.0 < start)
                    .map(|batch| batch.2);
                // Before a good batch, or before a trailer that says where
                // the log ended: counted exactly.
                let after = batches
                    .iter()
                    .find(|batch| batch.0 >= stop)
                    .map(|batch| batch.1)
                    .or(sealed_end);
                records += match (before.or(first), after) {
                    (Some(before), Some(after)) => after.saturating_sub(before),
                    _ => ((stop - start) as f64 / bytes_per_record).ceil() as u64,
                };
            }
            let trailer_at = frames.iter().find_map(|(offset, frame)| match frame {
                SalvagedFrame::Trailer(_) => Some(*offset),
                _ => None,
            });
            let what = if trailer_at.is_some_and(|trailer_at| bad.iter().all(|range| range.0 > trailer_at)) {
                "bytes that are not zeros after its trailer (it holds no writes there)".to_string()
            } else if header.is_none() {
                "frames failed their checksums (its header among them)".to_string()
            } else {
                "frames failed their checksums (past the last good frame: a torn end of a crash, or damage)"
                    .to_string()
            };
            report.lost.push(Loss {
                file: name,
                ranges: bad,
                records,
                what,
            });
        }
        if let (Some(first), Some(end)) = (first, end) {
            logs.push(LogRead {
                number,
                writes,
                seqs: (first, end),
            });
        }
    }
    // Two logs holding the same writes (a copy of a log beside it): the
    // later log's are kept.
    logs.sort_by_key(|log| std::cmp::Reverse(log.number));
    let mut claimed: Vec<(u64, u64)> = Vec::new();
    for log in &mut logs {
        let before = log.writes.len();
        log.writes
            .retain(|write| !claimed.iter().any(|&(low, end)| write.0 >= low && write.0 < end));
        if log.writes.len() < before {
            report.lost.push(Loss {
                file: wal::file_name(log.number),
                ranges: Vec::new(),
                records: (before - log.writes.len()) as u64,
                what: "writes a later log holds too (the later log's were kept)".into(),
            });
        }
        claimed.push(log.seqs);
    }
    logs.sort_by_key(|log| log.number);
    report_missing_writes(
        &mut report,
        named.as_ref(),
        &footers,
        &logs,
        &log_numbers,
        &headers,
    );
    interrupt.check()?;

    // What each list keeps: its cover, but where a later file whose writes
    // overlap its own covers the same hashes.
    let mut parts: Vec<(ListMeta, FileNumber, ListRef)> = Vec::new();
    // Salvaged lists are written first: their rectangles take part.
    let mut next_number = list_numbers
        .iter()
        .chain(&log_numbers)
        .chain(&manifests)
        .copied()
        .chain(lost_numbers(fs, &lost_dir)?)
        .max()
        .unwrap_or(0)
        + 1;
    let mut staged: Vec<(FileNumber, Arc<ListFile>, bool)> = Vec::new();
    let metas: Vec<(FileNumber, ListMeta)> = rectangles
        .iter()
        .map(|rectangle| (rectangle.number, rectangle.meta))
        .chain(plan.salvaged.iter().map(|(number, meta, _, _)| (*number, *meta)))
        .collect();
    let max_list_seq = metas.iter().map(|(_, meta)| meta.seq_max).max();

    // Log writes no list holds, folded per key, grouped into stretches of
    // hashes apart from the covers of the lists that share their writes'
    // sequence numbers.
    for log in &logs {
        let sharing: Vec<&ListMeta> = metas
            .iter()
            .map(|(_, meta)| meta)
            .filter(|meta| seq_overlap(meta, log.seqs.0, log.seqs.1.saturating_sub(1)))
            .collect();
        let mut pending: Vec<&LogWrite> = log
            .writes
            .iter()
            .filter(|write| {
                !sharing.iter().any(|meta| {
                    meta.cover_low <= write.1
                        && write.1 <= meta.cover_high
                        && meta.seq_min <= write.0
                        && write.0 <= meta.seq_max
                })
            })
            .collect();
        if pending.is_empty() {
            continue;
        }
        let mut gaps = vec![(0u64, u64::MAX)];
        for meta in &sharing {
            gaps = subtract(&gaps, meta.cover_low, meta.cover_high);
        }
        pending.sort_by(|a, b| (a.1, &a.3, a.0).cmp(&(b.1, &b.3, b.0)));
        // By the stretch of hashes a write lies in; `None` for one inside a
        // sharing list's cover (which aligned logs never make).
        let mut groups: BTreeMap<Option<usize>, Vec<OwnedRecord>> = BTreeMap::new();
        let mut at = 0;
        while at < pending.len() {
            let (hash, key) = (pending[at].1, &pending[at].3);
            let mut folded = Folded::default();
            folded.start(pending[at].2, &pending[at].4);
            let mut next = at + 1;
            while next < pending.len() && pending[next].1 == hash && &pending[next].3 == key {
                let write = pending[next];
                if folded.kind().is_some_and(|kind| kind != Kind::Delete)
                    && write.2 == Kind::Merge
                    && merge.is_none()
                {
                    return Err(Error::InvalidArgument(format!(
                        "the logs hold merge operands to fold and the store's merge operator {merge_name:?} \
                         is not one repair can build: call Store::repair_with with it"
                    )));
                }
                folded.apply(key, write.2, &write.4, merge.as_deref())?;
                next += 1;
            }
            let gap = gaps.partition_point(|&(_, end)| end < hash);
            let gap = gaps.get(gap).filter(|&&(start, _)| start <= hash).map(|_| gap);
            groups.entry(gap).or_default().push((
                hash,
                folded.kind().expect("started"),
                key.clone(),
                folded.value().to_vec(),
            ));
            at = next;
        }
        for (gap, records) in groups {
            let (cover_low, cover_high) = match gap {
                Some(gap) => gaps[gap],
                None => (records[0].0, records[records.len() - 1].0),
            };
            let meta = ListMeta {
                store_id,
                seq_min: log.seqs.0,
                seq_max: log.seqs.1.saturating_sub(1).max(log.seqs.0),
                cover_low,
                cover_high,
            };
            plan.written.push((next_number, meta, records));
            next_number += 1;
        }
    }
    let max_seq = logs
        .iter()
        .map(|log| log.seqs.1)
        .chain(max_list_seq.map(|seq| seq + 1))
        .max()
        .unwrap_or(0);
    let log_number = next_number;
    let manifest_number = next_number + 1;
    next_number += 2;
    interrupt.check()?;

    // Write: salvaged copies and lists from logs, then the new log.
    let options = Options::default();
    let mut created: Vec<String> = Vec::new();
    let written = (|| -> Result<()> {
        for (number, meta, block_bytes, records) in &plan.salvaged {
            let temporary = format!("{}.salvage", list::file_name(*number));
            created.push(temporary.clone());
            let file = write_list(
                fs,
                &dir.join(&temporary),
                *number,
                *block_bytes,
                &options,
                *meta,
                records,
            )?;
            staged.push((*number, file, true));
            interrupt.check()?;
        }
        for (number, meta, records) in &plan.written {
            let name = list::file_name(*number);
            created.push(name.clone());
            let file = write_list(
                fs,
                &dir.join(&name),
                *number,
                block_bytes,
                &options,
                *meta,
                records,
            )?;
            report.lists_written.push(name);
            staged.push((*number, file, false));
            interrupt.check()?;
        }
        created.push(wal::file_name(log_number));
        let mut wal = Wal::create(
            fs,
            dir,
            &LogHeader {
                store_id,
                number: log_number,
                previous: 0,
                first_seq: max_seq,
                padded: true,
                merge_name: merge_name.clone(),
            },
        )?;
        wal.seal(LogTrailer {
            next: 0,
            end_seq: max_seq,
        })?;
        fs.sync_dir(dir)?;
        interrupt.check()
    })();
    if let Err(error) = written {
        for name in created {
            let _ = fs.remove_file(&dir.join(name));
        }
        return Err(error);
    }
    for (number, file, _) in &staged {
        rectangles.push(Rectangle {
            number: *number,
            meta: file.meta(),
            file: file.clone(),
        });
    }

    // What each list keeps (step 4).
    for rectangle in &rectangles {
        let mut kept = vec![(rectangle.meta.cover_low, rectangle.meta.cover_high)];
        for later in &rectangles {
            if later.number > rectangle.number
                && seq_overlap(&later.meta, rectangle.meta.seq_min, rectangle.meta.seq_max)
                && cover_overlap(&later.meta, &rectangle.meta)
            {
                kept = subtract(&kept, later.meta.cover_low, later.meta.cover_high);
            }
        }
        let whole = ListRef::whole(rectangle.file.clone());
        let mut any = false;
        for (low, high) in kept {
            if let Some(part) = whole.narrow(low, high) {
                parts.push((rectangle.meta, rectangle.number, part));
                any = true;
            }
        }
        if !any && !staged.iter().any(|(number, _, _)| *number == rectangle.number) {
            // Wholly rewritten by later lists: an obsolete file a crash left.
            plan.to_lost.push(list::file_name(rectangle.number));
            report
                .lists_kept
                .retain(|name| *name != list::file_name(rectangle.number));
        }
    }
    parts.sort_by_key(|(meta, number, _)| (meta.seq_min, meta.seq_max, *number));
    let mut leaf = Node::new(1, 0, u64::MAX);
    leaf.lists = parts.into_iter().map(|(_, _, part)| part).collect();
    let mut root = Node::new(ROOT, 0, u64::MAX);
    root.children.push(Child { low: 0, id: 1 });
    let tree = Tree::from_nodes([root, leaf]);
    tree.check_invariants()?;
    report.records = tree.files().values().map(|file| file.records()).sum();

    // Move what the new store does not use into lost/, then put salvaged
    // copies in place, then the manifest and CURRENT.
    for name in &names {
        let old_manifest = manifest::parse_name(name).is_some();
        if old_manifest || name == manifest::CURRENT_TEMPORARY || name == wal::SPARE_NAME {
            plan.to_lost.push(name.clone());
        }
    }
    plan.to_lost.sort();
    plan.to_lost.dedup();
    if !plan.to_lost.is_empty() {
        fs.create_dir_all(&lost_dir)?;
        fs.sync_dir(dir)?;
    }
    for name in &plan.to_lost {
        let target = free_name(fs, &lost_dir, name)?;
        fs.rename(&dir.join(name), &lost_dir.join(&target))?;
        report.moved_to_lost.push(format!("{LOST_DIR}/{target}"));
    }
    for (number, _, salvaged) in &staged {
        if *salvaged {
            let name = list::file_name(*number);
            fs.rename(&dir.join(format!("{name}.salvage")), &dir.join(&name))?;
        }
    }
    if !plan.to_lost.is_empty() {
        fs.sync_dir(&lost_dir)?;
    }
    fs.sync_dir(dir)?;
    let counters = Counters {
        next_file: next_number,
        next_node: 2,
        log_number,
        log_seq: max_seq,
        newest_log: log_number,
        closed_seq: Some(max_seq),
    };
    let mut snapshot = Vec::new();
    manifest::encode_snapshot(&tree, store_id, counters, &merge_name, &mut snapshot);
    ManifestWriter::create(fs, dir, manifest_number, &snapshot)?;
    report.manifest = Some(manifest::file_name(manifest_number));
    report.log = Some(wal::file_name(log_number));
    report.records_lost = report.lost.iter().map(|loss| loss.records).sum();
    report.lists_kept.sort();
    report.unaccounted.extend(
        names
            .iter()
            .filter(|name| {
                recovery::looks_like_store_file(name)
                    && list::parse_name(name).is_none()
                    && wal::parse_name(name).is_none()
                    && manifest::parse_name(name).is_none()
                    && name.as_str() != manifest::CURRENT
                    && name.as_str() != manifest::CURRENT_TEMPORARY
                    && !name.ends_with(".salvage")
            })
            .map(|name| format!("{name}: not a file this store writes, left alone")),
    );
    Ok(report)
}

/// Reports the writes no list or log holds: the stretches of sequence
/// numbers between the first write the files hold and the last (or where
/// the manifest recorded a clean close ended them) that no list's range
/// and no log's writes cover, each counted exactly and named after the
/// log that held it where the others' headers or the manifest tell.
fn report_missing_writes(
    report: &mut RepairReport,
    named: Option<&manifest::Recovered>,
    footers: &[(FileNumber, Result<FooterSummary>)],
    logs: &[LogRead],
    log_numbers: &[u64],
    headers: &[LogHeader],
) {
    let mut ranges: Vec<(u64, u64)> = footers
        .iter()
        .filter_map(|(_, footer)| footer.as_ref().ok())
        .map(|footer| (footer.meta.seq_min, footer.meta.seq_max + 1))
        .chain(logs.iter().map(|log| log.seqs))
        .collect();
    if let Some(named) = named {
        // Writes before the manifest's log number are in its tree's lists.
        ranges.push((0, named.counters.log_seq));
    }
    ranges.sort_unstable();
    let end = ranges
        .iter()
        .map(|range| range.1)
        .chain(named.and_then(|named| named.counters.closed_seq))
        .max()
        .unwrap_or(0);
    let mut covered = ranges.first().map_or(end, |range| range.0);
    let mut gaps = Vec::new();
    for (low, high) in ranges.into_iter().chain([(end, end)]) {
        if low > covered {
            gaps.push((covered, low));
        }
        covered = covered.max(high);
    }
    for (low, high) in gaps {
        // The log before one that starts where the gap ends, or the newest
        // log a clean close recorded as ending there.
        let follower = headers
            .iter()
            .find(|header| header.first_seq == high && header.previous != 0)
            .map(|header| header.previous);
        let newest = named
            .filter(|named| named.counters.closed_seq == Some(high))
            .map(|named| named.counters.newest_log);
        let (file, what) = match follower.or(newest) {
            Some(number) if log_numbers.contains(&number) => (
                wal::file_name(number),
                format!("writes {low}..{high} are missing from its end: it was cut short or replaced by an older copy"),
            ),
            Some(number) => (
                wal::file_name(number),
                format!("missing: it held writes {low}..{high}, which no other file holds"),
            ),
            None => (
                String::new(),
                format!("writes {low}..{high} are in no list or log"),
            ),
        };
        report.lost.push(Loss {
            file,
            ranges: Vec::new(),
            records: high - low,
            what,
        });
    }
}

/// Writes list `number` at `path` holding `records` (sorted by hash and
/// key, one per key), its footer recording `meta`.
fn write_list(
    fs: &dyn Fs,
    path: &Path,
    number: FileNumber,
    block_bytes: u32,
    options: &Options,
    meta: ListMeta,
    records: &[OwnedRecord],
) -> Result<Arc<ListFile>> {
    let mut writer = ListWriter::create_at(fs, path, number, block_bytes, options.filter_bits(), meta)?;
    for (hash, kind, key, value) in records {
        writer.add(&RecordRef {
            hash: *hash,
            kind: *kind,
            key,
            value,
        })?;
    }
    writer.finish()
}

/// The numbers of the store files already in `lost/` (never reused).
fn lost_numbers(fs: &dyn Fs, lost_dir: &Path) -> Result<Vec<u64>> {
    if !fs.is_dir(lost_dir)? {
        return Ok(Vec::new());
    }
    Ok(fs
        .list_dir(lost_dir)?
        .iter()
        .filter_map(|name| {
            let base = name
                .split_once(".list")
                .map_or(name.as_str(), |(number, _)| number);
            let base = base.split_once(".log").map_or(base, |(number, _)| number);
            let base = base.strip_prefix("MANIFEST-").unwrap_or(base);
            base.parse().ok()
        })
        .collect())
}

/// A name in `lost_dir` for `name`: itself, or with `.1`, `.2`, ... after
/// it when an earlier repair moved a file of that name there.
fn free_name(fs: &dyn Fs, lost_dir: &Path, name: &str) -> Result<String> {
    if !fs.exists(&lost_dir.join(name))? {
        return Ok(name.to_string());
    }
    let mut copy = 1;
    loop {
        let candidate = format!("{name}.{copy}");
        if !fs.exists(&lost_dir.join(&candidate))? {
            return Ok(candidate);
        }
        copy += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subtracting_ranges_keeps_what_is_outside() {
        let all = vec![(0, u64::MAX)];
        assert_eq!(subtract(&all, 10, 20), vec![(0, 9), (21, u64::MAX)]);
        assert_eq!(subtract(&all, 0, 20), vec![(21, u64::MAX)]);
        assert_eq!(subtract(&all, 5, u64::MAX), vec![(0, 4)]);
        assert_eq!(subtract(&[(0, 9), (21, 30)], 5, 25), vec![(0, 4), (26, 30)]);
        assert!(subtract(&[(3, 4)], 0, 10).is_empty());
    }
}
