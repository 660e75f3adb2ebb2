//! Recovery: the checks that a store's files account for every write,
//! made before anything is deleted. `open` (for writing or reading) and
//! `verify` run the same checks and report the same errors.
//!
//! # Algorithm
//!
//! 1. Read CURRENT and the manifest it names. Its end must be what a
//!    crash leaves of a padded log (zeros, or a torn edit with zeros
//!    after it); a manifest that ends at or inside a frame was cut short
//!    or replaced. A newer manifest that holds more than a snapshot means
//!    CURRENT is older than the store.
//! 2. Open every list file the tree names (footer, filter, index, sketch)
//!    and check its store identity. A read-only open puts a damaged
//!    stand-in in place of a file that is missing or unreadable, and reads
//!    that need it fail (list/); an open for writing fails.
//! 3. Follow the log chain from the manifest's log number: each log's
//!    header (store, number, the log before it, its first write), its
//!    batches in sequence, its trailer (its successor, its end); the next
//!    log is the one its trailer names, or, for a log a crash or a clean
//!    close left without a successor in its trailer, the one whose header
//!    names it. Writes must follow each other from log to log. Only the
//!    end of a log without a trailer may be torn, and a padded one only
//!    as a crash leaves it. The manifest's newest log must be on the
//!    chain, and after a clean close end where the close recorded.
//! 4. Account for every other file: list files the tree does not name,
//!    logs below the log number, older manifests, `CURRENT.tmp` and
//!    `SPARE.log` are redundant (with the checks passed, the tree and the
//!    chain hold every write). A list or log of another store, a log off
//!    the chain, a name that looks like a store file but is none of
//!    these: reported and kept.
//!
//! The caller deletes the redundant files, and only when it opens the
//! store for writing.

use std::collections::{BTreeSet, HashMap};
use std::path::Path;
use std::sync::Arc;

use spillway_core::{Error, Fs, Result};

use crate::list::{self, FileNumber, ListFile, FOOTER_BYTES};
use crate::manifest::{self, Recovered};
use crate::root::RootBuffer;
use crate::wal::{self, LogHeader};

/// Points every error that recovery reports at the tool that can fix it.
const REPAIR_HINT: &str = "run `spillway kv repair` to rebuild the store from what its files hold";

/// What the checks found: the store's state, and what to do with the
/// files the store does not need.
#[derive(Debug)]
pub(crate) struct Checked {
    /// The tree and counters of the manifest.
    pub recovered: Recovered,
    /// The writes of the logs on the chain (if replayed).
    pub root: RootBuffer,
    /// The sequence number after the last write of the chain.
    pub next_seq: u64,
    /// The chain, oldest first.
    pub chain: Vec<u64>,
    /// Files the tree and the chain make redundant: deleted by an open
    /// for writing.
    pub removable: Vec<String>,
    /// Files that cannot be accounted for, with why: reported and kept.
    pub unaccounted: Vec<String>,
}

/// Whether `name` looks like a file a store writes: a name recovery must
/// account for.
pub(crate) fn looks_like_store_file(name: &str) -> bool {
    name.ends_with(".list")
        || name.ends_with(".log")
        || name.starts_with("MANIFEST")
        || name.starts_with("CURRENT")
        || name.ends_with(".salvage")
}

/// Adds the hint to run repair to a corruption error.
pub(crate) fn with_hint(error: Error) -> Error {
    match error {
        Error::Corruption { file, offset, what } if !what.contains("spillway kv repair") => {
            Error::Corruption {
                file,
                offset,
                what: format!("{what}; {REPAIR_HINT}"),
            }
        }
        other => other,
    }
}

/// Runs the checks on the store in `dir`; `None` if it holds no CURRENT.
/// `read_only` lets missing or unreadable list files through as damaged
/// stand-ins; `replay` replays the chain's writes into a root buffer.
pub(crate) fn check(fs: &dyn Fs, dir: &Path, read_only: bool, replay: bool) -> Result<Option<Checked>> {
    check_inner(fs, dir, read_only, replay).map_err(with_hint)
}

fn check_inner(fs: &dyn Fs, dir: &Path, read_only: bool, replay: bool) -> Result<Option<Checked>> {
    let Some(current) = manifest::current(fs, dir)? else {
        return Ok(None);
    };
    let names = fs.list_dir(dir)?;
    let named_by = manifest::file_name(current);
    let recovered = manifest::recover(fs, dir, |number, store_id| {
        open_named_list(fs, dir, number, store_id, &named_by).or_else(|error| {
            if read_only && matches!(error, Error::Corruption { .. }) {
                Ok(ListFile::damaged(dir, number, &error))
            } else {
                Err(error)
            }
        })
    })?;
    let Some(recovered) = recovered else {
        return Ok(None);
    };
    let store_id = recovered.store_id;
    let counters = recovered.counters;
    let mut removable = Vec::new();
    let mut unaccounted = Vec::new();

    // Manifests.
    for name in &names {
        let Some(number) = manifest::parse_name(name) else {
            continue;
        };
        if number < recovered.manifest_number {
            removable.push(name.clone());
        } else if number > recovered.manifest_number {
            let bytes = read_whole(fs, &dir.join(name))?;
            match manifest::snapshot_head(number, &bytes) {
                Some((id, _, 1)) if id == store_id => removable.push(name.clone()),
                Some((id, _, _)) if id != store_id => {
                    unaccounted.push(format!("{name}: a manifest of another store ({id:016x})"));
                }
                _ => {
                    return Err(Error::corruption(
                        dir.join(manifest::CURRENT),
                        0,
                        format!(
                            "names {}, but the newer {name} holds edits: CURRENT is older than the store",
                            manifest::file_name(recovered.manifest_number)
                        ),
                    ))
                }
            }
        }
    }

    // The log chain.
    let logs: BTreeSet<u64> = names.iter().filter_map(|name| wal::parse_name(name)).collect();
    let mut headers: HashMap<u64, Option<LogHeader>> = HashMap::new();
    let mut header_of = |number: u64| -> Result<Option<LogHeader>> {
        if let Some(header) = headers.get(&number) {
            return Ok(header.clone());
        }
        let header = wal::read_header(fs, dir, number)?;
        headers.insert(number, header.clone());
        Ok(header)
    };
    let manifest_name = manifest::file_name(recovered.manifest_number);
    let mut root = RootBuffer::new();
    let mut chain: Vec<u64> = Vec::new();
    let mut trailers = HashMap::new();
    let mut number = counters.log_number;
    let mut expected_seq = counters.log_seq;
    let mut named_by = format!("{manifest_name} (its log number)");
    loop {
        let path = dir.join(wal::file_name(number));
        if !logs.contains(&number) {
            return Err(Error::corruption(
                &path,
                0,
                format!("missing: {named_by} names it, and it holds writes the tree lacks"),
            ));
        }
        let contents = wal::read(fs, dir, number, |batch, _| {
            if replay {
                root.insert_batch(&batch);
            }
            Ok(())
        })?;
        let Some(contents) = contents else {
            return Err(Error::corruption(
                &path,
                0,
                format!("holds no log header, but {named_by} names it"),
            ));
        };
        let header = &contents.header;
        if header.store_id != store_id {
            return Err(Error::corruption(
                &path,
                0,
                format!(
                    "a log of another store ({:016x}; this store is {store_id:016x}), but {named_by} names it",
                    header.store_id
                ),
            ));
        }
        if let Some(&previous) = chain.last() {
            if header.previous != previous {
                return Err(Error::corruption(
                    &path,
                    0,
                    format!(
                        "its header names log {} before it, but {named_by} names it",
                        header.previous
                    ),
                ));
            }
        }
        if header.first_seq != expected_seq {
            let before = match chain.last() {
                Some(&previous) => format!(
                    "log {} before it ends at write {expected_seq}",
                    wal::file_name(previous)
                ),
                None => format!("{manifest_name} says the writes the tree lacks start at {expected_seq}"),
            };
            return Err(Error::corruption(
                &path,
                0,
                format!(
                    "starts at write {}, but {before}: one of them was cut short or replaced by another copy",
                    header.first_seq
                ),
            ));
        }
        // Only a log without a trailer can end torn, and a padded one
        // only as a crash leaves it: in zeros, or a torn frame before zeros.
        if contents.trailer.is_none() && header.padded && !contents.end.padded_crash_tail() {
            return Err(Error::corruption(
                &path,
                contents.end.end,
                format!(
                    "the log ends at byte {} of {} without its trailer or the zeros a crash leaves after its last frame: \
                     it was cut short or replaced",
                    contents.end.end, contents.end.len
                ),
            ));
        }
        chain.push(number);
        trailers.insert(number, contents.trailer);
        expected_seq = contents.end_seq;
        let next = match contents.trailer {
            Some(trailer) if trailer.next != 0 => {
                named_by = format!("the trailer of {}", wal::file_name(number));
                Some(trailer.next)
            }
            _ => {
                // Its successor, if any, names it in its header.
                let mut successors = Vec::new();
                for &later in logs.range(number + 1..) {
                    if header_of(later)?
                        .is_some_and(|later| later.previous == number && later.store_id == store_id)
                    {
                        successors.push(later);
                    }
                }
                match successors[..] {
                    [] => None,
                    [only] => {
                        named_by = format!("its header (it follows {})", wal::file_name(number));
                        Some(only)
                    }
                    _ => {
                        return Err(Error::corruption(
                            &path,
                            0,
                            format!("logs {successors:?} all claim to follow it: the chain of logs forks"),
                        ))
                    }
                }
            }
        };
        match next {
            Some(next) => number = next,
            None => break,
        }
    }
    for &number in &logs {
        let name = wal::file_name(number);
        if number < counters.log_number {
            removable.push(name);
            continue;
        }
        if chain.contains(&number) {
            continue;
        }
        match header_of(number)? {
            Some(header) if header.store_id != store_id => {
                unaccounted.push(format!(
                    "{name}: a log of another store ({:016x})",
                    header.store_id
                ));
            }
            Some(header) if header.previous >= counters.log_number && !chain.contains(&header.previous) => {
                return Err(Error::corruption(
                    dir.join(wal::file_name(header.previous)),
                    0,
                    format!("missing: {name} names it as the log before it"),
                ));
            }
            Some(header) => unaccounted.push(format!(
                "{name}: a log off the chain (it follows {})",
                wal::file_name(header.previous)
            )),
            None if is_only_zeros(fs, &dir.join(&name))? => removable.push(name),
            None => unaccounted.push(format!("{name}: a log without a readable header, off the chain")),
        }
    }

    let newest = *chain.last().expect("the chain holds the manifest's log");
    // A log below the log number is in the tree already: root spills
    // since the open moved past it.
    if counters.newest_log >= counters.log_number && !chain.contains(&counters.newest_log) {
        return Err(Error::corruption(
            dir.join(wal::file_name(counters.newest_log)),
            0,
            format!(
                "{manifest_name} records it as the log its last open started, but the chain of logs from {} ends at {}: \
                 it is missing or does not follow",
                wal::file_name(counters.log_number),
                wal::file_name(newest)
            ),
        ));
    }
    if let Some(closed_seq) = counters.closed_seq {
        let trailer = trailers.get(&counters.newest_log).copied().flatten();
        if trailer.is_none_or(|trailer| trailer.next != 0 || trailer.end_seq != closed_seq) {
            return Err(Error::corruption(
                dir.join(wal::file_name(counters.newest_log)),
                0,
                format!(
                    "{manifest_name} records that the store was closed with this log ending at write {closed_seq}, \
                     but it ends {}: it was cut short or replaced by an older copy",
                    match trailer {
                        Some(trailer) => format!("at write {} (trailer next {})", trailer.end_seq, trailer.next),
                        None => "without its closing trailer".to_string(),
                    }
                ),
            ));
        }
    }
    // List files and the rest.
    let live = recovered.tree.files();
    for name in &names {
        if let Some(number) = list::parse_name(name) {
            if live.contains_key(&number) {
                continue;
            }
            match list_store_id(fs, dir, number) {
                Some(id) if id != store_id => {
                    unaccounted.push(format!("{name}: a list file of another store ({id:016x})"));
                }
                _ => removable.push(name.clone()),
            }
        } else if name == manifest::CURRENT_TEMPORARY || name == wal::SPARE_NAME {
            removable.push(name.clone());
        } else if manifest::parse_name(name).is_none()
            && wal::parse_name(name).is_none()
            && name != manifest::CURRENT
            && looks_like_store_file(name)
        {
            unaccounted.push(format!("{name}: not a file this store writes"));
        }
    }
    removable.sort();
    unaccounted.sort();
    Ok(Some(Checked {
        recovered,
        root,
        next_seq: expected_seq,
        chain,
        removable,
        unaccounted,
    }))
}

/// Opens list `number`, which the manifest `named_by` names, checking
/// that store `store_id` wrote it. A missing file is corruption naming it
/// and the manifest.
fn open_named_list(
    fs: &dyn Fs,
    dir: &Path,
    number: FileNumber,
    store_id: u64,
    named_by: &str,
) -> Result<Arc<ListFile>> {
    let path = dir.join(list::file_name(number));
    if !fs.exists(&path)? {
        return Err(Error::corruption(
            &path,
            0,
            format!("missing: {named_by} names it as a list of the tree"),
        ));
    }
    let file = ListFile::open(fs, dir, number)?;
    let id = file.meta().store_id;
    if id != store_id {
        return Err(Error::corruption(
            &path,
            file.file_bytes() - FOOTER_BYTES as u64,
            format!("a list file of another store ({id:016x}; this store, whose {named_by} names it, is {store_id:016x})"),
        ));
    }
    Ok(file)
}

/// The store identity in the footer of list `number`, if it has a valid one.
fn list_store_id(fs: &dyn Fs, dir: &Path, number: FileNumber) -> Option<u64> {
    let path = dir.join(list::file_name(number));
    let file = fs.open_read(&path).ok()?;
    let len = file.len().ok()?;
    let start = len.checked_sub(FOOTER_BYTES as u64)?;
    let mut bytes = Vec::with_capacity(FOOTER_BYTES);
    file.read_exact_append(&mut bytes, FOOTER_BYTES, start).ok()?;
    list::footer_meta(&path, number, start, &bytes)
        .ok()
        .map(|meta| meta.store_id)
}

/// The bytes of the file at `path`.
pub(crate) fn read_whole(fs: &dyn Fs, path: &Path) -> Result<Vec<u8>> {
    let file = fs.open_read(path)?;
    let len = file.len()? as usize;
    let mut bytes = Vec::with_capacity(len);
    file.read_exact_append(&mut bytes, len, 0)?;
    Ok(bytes)
}

/// Whether the file at `path` holds nothing but zeros (or nothing).
fn is_only_zeros(fs: &dyn Fs, path: &Path) -> Result<bool> {
    Ok(read_whole(fs, path)?.iter().all(|&byte| byte == 0))
}
