//! A CCEH table whose persistence mode is chosen at run time, by name
//! (`clwb`, `clflushopt`, `clflush`, `fence`, `none`, `latency:300ns`):
//! what the command line and the Python module open. Each mode is its own
//! monomorphised table, so the choice costs one match per call, not one
//! dynamic call per store.

use std::path::Path;
use std::str::FromStr;
use std::time::Duration;

use spillway_core::{ensure, Error, Result};

use crate::cceh::{Cceh, Keys, Options, Session};
use crate::persist::{FenceOnly, FlushKind, Hardware, Latency, Persist, Volatile};

/// A persistence mode, by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Cache-line write-backs by this instruction, then `sfence`.
    Hardware(FlushKind),
    /// Persistent caches (eADR): fences only.
    Fence,
    /// No persistence.
    Volatile,
    /// The best write-back this CPU has, plus a wait per line flushed.
    Latency(Duration),
}

impl FromStr for Mode {
    type Err = Error;

    fn from_str(name: &str) -> Result<Mode> {
        let hardware = |kind: FlushKind| {
            let best = FlushKind::detect();
            let usable = match kind {
                FlushKind::Clflush => true,
                FlushKind::ClflushOpt => best != FlushKind::Clflush,
                FlushKind::Clwb => best == FlushKind::Clwb,
            };
            ensure!(
                usable,
                InvalidArgument,
                "this CPU has no {} instruction (it has {})",
                kind.name(),
                best.name()
            );
            Ok(Mode::Hardware(kind))
        };
        match name {
            "clwb" => hardware(FlushKind::Clwb),
            "clflushopt" => hardware(FlushKind::ClflushOpt),
            "clflush" => hardware(FlushKind::Clflush),
            "auto" => Ok(Mode::Hardware(FlushKind::detect())),
            "fence" => Ok(Mode::Fence),
            "none" => Ok(Mode::Volatile),
            _ => match name.strip_prefix("latency:") {
                Some(wait) => Ok(Mode::Latency(parse_wait(wait)?)),
                None => Err(Error::InvalidArgument(format!(
                    "unknown persistence {name:?}: use clwb, clflushopt, clflush, auto, fence, none or \
                     latency:<ns|us> (as latency:300ns)"
                ))),
            },
        }
    }
}

/// `300ns`, `1us`: the wait per line flushed (at most 1 ms).
fn parse_wait(text: &str) -> Result<Duration> {
    let (number, unit) = match (text.strip_suffix("ns"), text.strip_suffix("us")) {
        (Some(number), _) => (number, 1),
        (_, Some(number)) => (number, 1000),
        _ => (text, 0),
    };
    let nanos = number.parse::<u64>().ok().filter(|_| unit > 0).map(|n| n * unit);
    match nanos {
        Some(nanos) if nanos <= 1_000_000 => Ok(Duration::from_nanos(nanos)),
        _ => Err(Error::InvalidArgument(format!(
            "latency:{text}: give the wait per flushed line in ns or us, at most 1 ms (as latency:300ns)"
        ))),
    }
}

/// What a table's persistence did, and its shape.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct TableStats {
    pub persistence: String,
    pub flushes: u64,
    pub fences: u64,
    /// Merges of sparse segments, and the flushes among `flushes` they
    /// made.
    pub merges: u64,
    pub merge_flushes: u64,
    pub global_depth: u32,
    pub region_bytes: u64,
    /// What the table maps: `u64` or `bytes`.
    pub keys: &'static str,
    pub segments: usize,
    /// Pair slots in the segments (keys over slots: the load factor).
    pub slots: u64,
    /// Bytes of the region mapped in 2 MiB pages (see
    /// [`Region::huge_page_bytes`](crate::Region::huge_page_bytes)).
    pub huge_page_bytes: u64,
}

/// A CCEH table in one of the modes.
#[derive(Debug)]
pub enum Table {
    Hardware(Cceh<Hardware>),
    Fence(Cceh<FenceOnly>),
    Volatile(Cceh<Volatile>),
    Latency(Cceh<Latency<Hardware>>),
}

/// Runs `$body` with `$table` bound to the table (or session: `$kind`)
/// inside, whatever its mode.
macro_rules! each {
    ($self:expr, $table:ident => $body:expr) => {
        each!(Table, $self, $table => $body)
    };
    ($kind:ident, $self:expr, $table:ident => $body:expr) => {
        match $self {
            $kind::Hardware($table) => $body,
            $kind::Fence($table) => $body,
            $kind::Volatile($table) => $body,
            $kind::Latency($table) => $body,
        }
    };
}

/// A [`Session`] on a u64 [`Table`], whatever its mode.
#[derive(Debug)]
pub enum TableSession<'a> {
    Hardware(Session<'a, Hardware>),
    Fence(Session<'a, FenceOnly>),
    Volatile(Session<'a, Volatile>),
    Latency(Session<'a, Latency<Hardware>>),
}

impl TableSession<'_> {
    pub fn get(&mut self, key: u64) -> Option<u64> {
        each!(TableSession, self, session => session.get(key))
    }

    pub fn get_many(&mut self, keys: &[u64], values: &mut [Option<u64>]) {
        each!(TableSession, self, session => session.get_many(keys, values))
    }

    pub fn insert(&mut self, key: u64, value: u64) -> Result<Option<u64>> {
        each!(TableSession, self, session => session.insert(key, value))
    }

    pub fn remove(&mut self, key: u64) -> Result<Option<u64>> {
        each!(TableSession, self, session => session.remove(key))
    }
}

impl Table {
    /// Opens the table at `path`, or creates it with `options` when no file
    /// is there; persisting with `mode`.
    pub fn open_or_create(path: &Path, mode: Mode, options: Options) -> Result<Table> {
        let exists = path.exists();
        Ok(match mode {
            Mode::Hardware(kind) => Table::Hardware(open(path, exists, options, Hardware::with(kind))?),
            Mode::Fence => Table::Fence(open(path, exists, options, FenceOnly::default())?),
            Mode::Volatile => Table::Volatile(open(path, exists, options, Volatile::default())?),
            Mode::Latency(wait) => Table::Latency(open(
                path,
                exists,
                options,
                Latency::new(Hardware::detect(), wait),
            )?),
        })
    }

    pub fn get(&self, key: u64) -> Result<Option<u64>> {
        each!(self, table => table.expect(Keys::U64).map(|()| table.get(key)))
    }

    /// [`Table::get`] of each of `keys`, into `values` (see
    /// [`Cceh::get_many`]).
    pub fn get_many(&self, keys: &[u64], values: &mut [Option<u64>]) -> Result<()> {
        ensure!(
            keys.len() == values.len(),
            InvalidArgument,
            "{} keys but {} value slots",
            keys.len(),
            values.len()
        );
        each!(self, table => table.expect(Keys::U64).map(|()| table.get_many(keys, values)))
    }

    /// A session for one thread's run of operations (a u64 table's; see
    /// [`Session`]).
    pub fn session(&self) -> Result<TableSession<'_>> {
        each!(self, table => table.expect(Keys::U64))?;
        Ok(match self {
            Table::Hardware(table) => TableSession::Hardware(table.session()),
            Table::Fence(table) => TableSession::Fence(table.session()),
            Table::Volatile(table) => TableSession::Volatile(table.session()),
            Table::Latency(table) => TableSession::Latency(table.session()),
        })
    }

    pub fn get_bytes(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        each!(self, table => table.get_bytes(key))
    }

    pub fn insert_bytes(&self, key: &[u8], value: &[u8]) -> Result<bool> {
        each!(self, table => table.insert_bytes(key, value))
    }

    pub fn remove_bytes(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        each!(self, table => table.remove_bytes(key))
    }

    pub fn entries_bytes(&self) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        each!(self, table => table.entries_bytes())
    }

    /// Runs the repair an open after a crash left for the first write
    /// (see [`Cceh::repaired`]).
    pub fn repaired(&self) -> Result<()> {
        each!(self, table => table.repaired())
    }

    /// Bucket lines a search for `key` reads (see [`Cceh::lines_read`]).
    pub fn lines_read(&self, key: u64) -> Result<u64> {
        each!(self, table => table.expect(Keys::U64).map(|()| table.lines_read(key)))
    }

    /// What the table maps.
    pub fn keys(&self) -> Keys {
        each!(self, table => table.keys())
    }

    pub fn insert(&self, key: u64, value: u64) -> Result<Option<u64>> {
        each!(self, table => table.insert(key, value))
    }

    pub fn remove(&self, key: u64) -> Result<Option<u64>> {
        each!(self, table => table.remove(key))
    }

    pub fn len(&self) -> Result<usize> {
        each!(self, table => table.len())
    }

    pub fn is_empty(&self) -> Result<bool> {
        Ok(self.len()? == 0)
    }

    pub fn entries(&self) -> Result<Vec<(u64, u64)>> {
        each!(self, table => table.entries())
    }

    pub fn verify(&self) -> Result<()> {
        each!(self, table => table.verify())
    }

    pub fn stats(&self) -> TableStats {
        each!(self, table => {
            let segments = table.segment_count();
            let (merges, merge_flushes) = table.merge_counts();
            TableStats {
            persistence: table.persist().name(),
            flushes: table.persist().counts().flushes(),
            fences: table.persist().counts().fences(),
            merges,
            merge_flushes,
            global_depth: table.global_depth(),
            region_bytes: table.region().len(),
            keys: table.keys().name(),
            segments,
            slots: segments as u64 * table.slots(),
            huge_page_bytes: table.region().huge_page_bytes(),
        }})
    }

    /// Marks the table closed and makes its file durable.
    pub fn close(self) -> Result<()> {
        each!(self, table => table.close())
    }
}

fn open<P: Persist>(path: &Path, exists: bool, options: Options, persist: P) -> Result<Cceh<P>> {
    if exists {
        Cceh::open(path, persist)
    } else {
        Cceh::create(path, options, persist)
    }
}
