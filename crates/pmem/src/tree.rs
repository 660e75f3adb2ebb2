//! A B3-tree whose persistence mode is chosen at run time, by name (see
//! [`Mode`]): what the command line and the Python module open. Each mode
//! is its own monomorphised tree, so the choice costs one match per call.

use std::ops::RangeBounds;
use std::path::Path;

use spillway_core::Result;

use crate::b3tree::{B3Tree, Options, TreeStats};
use crate::persist::{FenceOnly, Hardware, Latency, Persist, Volatile};
use crate::table::Mode;

/// A B3-tree in one of the modes.
#[derive(Debug)]
pub enum Tree {
    Hardware(B3Tree<Hardware>),
    Fence(B3Tree<FenceOnly>),
    Volatile(B3Tree<Volatile>),
    Latency(B3Tree<Latency<Hardware>>),
}

/// Runs `$body` with `$tree` bound to the tree inside, whatever its mode.
macro_rules! each {
    ($self:expr, $tree:ident => $body:expr) => {
        match $self {
            Tree::Hardware($tree) => $body,
            Tree::Fence($tree) => $body,
            Tree::Volatile($tree) => $body,
            Tree::Latency($tree) => $body,
        }
    };
}

fn open<P: Persist>(path: &Path, exists: bool, options: Options, persist: P) -> Result<B3Tree<P>> {
    if exists {
        B3Tree::open(path, persist)
    } else {
        B3Tree::create(path, options, persist)
    }
}

impl Tree {
    /// Opens the tree at `path` (recovering it), or creates it with
    /// `options` when no file is there; persisting with `mode`.
    pub fn open_or_create(path: &Path, mode: Mode, options: Options) -> Result<Tree> {
        let exists = path.exists();
        Ok(match mode {
            Mode::Hardware(kind) => Tree::Hardware(open(path, exists, options, Hardware::with(kind))?),
            Mode::Fence => Tree::Fence(open(path, exists, options, FenceOnly::default())?),
            Mode::Volatile => Tree::Volatile(open(path, exists, options, Volatile::default())?),
            Mode::Latency(wait) => Tree::Latency(open(
                path,
                exists,
                options,
                Latency::new(Hardware::detect(), wait),
            )?),
        })
    }

    pub fn get(&self, key: u64) -> Result<Option<u64>> {
        each!(self, tree => tree.get(key))
    }

    pub fn insert(&self, key: u64, value: u64) -> Result<Option<u64>> {
        each!(self, tree => tree.insert(key, value))
    }

    pub fn remove(&self, key: u64) -> Result<Option<u64>> {
        each!(self, tree => tree.remove(key))
    }

    pub fn range(&self, keys: impl RangeBounds<u64>, limit: usize) -> Result<Vec<(u64, u64)>> {
        each!(self, tree => tree.range(keys, limit))
    }

    pub fn entries(&self) -> Result<Vec<(u64, u64)>> {
        each!(self, tree => tree.entries())
    }

    pub fn len(&self) -> Result<usize> {
        each!(self, tree => tree.len())
    }

    pub fn is_empty(&self) -> Result<bool> {
        each!(self, tree => tree.is_empty())
    }

    pub fn verify(&self) -> Result<()> {
        each!(self, tree => tree.verify())
    }

    /// Flushes and fences made so far (what `stats` reads, without the
    /// tree's shape).
    pub fn counts(&self) -> (u64, u64) {
        each!(self, tree => (tree.persist().counts().flushes(), tree.persist().counts().fences()))
    }

    pub fn stats(&self) -> Result<TreeStats> {
        each!(self, tree => tree.stats())
    }

    /// Marks the tree closed and makes its file durable.
    pub fn close(self) -> Result<()> {
        each!(self, tree => tree.close())
    }
}
