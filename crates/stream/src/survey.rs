//! Recovery's checks: what the files of a store prove, before anything is
//! deleted. `open`, a read-only open and `verify` run exactly these.
//!
//! 1. Every segment the manifest lists opens (footer and index checked)
//!    and is the one listed: same id, store id, sequence range, records,
//!    length and key and time ranges.
//! 2. Every live log exists, starts with a header naming this store, its
//!    own number and the first sequence number the manifest gives it,
//!    and replays as a chain: each log's writes continue the last, from
//!    the manifest's `next_seq`; a log that is not the newest ends exactly
//!    where the next one starts; the newest ends where a clean close said
//!    it would. A log may end in a torn write only where a crash can make
//!    one: the newest log, after zeros were made durable for it (padded).
//! 3. Every other file named as a segment or a log is accounted for: it is
//!    *redundant* when durable metadata proves it obsolete (a segment or
//!    log whose writes all lie within listed segments or replayed logs, a
//!    log with no write at all, one numbered at or past the manifest's
//!    counters, so never listed, that cannot be read: an output or a log
//!    a crash cut short, `MANIFEST.tmp`), *unaccounted* when it cannot be
//!    read otherwise or belongs to another store (kept and reported), and
//!    a corruption of the manifest when it holds writes no listed file
//!    holds (the manifest is damaged or an older copy).
//!
//! Segment failures are returned one by one (a read-only open keeps going
//! without the damaged segment); the others fail the survey.

use std::path::Path;
use std::sync::Arc;

use spillway_core::log::Tail;
use spillway_core::{Error, ErrorKind, Fs, Interrupt, Result};

use crate::batch::Batch;
use crate::cache::Cache;
use crate::manifest::{self, Listed, Manifest, NOT_CLOSED};
use crate::segment::{self, Segment};
use crate::wal;

/// A file in a store's directory that is not part of the store and that
/// nothing proves obsolete: kept where it is, and reported.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Unaccounted {
    /// Its name in the store's directory.
    pub file: String,
    /// Why it is not part of the store.
    pub reason: String,
}

/// What a survey found.
#[derive(Debug)]
pub(crate) struct Survey {
    /// Per listed segment, in the manifest's order: the open segment, or
    /// why it could not be used.
    pub segments: Vec<Result<Arc<Segment>>>,
    /// The sequence number after the last write of the live logs (the
    /// manifest's `next_seq` when there are none).
    pub logs_end: u64,
    /// Writes the live logs hold.
    pub log_writes: u64,
    /// Live logs read.
    pub logs: u64,
    /// Files durable metadata proves obsolete: an open for writing
    /// deletes them.
    pub redundant: Vec<String>,
    /// Files kept and reported.
    pub unaccounted: Vec<Unaccounted>,
    /// Above every segment id found in the directory, and the manifest's.
    pub next_segment_id: u64,
    /// Above every log number found in the directory, and the manifest's.
    pub next_log_number: u64,
}

/// Whether the directory entry `name` is one a store writes: a segment
/// or a log (by its number), or the manifest or its temporary copy.
pub(crate) fn is_store_file(name: &str) -> bool {
    segment_number(name).is_some()
        || wal::parse_name(name).is_some()
        || name == manifest::FILE_NAME
        || name == manifest::TEMPORARY_NAME
}

/// The id a segment file name stands for.
pub(crate) fn segment_number(name: &str) -> Option<u64> {
    name.strip_suffix(".seg")?.parse().ok()
}

/// The error for a file the manifest lists that is not there.
fn missing(dir: &Path, name: &str, what: &str) -> Error {
    Error::corruption(
        dir.join(name),
        0,
        format!(
            "{} lists this {what}, but it is missing (deleted, or {} is an older copy); \
             `spillway stream repair` salvages what the other files hold",
            manifest::FILE_NAME,
            manifest::FILE_NAME
        ),
    )
}

/// Checks the store in `dir` against `manifest` (steps in the module
/// docs), calling `visit` with every batch the live logs hold, in order.
/// Segments are opened with `cache`.
pub(crate) fn survey(
    fs: &dyn Fs,
    dir: &Path,
    manifest: &Manifest,
    cache: &Arc<Cache>,
    interrupt: &Interrupt,
    mut visit: impl FnMut(&Batch, u64) -> Result<()>,
) -> Result<Survey> {
    let names = fs.list_dir(dir)?;
    let present = |name: &str| names.iter().any(|found| found == name);

    // 1. The listed segments.
    let mut segments = Vec::with_capacity(manifest.segments.len());
    for listed in &manifest.segments {
        interrupt.check()?;
        let name = segment::file_name(listed.id);
        let opened = if present(&name) {
            Segment::open(fs, &dir.join(&name), cache.clone())
                .and_then(|segment| matches_listing(manifest, listed, &segment).map(|()| segment))
        } else {
            Err(missing(dir, &name, "segment"))
        };
        segments.push(opened);
    }

    // 2. The live logs, as a chain.
    let mut logs_end = manifest.next_seq;
    let mut log_writes = 0;
    for (at, live) in manifest.logs.iter().enumerate() {
        interrupt.check()?;
        let name = wal::file_name(live.number);
        let path = dir.join(&name);
        if !present(&name) {
            return Err(missing(dir, &name, "log"));
        }
        let replayed = wal::replay(fs, &path, live.number, &mut visit).map_err(point_to_repair)?;
        let corrupt = |offset: u64, what: String| {
            Error::corruption(
                &path,
                offset,
                format!("{what}; `spillway stream repair` salvages every frame that reads back"),
            )
        };
        let Some(header) = replayed.header else {
            return Err(corrupt(
                0,
                "the log has no header: it was cut short or overwritten".to_string(),
            ));
        };
        if header.store_id != manifest.store_id {
            return Err(corrupt(
                0,
                format!(
                    "the log belongs to another store (store id {:#x}, this store is {:#x})",
                    header.store_id, manifest.store_id
                ),
            ));
        }
        if header.first_seq != live.first_seq {
            return Err(corrupt(
                0,
                format!(
                    "the log starts at seq {}, {} says {}",
                    header.first_seq,
                    manifest::FILE_NAME,
                    live.first_seq
                ),
            ));
        }
        let end_seq = replayed.end_seq.expect("a header");
        // A padded log ends in zeros, or (the newest, in a crash) in a
        // torn write; anything else is a cut file. An unpadded log can
        // end anywhere after a crash if it is the newest (its writes are
        // checked by sequence numbers alone); an older one was synced
        // whole before the next was listed, and ends at its last frame.
        let newest = at + 1 == manifest.logs.len();
        let cut = header.padded && !replayed.end.padded_crash_tail();
        let torn_before_the_newest = !newest
            && if header.padded {
                replayed.end.tail != Tail::Zeros
            } else {
                replayed.end.tail != Tail::Clean
            };
        if torn_before_the_newest && !cut {
            return Err(corrupt(
                replayed.end.end,
                format!(
                    "damaged bytes follow the log's last frame at offset {}, and only the newest log can \
                     end in a write a crash tore (this one was made durable whole before the next began)",
                    replayed.end.end
                ),
            ));
        }
        if cut {
            return Err(corrupt(
                replayed.end.end,
                format!(
                    "the log ends at or inside a frame at offset {} of {} bytes, where zeros always \
                     follow its frames: it was cut short",
                    replayed.end.end, replayed.end.len
                ),
            ));
        }
        if let Some(next) = manifest.logs.get(at + 1) {
            if end_seq != next.first_seq {
                return Err(corrupt(
                    replayed.end.end,
                    format!(
                        "the log ends at seq {end_seq}, but the next log ({}) starts at {}: writes \
                         {end_seq}..{} are missing (cut short, or an older copy)",
                        wal::file_name(next.number),
                        next.first_seq,
                        next.first_seq
                    ),
                ));
            }
        } else if manifest.closed_at != NOT_CLOSED && end_seq != manifest.closed_at {
            return Err(corrupt(
                replayed.end.end,
                format!(
                    "the store was closed cleanly with its writes up to seq {} in this log, but it ends at \
                     seq {end_seq} (cut short, or an older copy)",
                    manifest.closed_at
                ),
            ));
        }
        logs_end = end_seq;
        log_writes += replayed.writes;
    }

    // 3. Every other file.
    let covered =
        |first: u64, last: u64| covered(&manifest.segments, manifest.next_seq, logs_end, first, last);
    let mut redundant = Vec::new();
    let mut unaccounted = Vec::new();
    let mut next_segment_id = manifest.next_segment_id;
    let mut next_log_number = manifest.next_log_number;
    let store_id = manifest.store_id;
    for name in &names {
        interrupt.check()?;
        let path = dir.join(name);
        if name == manifest::TEMPORARY_NAME {
            redundant.push(name.clone());
        } else if let Some(id) = segment_number(name) {
            next_segment_id = next_segment_id.max(id + 1);
            if manifest.segments.iter().any(|listed| listed.id == id) {
                continue;
            }
            match Segment::open(fs, &path, Cache::new(0)) {
                // Never listed (the manifest counts every id it gave out),
                // so the output of a flush or compaction that a crash cut
                // short: its writes are where they were.
                Err(error) if error.kind() == ErrorKind::Corruption && id >= manifest.next_segment_id => {
                    redundant.push(name.clone())
                }
                Err(error) if error.kind() == ErrorKind::Corruption => unaccounted.push(Unaccounted {
                    file: name.clone(),
                    reason: format!("unlisted, and cannot be read: {error}"),
                }),
                Err(error) => return Err(error),
                Ok(segment) if segment.meta.store_id != store_id => unaccounted.push(Unaccounted {
                    file: name.clone(),
                    reason: format!(
                        "a segment of another store (store id {:#x}, this store is {store_id:#x})",
                        segment.meta.store_id
                    ),
                }),
                Ok(segment) if covered(segment.meta.first_seq, segment.meta.last_seq) => {
                    redundant.push(name.clone())
                }
                Ok(segment) => {
                    return Err(unlisted_writes(
                        dir,
                        name,
                        segment.meta.first_seq,
                        segment.meta.last_seq,
                    ))
                }
            }
        } else if let Some(number) = wal::parse_name(name) {
            next_log_number = next_log_number.max(number + 1);
            if manifest.live_log(number).is_some() {
                continue;
            }
            match wal::replay(fs, &path, number, |_, _| Ok(())) {
                // Never listed, so never written to: a log whose making a
                // crash cut short.
                Err(error) if error.kind() == ErrorKind::Corruption && number >= manifest.next_log_number => {
                    redundant.push(name.clone())
                }
                Err(error) if error.kind() == ErrorKind::Corruption => unaccounted.push(Unaccounted {
                    file: name.clone(),
                    reason: format!("unlisted, and cannot be read: {error}"),
                }),
                Err(error) => return Err(error),
                // No write at all: a log whose making a crash cut short.
                Ok(replayed) if replayed.writes == 0 => redundant.push(name.clone()),
                Ok(replayed) => {
                    let header = replayed.header.expect("writes follow a header");
                    let end_seq = replayed.end_seq.expect("a header");
                    if header.store_id != store_id {
                        unaccounted.push(Unaccounted {
                            file: name.clone(),
                            reason: format!(
                                "a log of another store (store id {:#x}, this store is {store_id:#x})",
                                header.store_id
                            ),
                        });
                    } else if covered(header.first_seq, end_seq - 1) {
                        redundant.push(name.clone());
                    } else {
                        return Err(unlisted_writes(dir, name, header.first_seq, end_seq - 1));
                    }
                }
            }
        }
    }
    Ok(Survey {
        segments,
        logs_end,
        log_writes,
        logs: manifest.logs.len() as u64,
        redundant,
        unaccounted,
        next_segment_id,
        next_log_number,
    })
}

/// Adds to a corruption error the way out.
fn point_to_repair(error: Error) -> Error {
    match error {
        Error::Corruption { file, offset, what } => Error::Corruption {
            file,
            offset,
            what: format!("{what}; `spillway stream repair` salvages every frame that reads back"),
        },
        other => other,
    }
}

/// The error for an unlisted file that holds writes no listed file holds.
fn unlisted_writes(dir: &Path, name: &str, first: u64, last: u64) -> Error {
    Error::corruption(
        dir.join(manifest::FILE_NAME),
        0,
        format!(
            "the manifest does not list {name}, which holds writes {first}..={last} that no listed file \
             holds: {} is damaged or an older copy; `spillway stream repair` rebuilds it from the files",
            manifest::FILE_NAME
        ),
    )
}

/// Whether every write numbered `first..=last` lies in a listed segment
/// or in the live logs (`next_seq..logs_end`).
fn covered(segments: &[Listed], next_seq: u64, logs_end: u64, first: u64, last: u64) -> bool {
    let mut from = first;
    // Segments are in sequence order, disjoint.
    for listed in segments {
        if listed.last_seq < from {
            continue;
        }
        if listed.first_seq > from {
            break;
        }
        from = listed.last_seq + 1;
        if from > last {
            return true;
        }
    }
    from >= next_seq && last < logs_end
}

/// Fails unless `segment` is the one `listed` describes.
fn matches_listing(manifest: &Manifest, listed: &Listed, segment: &Segment) -> Result<()> {
    let meta = &segment.meta;
    let found = Listed::of(meta);
    if meta.store_id != manifest.store_id {
        return Err(Error::corruption(
            segment.path(),
            meta.bytes.saturating_sub(segment::FOOTER_BYTES as u64),
            format!(
                "a segment of another store (store id {:#x}, this store is {:#x}); \
                 `spillway stream repair` salvages the rest",
                meta.store_id, manifest.store_id
            ),
        ));
    }
    if found != *listed {
        return Err(Error::corruption(
            segment.path(),
            meta.bytes.saturating_sub(segment::FOOTER_BYTES as u64),
            format!(
                "the segment is {found:?}, {} lists {listed:?} (an older copy, or a damaged \
                 footer); `spillway stream repair` salvages the rest",
                manifest::FILE_NAME
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listed(first_seq: u64, last_seq: u64) -> Listed {
        Listed {
            id: first_seq + 1,
            first_seq,
            last_seq,
            records: 0,
            bytes: 0,
            extent: None,
        }
    }

    #[test]
    fn coverage_spans_adjacent_segments_and_the_live_logs() {
        let segments = [listed(0, 9), listed(10, 19), listed(25, 29)];
        let covered = |first, last| covered(&segments, 30, 40, first, last);
        assert!(covered(0, 19));
        assert!(covered(3, 12));
        assert!(!covered(15, 22), "20..25 are in no listed file");
        assert!(covered(25, 39), "a segment, then the logs");
        assert!(covered(31, 35));
        assert!(!covered(35, 40), "40 is past the logs' end");
        assert!(!covered(18, 26));
    }
}
