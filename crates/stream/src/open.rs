//! Opening a stream index: the manifest read (or a new store's written),
//! every listed file checked and every other one accounted for (the
//! survey), the live logs replayed, then, for writing, the redundant
//! files removed, the logs' writes made a segment, a new log started and
//! the flusher and tiering threads started.

use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Condvar, Mutex, OnceLock, RwLock};
use std::thread::JoinHandle;

use spillway_core::sync;
use spillway_core::{Error, ErrorKind, Fs, Interrupt, Poison, Result};

use crate::buffer::Buffer;
use crate::cache::Cache;
use crate::manifest::{self, Listed, LiveLog, Manifest, NOT_CLOSED};
use crate::options::Options;
use crate::segment::{self, Segment, SegmentMeta};
use crate::shared::{write_segment, Durable, Shared, View};
use crate::stats::Counters;
use crate::survey;
use crate::survey::Unaccounted;
use crate::template::OverflowStats;
use crate::wal::{self, Wal};

/// What an open makes of a store's directory; `index.rs` makes the
/// [`StreamIndex`](crate::StreamIndex) of it.
pub(crate) struct Opened {
    pub(crate) shared: Arc<Shared>,
    /// The buffer that takes the next writes.
    pub(crate) active: Arc<Buffer>,
    /// The flusher thread (`None` when read-only).
    pub(crate) flusher: Option<JoinHandle<()>>,
    /// The latest time written, in the segments and the logs.
    pub(crate) last_time: u64,
    /// Files that are not part of the store, kept.
    pub(crate) unaccounted: Vec<Unaccounted>,
}

pub(crate) fn open(fs: Arc<dyn Fs>, dir: &Path, options: Options, read_only: bool) -> Result<Opened> {
    options.check()?;
    if !read_only {
        fs.create_dir_all(dir)?;
    }
    let manifest = match Manifest::read(fs.as_ref(), dir)? {
        Some(manifest) => manifest,
        None => create_manifest(fs.as_ref(), dir, read_only)?,
    };
    let cache = Cache::new(options.cache_bytes);
    // The live logs' writes, replayed into a buffer of no log while
    // the survey checks them.
    let replayed = Buffer::new(&options, manifest.next_seq, None, None);
    let mut templates = 0;
    let mut last_time = 0;
    let survey = survey::survey(
        fs.as_ref(),
        dir,
        &manifest,
        &cache,
        &Interrupt::new(),
        |batch, first_seq| {
            templates += u64::from(replayed.insert_replayed(batch, first_seq, &options)?);
            last_time = batch
                .times
                .iter()
                .fold(last_time, |latest, &time| latest.max(time));
            Ok(())
        },
    )?;
    let mut segments = Vec::with_capacity(manifest.segments.len() + 1);
    let mut damaged_segments = 0;
    for (listed, opened) in manifest.segments.iter().zip(survey.segments) {
        let segment = match opened {
            Ok(segment) => segment,
            Err(error) if read_only && error.kind() == ErrorKind::Corruption => {
                damaged_segments += 1;
                let meta = SegmentMeta {
                    id: listed.id,
                    store_id: manifest.store_id,
                    first_seq: listed.first_seq,
                    last_seq: listed.last_seq,
                    records: listed.records,
                    leaf_records: 1,
                    leaves: Vec::new(),
                    shadows: Vec::new(),
                    bytes: listed.bytes,
                };
                let path = dir.join(segment::file_name(listed.id));
                Segment::damaged(meta, listed.extent, &path, &error, cache.clone())
            }
            Err(error) => return Err(read_only_hint(error)),
        };
        if let Some(extent) = listed.extent {
            last_time = last_time.max(extent.time_max);
        }
        segments.push(segment);
    }
    let mut manifest = manifest;
    let active = if read_only {
        Arc::new(replayed)
    } else {
        // Every listed file is checked: only now is anything deleted,
        // and only what the manifest proves obsolete.
        for name in &survey.redundant {
            fs.remove_file(&dir.join(name))?;
        }
        manifest.next_segment_id = survey.next_segment_id;
        manifest.next_log_number = survey.next_log_number;
        // The logs' writes become a segment, so that the old logs can go.
        let count = sync::lock(&replayed.data).len() as u64;
        if count > 0 {
            let (records, shadows) = replayed.drain();
            let id = manifest.next_segment_id;
            let seqs = (replayed.first_seq, replayed.first_seq + count - 1);
            let segment = write_segment(
                fs.as_ref(),
                dir,
                &cache,
                options.leaf_capacity,
                (id, manifest.store_id),
                seqs,
                &records,
                &shadows,
            )?;
            segment.adopt(Arc::new(records));
            manifest.next_segment_id = id + 1;
            manifest.next_seq = seqs.1 + 1;
            manifest.segments.push(Listed::of(&segment.meta));
            segments.push(segment);
        }
        debug_assert_eq!(manifest.next_seq, survey.logs_end);
        let header = wal::Header {
            store_id: manifest.store_id,
            number: manifest.next_log_number,
            first_seq: manifest.next_seq,
            padded: options.sync,
        };
        let wal = Wal::create(fs.as_ref(), dir, header)?;
        let active = Buffer::new(&options, manifest.next_seq, Some(wal), None);
        let old_logs = std::mem::replace(
            &mut manifest.logs,
            vec![LiveLog {
                number: header.number,
                first_seq: header.first_seq,
            }],
        );
        manifest.next_log_number += 1;
        manifest.closed_at = NOT_CLOSED;
        manifest.write(fs.as_ref(), dir)?;
        for old in old_logs {
            fs.remove_file(&dir.join(wal::file_name(old.number)))?;
        }
        Arc::new(active)
    };
    let counters = Counters::default();
    counters.templates.store(templates, Ordering::Relaxed);
    counters.writes.store(survey.log_writes, Ordering::Relaxed);
    let shared = Arc::new(Shared {
        fs,
        dir: dir.to_path_buf(),
        cache,
        view: Arc::new(RwLock::new(View {
            segments,
            tiers: Vec::new(),
            frozen: None,
            active: active.clone(),
        })),
        durable: Mutex::new(Durable {
            manifest,
            last_overflow: OverflowStats::default(),
            total_overflow: OverflowStats::default(),
            stop: false,
        }),
        frozen_changed: Condvar::new(),
        poison: Poison::default(),
        counters,
        tiering: OnceLock::new(),
        damaged_segments,
        spare: Mutex::new(None),
        spare_failed: std::sync::atomic::AtomicBool::new(false),
        options,
    });
    let flusher = if read_only {
        None
    } else {
        let shared = shared.clone();
        let thread = std::thread::Builder::new()
            .name("spillway-flush".into())
            .spawn(move || shared.run_flusher())
            .map_err(|error| Error::io("starting the flusher thread", error))?;
        Some(thread)
    };
    Ok(Opened {
        shared,
        active,
        flusher,
        last_time,
        unaccounted: survey.unaccounted,
    })
}

/// The manifest of a directory that has none: a new store's, written
/// (the directory must hold no segment or log: their list is gone),
/// or, read-only, an error.
fn create_manifest(fs: &dyn Fs, dir: &Path, read_only: bool) -> Result<Manifest> {
    let names = if fs.is_dir(dir)? {
        fs.list_dir(dir)?
    } else {
        Vec::new()
    };
    let files: Vec<&String> = names
        .iter()
        .filter(|name| survey::segment_number(name).is_some() || wal::parse_name(name).is_some())
        .collect();
    if let Some(first) = files.first() {
        return Err(Error::corruption(
            dir.join(manifest::FILE_NAME),
            0,
            format!(
                "missing, but the directory holds {} segment and log files ({first}, ...): the list \
                 of the store's files is gone; `spillway stream repair` rebuilds it from the files",
                files.len()
            ),
        ));
    }
    if read_only {
        return Err(Error::InvalidArgument(format!(
            "{} holds no stream index (no {} file)",
            dir.display(),
            manifest::FILE_NAME
        )));
    }
    let manifest = Manifest::new(new_store_id());
    manifest.write(fs, dir)?;
    Ok(manifest)
}

/// A random id for a new store (the hasher's keys come from the
/// operating system's random source; the clock and the process id are
/// mixed in as well).
pub(crate) fn new_store_id() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| since.as_nanos());
    hasher.write_u128(now);
    hasher.write_u32(std::process::id());
    hasher.finish()
}

/// Adds to a corruption error met by an open for writing where to go
/// from there.
fn read_only_hint(error: Error) -> Error {
    match error {
        Error::Corruption { file, offset, what } => Error::Corruption {
            file,
            offset,
            what: format!(
                "{what}; the store can still be opened read-only, for the queries the damage does not \
                 touch, and `spillway stream repair` salvages the rest"
            ),
        },
        other => other,
    }
}
