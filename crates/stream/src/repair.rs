//! Repair, as LevelDB's and RocksDB's `RepairDB` do: rebuild a damaged
//! store's manifest from what its files' own footers, headers and
//! checksums prove, salvage every record that can be read, and move what
//! cannot be used into `lost/` (nothing is deleted).
//!
//! # Algorithm
//!
//! 1. If the store checks clean (what `verify` checks: the manifest, every
//!    listed segment read whole, every live log as a chain), nothing is
//!    rebuilt: files that are not part of it and that nothing proves
//!    obsolete are moved into `lost/`, and that is all.
//! 2. Otherwise, every segment file is read as far as its footer and
//!    index allow (every leaf that passes its checksum), every log file
//!    frame by frame, stepping over damaged bytes. The store's id comes
//!    from the manifest if it reads back, else from most of the files;
//!    files of another store are set aside.
//! 3. Segments are chosen by sequence ranges, which must not overlap:
//!    whole segments first, the widest first (a compaction's output
//!    supersedes its inputs), then segments with damaged leaves, whose
//!    good leaves are written into a new segment of the same range. A
//!    segment with damaged leaves whose writes the logs still hold all of
//!    is left out, and the logs' writes serve.
//! 4. The logs' writes that no chosen segment holds are resolved (newest
//!    wins) and written as new segments, one per gap between the chosen
//!    segments.
//! 5. New segments and a new, empty log are made durable, the old
//!    manifest is copied into `lost/`, and the new manifest replaces it:
//!    the store is repaired. Then every file the new manifest does not use
//!    is moved into `lost/`. A crash before the manifest is replaced
//!    leaves the old store (and files a new repair or open accounts for);
//!    after it, the files not yet moved are ones an open proves obsolete
//!    or keeps as unaccounted.
//!
//! The report names every file moved and why, the byte ranges that could
//! not be read, and an estimate of the writes lost: the sequence numbers
//! below the new `next_seq` that no kept file holds, and the records of
//! the leaves that could not be read.
//!
//! What repair cannot do: bring back the records of a damaged leaf or log
//! frame (unless another file holds the same writes), nor the writes a
//! cut-short newest log held past its cut after a crash (nothing records
//! how far it went); an update or delete that is lost no longer hides the
//! older records it replaced, so they reappear.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use serde::Serialize;
use spillway_core::{Error, ErrorKind, Fs, Interrupt, Result};

use crate::batch::Op;
use crate::cache::Cache;
use crate::manifest::{self, Listed, LiveLog, Manifest};
use crate::records::{Records, Shadow};
use crate::segment::{self, Segment};
use crate::survey::{self, Unaccounted};
use crate::wal;

/// The folder, inside the store's directory, that repair moves the files
/// it cannot use into.
pub const LOST_DIR: &str = "lost";

/// What [`crate::StreamIndex::repair`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct RepairReport {
    /// Whether anything in the directory changed (a store that checks
    /// clean and holds no stray file is left as it is).
    pub changed: bool,
    /// Whether the manifest was rebuilt from the files.
    pub rebuilt: bool,
    /// Segments the store now lists.
    pub segments: u64,
    /// Live records in them.
    pub records: u64,
    /// Segment files the repair wrote (salvaged leaves, and the logs'
    /// writes).
    pub written: Vec<String>,
    /// Writes read back from logs into those segments.
    pub log_writes: u64,
    /// Files the store could not use, each with why and what was lost:
    /// moved into `lost/`, or missing (listed by the old manifest).
    pub lost: Vec<LostFile>,
    /// An estimate of the writes lost: sequence numbers that no kept file
    /// holds, and the records of leaves that could not be read.
    pub records_lost: u64,
}

/// A file [`RepairReport`] could not use.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LostFile {
    /// Its name in the store's directory.
    pub file: String,
    /// Where it is now, relative to the store's directory (`None`: it was
    /// missing).
    pub moved_to: Option<String>,
    /// Why it is not used.
    pub reason: String,
    /// Byte ranges of it that could not be read.
    pub damaged: Vec<ByteRange>,
    /// An estimate of the writes lost with it (0 when another file holds
    /// them all, or when it is not known).
    pub records_lost: u64,
}

/// Bytes `offset..offset + len` of a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ByteRange {
    /// Where they start.
    pub offset: u64,
    /// How many.
    pub len: u64,
}

/// A write read back from a log.
#[derive(Debug, Clone)]
struct LogWrite {
    seq: u64,
    op: Op,
    key: u64,
    time: u64,
    value: Vec<u8>,
}

/// A segment file as repair found it.
#[derive(Debug)]
struct FoundSegment {
    name: String,
    salvaged: segment::Salvaged,
}

impl FoundSegment {
    fn whole(&self) -> bool {
        self.salvaged.bad_leaves.is_empty()
    }

    fn seqs(&self) -> (u64, u64) {
        (self.salvaged.meta.first_seq, self.salvaged.meta.last_seq)
    }
}

/// A log file as repair found it.
#[derive(Debug)]
struct FoundLog {
    name: String,
    /// Bytes that hold no readable frame.
    damaged: Vec<ByteRange>,
    /// Why its writes are not used (another store's, or nobody's).
    refused: Option<String>,
    /// The sequence numbers it stood for, as far as anything says.
    range: Option<(u64, u64)>,
}

/// What becomes of a segment found.
#[derive(Debug)]
enum Fate {
    /// Listed as it is.
    Kept,
    /// Its good leaves are written into a new segment.
    Rewritten,
    /// Set aside, with why and the writes lost with it.
    Moved(String, u64),
}

/// Repairs the store in `dir` on `fs` (see the module docs).
pub(crate) fn repair(fs: &dyn Fs, dir: &Path, interrupt: &Interrupt) -> Result<RepairReport> {
    check_is_store(fs, dir)?;
    let names = fs.list_dir(dir)?;
    let hint = match Manifest::read(fs, dir) {
        Ok(manifest) => manifest,
        // An older format is not damage: nothing here may move.
        Err(error) if error.kind() == ErrorKind::InvalidArgument => return Err(error),
        Err(_) => None,
    };
    if let Some(manifest) = &hint {
        if let Some(report) = checks_clean(fs, dir, manifest, interrupt)? {
            return finish_clean(fs, dir, report);
        }
    }
    rebuild(fs, dir, &names, hint, interrupt)
}

/// Fails unless `dir` is a directory holding a store's files (before a
/// repair locks it, which would make a `LOCK` file).
pub(crate) fn check_is_store(fs: &dyn Fs, dir: &Path) -> Result<()> {
    if !fs.is_dir(dir)? || !fs.list_dir(dir)?.iter().any(|name| survey::is_store_file(name)) {
        return Err(no_store(dir));
    }
    Ok(())
}

fn no_store(dir: &Path) -> Error {
    Error::InvalidArgument(format!(
        "{} holds no stream index (no {} file, no segment or log file)",
        dir.display(),
        manifest::FILE_NAME
    ))
}

/// The unaccounted files and the counts of a store that checks clean, or
/// `None` if it does not.
fn checks_clean(
    fs: &dyn Fs,
    dir: &Path,
    manifest: &Manifest,
    interrupt: &Interrupt,
) -> Result<Option<(Vec<Unaccounted>, u64, u64)>> {
    let survey = match survey::survey(fs, dir, manifest, &Cache::new(0), interrupt, |_, _| Ok(())) {
        Ok(survey) => survey,
        Err(error) if error.kind() == ErrorKind::Corruption => return Ok(None),
        Err(error) => return Err(error),
    };
    let mut records = 0;
    for opened in &survey.segments {
        interrupt.check()?;
        let Ok(segment) = opened else {
            return Ok(None);
        };
        match segment::salvage(fs, segment.path()) {
            Ok(salvaged) if salvaged.bad_leaves.is_empty() => records += salvaged.meta.records,
            Ok(_) => return Ok(None),
            Err(error) if error.kind() == ErrorKind::Corruption => return Ok(None),
            Err(error) => return Err(error),
        }
    }
    Ok(Some((survey.unaccounted, survey.segments.len() as u64, records)))
}

/// Moves the stray files of a store that checks clean into `lost/`.
fn finish_clean(
    fs: &dyn Fs,
    dir: &Path,
    (unaccounted, segments, records): (Vec<Unaccounted>, u64, u64),
) -> Result<RepairReport> {
    let mut report = RepairReport {
        changed: !unaccounted.is_empty(),
        segments,
        records,
        ..RepairReport::default()
    };
    let mut lost = Lost::new(fs, dir);
    for stray in unaccounted {
        report
            .lost
            .push(lost.moved(&stray.file, stray.reason, Vec::new(), 0)?);
    }
    lost.sync()?;
    Ok(report)
}

/// Moves files into `lost/`, never over one already there.
struct Lost<'a> {
    fs: &'a dyn Fs,
    dir: &'a Path,
    made: bool,
}

impl<'a> Lost<'a> {
    fn new(fs: &'a dyn Fs, dir: &'a Path) -> Self {
        Lost { fs, dir, made: false }
    }

    /// A name in `lost/` that no file has, for `name`.
    fn free_name(&mut self, name: &str) -> Result<String> {
        let lost = self.dir.join(LOST_DIR);
        if !self.made {
            self.fs.create_dir_all(&lost)?;
            self.made = true;
        }
        let mut candidate = name.to_string();
        let mut attempt = 0;
        while self.fs.exists(&lost.join(&candidate))? {
            attempt += 1;
            candidate = format!("{name}.{attempt}");
        }
        Ok(candidate)
    }

    /// Moves `name` into `lost/`.
    fn moved(
        &mut self,
        name: &str,
        reason: String,
        damaged: Vec<ByteRange>,
        records_lost: u64,
    ) -> Result<LostFile> {
        let target = self.free_name(name)?;
        self.fs
            .rename(&self.dir.join(name), &self.dir.join(LOST_DIR).join(&target))?;
        Ok(LostFile {
            file: name.to_string(),
            moved_to: Some(format!("{LOST_DIR}/{target}")),
            reason,
            damaged,
            records_lost,
        })
    }

    /// Writes a copy of `bytes` into `lost/` as `name` (the old manifest,
    /// kept before it is replaced); returns where.
    fn copy(&mut self, name: &str, bytes: &[u8]) -> Result<String> {
        let target = self.free_name(name)?;
        let file = self.fs.create(&self.dir.join(LOST_DIR).join(&target))?;
        file.write_at(bytes, 0)?;
        file.sync_data()?;
        Ok(format!("{LOST_DIR}/{target}"))
    }

    /// Makes the moves durable.
    fn sync(&self) -> Result<()> {
        if self.made {
            self.fs.sync_dir(&self.dir.join(LOST_DIR))?;
            self.fs.sync_dir(self.dir)?;
        }
        Ok(())
    }
}

/// Steps 2-5 of the module docs.
fn rebuild(
    fs: &dyn Fs,
    dir: &Path,
    names: &[String],
    hint: Option<Manifest>,
    interrupt: &Interrupt,
) -> Result<RepairReport> {
    // 2. Read what every file holds.
    let mut found_segments = Vec::new();
    let mut unusable: Vec<(String, String, Vec<ByteRange>)> = Vec::new();
    let mut highest_id = hint
        .as_ref()
        .map_or(0, |manifest| manifest.next_segment_id.saturating_sub(1));
    let mut highest_log = hint
        .as_ref()
        .map_or(0, |manifest| manifest.next_log_number.saturating_sub(1));
    let lost_names = if fs.is_dir(&dir.join(LOST_DIR))? {
        fs.list_dir(&dir.join(LOST_DIR))?
    } else {
        Vec::new()
    };
    for name in names.iter().chain(&lost_names) {
        let stem = name.split('.').take(2).collect::<Vec<_>>().join(".");
        if let Some(id) = survey::segment_number(&stem) {
            highest_id = highest_id.max(id);
        }
        if let Some(number) = wal::parse_name(&stem) {
            highest_log = highest_log.max(number);
        }
    }
    for name in names {
        let Some(id) = survey::segment_number(name) else {
            continue;
        };
        interrupt.check()?;
        match segment::salvage(fs, &dir.join(name)) {
            Ok(salvaged) if salvaged.meta.id == id => found_segments.push(FoundSegment {
                name: name.clone(),
                salvaged,
            }),
            Ok(salvaged) => unusable.push((
                name.clone(),
                format!("its footer names segment {}, not {id}", salvaged.meta.id),
                Vec::new(),
            )),
            Err(error) if error.kind() == ErrorKind::Corruption => {
                let len = fs.file_len(&dir.join(name))?;
                if error.to_string().contains("format version 1") {
                    return Err(Error::InvalidArgument(format!(
                        "{} is a segment of format version 1, written by an older Spillway: repair \
                         reads version 2 stores only, and leaves this one as it is",
                        dir.join(name).display()
                    )));
                }
                unusable.push((
                    name.clone(),
                    format!("its footer or index cannot be read: {error}"),
                    vec![ByteRange { offset: 0, len }],
                ));
            }
            Err(error) => return Err(error),
        }
    }
    let store_id = match &hint {
        Some(manifest) => manifest.store_id,
        None => most_common_store_id(fs, dir, names, &found_segments)?,
    };
    // Segments of another store are set aside.
    let (ours, foreign): (Vec<FoundSegment>, Vec<FoundSegment>) = found_segments
        .into_iter()
        .partition(|found| found.salvaged.meta.store_id == store_id);
    for found in foreign {
        unusable.push((
            found.name,
            format!(
                "a segment of another store (store id {:#x}, this store is {store_id:#x})",
                found.salvaged.meta.store_id
            ),
            Vec::new(),
        ));
    }

    // The logs, frame by frame.
    let mut writes: BTreeMap<u64, LogWrite> = BTreeMap::new();
    let mut logs: Vec<FoundLog> = Vec::new();
    let mut log_starts: Vec<u64> = Vec::new();
    for name in names {
        let Some(number) = wal::parse_name(name) else {
            continue;
        };
        interrupt.check()?;
        let listed = hint
            .as_ref()
            .and_then(|manifest| manifest.live_log(number))
            .copied();
        let mut batches = Vec::new();
        let salvaged = wal::salvage(
            fs,
            &dir.join(name),
            number,
            listed.map_or(0, |log| log.first_seq),
            |batch, first_seq| {
                for i in 0..batch.len() {
                    batches.push(LogWrite {
                        seq: first_seq + i as u64,
                        op: batch.ops[i],
                        key: batch.keys[i],
                        time: batch.times[i],
                        value: batch.value(i).to_vec(),
                    });
                }
            },
        )?;
        let damaged: Vec<ByteRange> = salvaged
            .damaged
            .iter()
            .map(|&(offset, len)| ByteRange { offset, len })
            .collect();
        // Whose log it is: its header says, or the manifest lists it.
        let refused = match salvaged.header {
            Some(header) if header.store_id != store_id => Some(format!(
                "a log of another store (store id {:#x}, this store is {store_id:#x})",
                header.store_id
            )),
            Some(header) => {
                log_starts.push(header.first_seq);
                None
            }
            None if listed.is_some() => None,
            None => Some("its header cannot be read and the manifest does not list it".to_string()),
        };
        // What the old manifest says the log held (each live log up to
        // where the next starts, the newest up to its clean close),
        // widened by the writes read back.
        let mut range = hint.as_ref().and_then(|manifest| {
            let at = manifest.logs.iter().position(|log| log.number == number)?;
            let end = match manifest.logs.get(at + 1) {
                Some(next) => next.first_seq,
                None if manifest.closed_at != manifest::NOT_CLOSED => manifest.closed_at,
                None => return None,
            };
            (end > manifest.logs[at].first_seq).then(|| (manifest.logs[at].first_seq, end - 1))
        });
        if let (Some(first), Some(last)) = (batches.first(), batches.last()) {
            range = Some(range.map_or((first.seq, last.seq), |(low, high)| {
                (low.min(first.seq), high.max(last.seq))
            }));
        }
        if refused.is_none() {
            for write in batches {
                writes.entry(write.seq).or_insert(write);
            }
        }
        logs.push(FoundLog {
            name: name.clone(),
            damaged,
            refused,
            range,
        });
    }

    // 3. Choose segments by sequence range.
    let covered_by_logs =
        |(first, last): (u64, u64)| writes.range(first..=last).count() as u64 == last - first + 1;
    let mut order: Vec<usize> = (0..ours.len()).collect();
    order.sort_by_key(|&at| {
        let (first, last) = ours[at].seqs();
        (!ours[at].whole(), std::cmp::Reverse(last - first), first)
    });
    let mut fates: Vec<Fate> = (0..ours.len()).map(|_| Fate::Kept).collect();
    let mut chosen: Vec<(u64, u64)> = Vec::new();
    for &at in &order {
        let seqs = ours[at].seqs();
        let overlaps = chosen
            .iter()
            .any(|&(first, last)| seqs.0 <= last && first <= seqs.1);
        fates[at] = if overlaps {
            let within = covered(&chosen, seqs);
            let lost = if within { 0 } else { ours[at].salvaged.meta.records };
            let reason = if within {
                "superseded: other segments hold every write of its range (a compaction's inputs or output)"
            } else {
                "its range overlaps segments holding more of the store; its other writes are lost"
            };
            Fate::Moved(reason.to_string(), lost)
        } else if !ours[at].whole() && covered_by_logs(seqs) {
            Fate::Moved(
                "damaged leaves; the logs still hold every write of its range, which serve instead".into(),
                0,
            )
        } else {
            chosen.push(seqs);
            if ours[at].whole() {
                Fate::Kept
            } else {
                Fate::Rewritten
            }
        };
    }
    chosen.sort_unstable();

    // 4. The logs' writes that no chosen segment holds: one segment per
    // run of consecutive sequence numbers between two chosen segments (a
    // number no file holds stays a hole, which the report counts).
    let mut gaps: Vec<Vec<&LogWrite>> = Vec::new();
    let mut last_gap = None;
    for write in writes.values() {
        let after = chosen.partition_point(|&(first, _)| first <= write.seq);
        if after > 0 && write.seq <= chosen[after - 1].1 {
            continue; // a chosen segment holds it
        }
        let continues = gaps
            .last()
            .and_then(|run| run.last())
            .is_some_and(|previous| previous.seq + 1 == write.seq);
        if last_gap == Some(after) && continues {
            gaps.last_mut().expect("a run").push(write);
        } else {
            gaps.push(vec![write]);
        }
        last_gap = Some(after);
    }
    interrupt.check()?;

    // 5. Write the new segments, the new log and the manifest.
    let cache = Cache::new(0);
    // Leaves as the store's segments cut them (the engine's default if
    // none reads back).
    let leaf_capacity = ours
        .first()
        .map_or(crate::Options::default().leaf_capacity, |found| {
            found.salvaged.meta.leaf_records as usize
        });
    let mut rewritten_as: Vec<Option<String>> = (0..ours.len()).map(|_| None).collect();
    let mut next_id = highest_id + 1;
    let mut listed: Vec<Listed> = Vec::new();
    let mut report = RepairReport {
        changed: true,
        rebuilt: true,
        ..RepairReport::default()
    };
    for (at, (found, fate)) in ours.iter().zip(&fates).enumerate() {
        match fate {
            Fate::Kept => listed.push(Listed::of(&found.salvaged.meta)),
            Fate::Rewritten => {
                let meta = &found.salvaged.meta;
                let path = dir.join(segment::file_name(next_id));
                segment::write(
                    fs,
                    &path,
                    next_id,
                    store_id,
                    (meta.first_seq, meta.last_seq),
                    &found.salvaged.records,
                    &meta.shadows,
                    meta.leaf_records as usize,
                )?;
                let written = Segment::open(fs, &path, cache.clone())?;
                listed.push(Listed::of(&written.meta));
                report.written.push(segment::file_name(next_id));
                rewritten_as[at] = Some(segment::file_name(next_id));
                next_id += 1;
            }
            Fate::Moved(..) => {}
        }
    }
    for group in &gaps {
        let (records, shadows) = resolve(group);
        let seqs = (group[0].seq, group[group.len() - 1].seq);
        let path = dir.join(segment::file_name(next_id));
        segment::write(
            fs,
            &path,
            next_id,
            store_id,
            seqs,
            &records,
            &shadows,
            leaf_capacity,
        )?;
        let written = Segment::open(fs, &path, cache.clone())?;
        listed.push(Listed::of(&written.meta));
        report.written.push(segment::file_name(next_id));
        report.log_writes += group.len() as u64;
        next_id += 1;
    }
    listed.sort_by_key(|segment| segment.first_seq);
    let seen_end = listed
        .last()
        .map(|segment| segment.last_seq + 1)
        .into_iter()
        .chain(writes.keys().last().map(|seq| seq + 1))
        .chain(log_starts.iter().copied())
        .max()
        .unwrap_or(0);
    // Writes the old manifest knew of and no file holds now still count
    // as written: their numbers are not given out again.
    let known_end = hint.as_ref().map_or(0, |manifest| {
        let closed = (manifest.closed_at != manifest::NOT_CLOSED).then_some(manifest.closed_at);
        manifest
            .logs
            .iter()
            .map(|log| log.first_seq)
            .chain(closed)
            .chain([manifest.next_seq])
            .max()
            .unwrap_or(0)
    });
    let next_seq = seen_end.max(known_end);
    let log_number = highest_log + 1;
    let manifest = Manifest {
        store_id,
        next_segment_id: next_id,
        next_log_number: log_number + 1,
        next_seq,
        closed_at: next_seq,
        logs: vec![LiveLog {
            number: log_number,
            first_seq: next_seq,
        }],
        segments: listed.clone(),
    };
    // The new log: empty, so the store opens as after a clean close.
    drop(wal::Wal::create(
        fs,
        dir,
        wal::Header {
            store_id,
            number: log_number,
            first_seq: next_seq,
            padded: true,
        },
    )?);
    fs.sync_dir(dir)?;
    let mut lost = Lost::new(fs, dir);
    if names.iter().any(|name| name == manifest::FILE_NAME) {
        let path = dir.join(manifest::FILE_NAME);
        let file = fs.open_read(&path)?;
        let len = file.len()? as usize;
        let mut bytes = Vec::with_capacity(len);
        file.read_exact_append(&mut bytes, len, 0)?;
        let moved_to = lost.copy(manifest::FILE_NAME, &bytes)?;
        report.lost.push(LostFile {
            file: manifest::FILE_NAME.to_string(),
            moved_to: Some(moved_to),
            reason: match &hint {
                Some(_) => "replaced by one rebuilt from the files, which it did not match".to_string(),
                None => "replaced by one rebuilt from the files: it could not be read".to_string(),
            },
            damaged: Vec::new(),
            records_lost: 0,
        });
    }
    // (Writing the manifest goes through this name.)
    if names.iter().any(|name| name == manifest::TEMPORARY_NAME) {
        report.lost.push(lost.moved(
            manifest::TEMPORARY_NAME,
            "a manifest never put in place".to_string(),
            Vec::new(),
            0,
        )?);
    }
    lost.sync()?;
    manifest.write(fs, dir)?;

    // Every file the new manifest does not use goes into lost/.
    let holes = holes(&listed, next_seq);
    let holes_within = |first: u64, last: u64| -> u64 {
        holes
            .iter()
            .map(|&(a, b)| b.min(last).saturating_sub(a.max(first)) + u64::from(a.max(first) <= b.min(last)))
            .sum()
    };
    for (at, (found, fate)) in ours.iter().zip(&fates).enumerate() {
        let (reason, lost_records, damaged) = match fate {
            Fate::Kept => continue,
            Fate::Rewritten => {
                let meta = &found.salvaged.meta;
                let bad: u64 = found
                    .salvaged
                    .bad_leaves
                    .iter()
                    .map(|&leaf| meta.leaves[leaf].aggregate.count)
                    .sum();
                report.records_lost += bad;
                let damaged = found
                    .salvaged
                    .bad_leaves
                    .iter()
                    .map(|&leaf| ByteRange {
                        offset: meta.leaves[leaf].offset,
                        len: meta.leaves[leaf].len as u64,
                    })
                    .collect();
                (
                    format!(
                        "{} of its {} leaves cannot be read; the others are in {}",
                        found.salvaged.bad_leaves.len(),
                        meta.leaves.len(),
                        rewritten_as[at].as_deref().unwrap_or_default()
                    ),
                    bad,
                    damaged,
                )
            }
            // Its lost writes are holes, counted below.
            Fate::Moved(reason, lost_records) => (reason.clone(), *lost_records, Vec::new()),
        };
        report
            .lost
            .push(lost.moved(&found.name, reason, damaged, lost_records)?);
    }
    for (name, reason, damaged) in unusable {
        // What the old manifest said the segment held, less what other
        // files still hold.
        let id = survey::segment_number(&name);
        let lost_records = hint
            .as_ref()
            .and_then(|manifest| manifest.segments.iter().find(|segment| Some(segment.id) == id))
            .map_or(0, |segment| holes_within(segment.first_seq, segment.last_seq));
        report
            .lost
            .push(lost.moved(&name, reason, damaged, lost_records)?);
    }
    for FoundLog {
        name,
        damaged,
        refused,
        range,
    } in logs
    {
        let lost_records = range.map_or(0, |(first, last)| holes_within(first, last));
        let reason = match refused {
            Some(reason) => reason,
            None if damaged.is_empty() => "it holds no write the store's segments do not".to_string(),
            None => "damaged frames; every frame that reads back is in the store's segments".to_string(),
        };
        report
            .lost
            .push(lost.moved(&name, reason, damaged, lost_records)?);
    }
    // Files the old manifest lists that are gone.
    if let Some(manifest) = &hint {
        let listed_segments = manifest.segments.iter().map(|segment| {
            (
                segment::file_name(segment.id),
                (segment.first_seq, segment.last_seq),
            )
        });
        let listed_logs = manifest.logs.iter().enumerate().map(|(at, log)| {
            let end = manifest.logs.get(at + 1).map_or(
                if manifest.closed_at == manifest::NOT_CLOSED {
                    log.first_seq
                } else {
                    manifest.closed_at
                },
                |next| next.first_seq,
            );
            (
                wal::file_name(log.number),
                (log.first_seq, end.max(log.first_seq + 1) - 1),
            )
        });
        for (name, (first, last)) in listed_segments.chain(listed_logs) {
            if !names.contains(&name) {
                report.lost.push(LostFile {
                    file: name,
                    moved_to: None,
                    reason: "the manifest lists it, but it is missing".to_string(),
                    damaged: Vec::new(),
                    records_lost: holes_within(first, last),
                });
            }
        }
    }
    lost.sync()?;
    report.records_lost += holes.iter().map(|&(a, b)| b - a + 1).sum::<u64>();
    report.segments = listed.len() as u64;
    report.records = listed.iter().map(|segment| segment.records).sum();
    Ok(report)
}

/// Whether every sequence number of `seqs` lies in one of `chosen`
/// (sorted or not).
fn covered(chosen: &[(u64, u64)], seqs: (u64, u64)) -> bool {
    let mut ranges = chosen.to_vec();
    ranges.sort_unstable();
    let mut from = seqs.0;
    for (first, last) in ranges {
        if last < from {
            continue;
        }
        if first > from {
            return false;
        }
        from = last + 1;
        if from > seqs.1 {
            return true;
        }
    }
    false
}

/// The sequence numbers below `next_seq` that no listed segment holds, as
/// inclusive ranges.
fn holes(listed: &[Listed], next_seq: u64) -> Vec<(u64, u64)> {
    let mut holes = Vec::new();
    let mut from = 0;
    for segment in listed {
        if segment.first_seq > from {
            holes.push((from, segment.first_seq - 1));
        }
        from = from.max(segment.last_seq + 1);
    }
    if next_seq > from {
        holes.push((from, next_seq - 1));
    }
    holes
}

/// The store id most of the readable files carry (a store without a
/// readable manifest); a new one if none does.
fn most_common_store_id(fs: &dyn Fs, dir: &Path, names: &[String], segments: &[FoundSegment]) -> Result<u64> {
    let mut counts: HashMap<u64, u64> = HashMap::new();
    for found in segments {
        *counts.entry(found.salvaged.meta.store_id).or_default() += 1;
    }
    for name in names {
        let Some(number) = wal::parse_name(name) else {
            continue;
        };
        if let Ok(salvaged) = wal::salvage(fs, &dir.join(name), number, 0, |_, _| {}) {
            if let Some(header) = salvaged.header {
                *counts.entry(header.store_id).or_default() += 1;
            }
        }
    }
    Ok(counts
        .into_iter()
        .max_by_key(|&(store_id, count)| (count, store_id))
        .map_or_else(crate::open::new_store_id, |(store_id, _)| store_id))
}

/// The records and shadows of `writes` (sorted by sequence number),
/// resolved newest-wins as a flush resolves a buffer.
fn resolve(writes: &[&LogWrite]) -> (Records, Vec<Shadow>) {
    let mut order: Vec<&LogWrite> = writes.to_vec();
    order.sort_by_key(|write| (write.key, write.time, write.seq));
    let mut records = Records::default();
    let mut shadows = Vec::new();
    let mut start = 0;
    while start < order.len() {
        let (key, time) = (order[start].key, order[start].time);
        let end = start
            + order[start..]
                .iter()
                .take_while(|write| (write.key, write.time) == (key, time))
                .count();
        let group = &order[start..end];
        let newest_shadow = group.iter().rposition(|write| write.op.shadows());
        if let Some(at) = newest_shadow {
            shadows.push(Shadow {
                key,
                time,
                seq: group[at].seq,
            });
        }
        for write in &group[newest_shadow.unwrap_or(0)..] {
            if write.op != Op::Delete {
                records.push(write.key, write.time, write.seq, &write.value);
            }
        }
        start = end;
    }
    (records, shadows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holes_are_the_numbers_no_segment_holds() {
        let segment = |first_seq, last_seq| Listed {
            id: 1,
            first_seq,
            last_seq,
            records: 0,
            bytes: 0,
            extent: None,
        };
        assert_eq!(holes(&[segment(0, 9), segment(20, 29)], 35), [(10, 19), (30, 34)]);
        assert_eq!(holes(&[segment(5, 9)], 10), [(0, 4)]);
        assert!(holes(&[segment(0, 9)], 10).is_empty());
        assert!(covered(&[(10, 19), (0, 9)], (3, 15)));
        assert!(!covered(&[(0, 9), (11, 19)], (3, 15)));
    }

    #[test]
    fn log_writes_resolve_newest_wins() {
        let write = |seq, op, key| LogWrite {
            seq,
            op,
            key,
            time: 1,
            value: vec![seq as u8],
        };
        let writes = [
            write(0, Op::Append, 5),
            write(1, Op::Append, 5),
            write(2, Op::Update, 5),
            write(3, Op::Append, 5),
            write(4, Op::Append, 6),
            write(5, Op::Delete, 6),
        ];
        let (records, shadows) = resolve(&writes.iter().collect::<Vec<_>>());
        assert_eq!(records.seqs, [2, 3]);
        assert_eq!(
            shadows,
            [
                Shadow {
                    key: 5,
                    time: 1,
                    seq: 2
                },
                Shadow {
                    key: 6,
                    time: 1,
                    seq: 5
                }
            ]
        );
    }
}
