//! The two persistent trees as one: the [`Sorted`] interface (a sorted
//! map of u64 keys to u64 values on a region; the B3-tree's of byte
//! strings too), and [`Tree`], a tree whose persistence mode is chosen at run time, by
//! name (see [`Mode`]): what the command line, the benchmark and the
//! Python module open. Each mode is its own monomorphised tree, so the
//! choice costs one match per call.
//!
//! The trees are the B3-tree ([`B3`]) and the sorted-leaf baseline it is
//! measured against ([`SortedLeaf`]).

use std::fmt::Debug;
use std::ops::{Bound, RangeBounds};
use std::path::Path;

use spillway_core::{Error, Result};

use crate::b3tree::B3Tree;
use crate::fastfair::{FastFair, NODE_BYTES};
use crate::persist::{FenceOnly, Hardware, Latency, Persist, Volatile};
use crate::record::Keys;
use crate::region::Region;
use crate::table::Mode;
use crate::treeroot::{Options, TreeStats, PAGE_BYTES};

/// A persistent sorted map of u64 keys to u64 values on a region.
pub trait Sorted<P: Persist>: Sized + Send + Sync {
    /// The region kind it is stored as.
    const KIND: &'static str;

    fn create(path: &Path, options: Options, persist: P) -> Result<Self>;
    fn in_memory(options: Options, persist: P) -> Result<Self>;
    /// Opens the tree a region holds, recovering it if it was not closed.
    fn attach(region: Region, persist: P) -> Result<Self>;
    fn get(&self, key: u64) -> Result<Option<u64>>;
    fn insert(&self, key: u64, value: u64) -> Result<Option<u64>>;
    fn remove(&self, key: u64) -> Result<Option<u64>>;
    fn range(&self, keys: impl RangeBounds<u64>, limit: usize) -> Result<Vec<(u64, u64)>>;
    /// [`range`](Self::range) in reverse key order, from the range's end.
    fn range_rev(&self, keys: impl RangeBounds<u64>, limit: usize) -> Result<Vec<(u64, u64)>>;
    fn verify(&self) -> Result<()>;
    fn stats(&self) -> Result<TreeStats>;
    fn persist(&self) -> &P;
    fn region(&self) -> &Region;
    fn close(self) -> Result<()>;

    fn open(path: &Path, persist: P) -> Result<Self> {
        Self::attach(Region::open(path, Self::KIND)?, persist)
    }

    fn entries(&self) -> Result<Vec<(u64, u64)>> {
        self.range(.., usize::MAX)
    }

    /// What it maps (a tree that holds only u64 keys keeps these
    /// defaults, which refuse bytes).
    fn keys(&self) -> Keys {
        Keys::U64
    }
    fn get_bytes(&self, _key: &[u8]) -> Result<Option<Vec<u8>>> {
        Err(u64_only())
    }
    fn insert_bytes(&self, _key: &[u8], _value: &[u8]) -> Result<bool> {
        Err(u64_only())
    }
    fn remove_bytes(&self, _key: &[u8]) -> Result<Option<Vec<u8>>> {
        Err(u64_only())
    }
    /// The pairs with keys from `low` to `high`, in key order
    /// (`forward`) or from `high` down, at most `limit`.
    fn range_bytes(
        &self,
        _low: Bound<&[u8]>,
        _high: Bound<&[u8]>,
        _limit: usize,
        _forward: bool,
    ) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        Err(u64_only())
    }
}

fn u64_only() -> Error {
    Error::InvalidArgument("the sorted-leaf baseline maps u64 keys only, not bytes".into())
}

/// Implements [`Sorted`] for a tree type by its own methods of the names,
/// and `$bytes` (the bytes key methods of a tree that has them).
macro_rules! sorted {
    ($tree:ident, $kind:path, { $($bytes:tt)* }) => {
        impl<P: Persist> Sorted<P> for $tree<P> {
            const KIND: &'static str = $kind;

            fn create(path: &Path, options: Options, persist: P) -> Result<Self> {
                $tree::create(path, options, persist)
            }
            fn in_memory(options: Options, persist: P) -> Result<Self> {
                $tree::in_memory(options, persist)
            }
            fn attach(region: Region, persist: P) -> Result<Self> {
                $tree::attach(region, persist)
            }
            fn get(&self, key: u64) -> Result<Option<u64>> {
                $tree::get(self, key)
            }
            fn insert(&self, key: u64, value: u64) -> Result<Option<u64>> {
                $tree::insert(self, key, value)
            }
            fn remove(&self, key: u64) -> Result<Option<u64>> {
                $tree::remove(self, key)
            }
            fn range(&self, keys: impl RangeBounds<u64>, limit: usize) -> Result<Vec<(u64, u64)>> {
                $tree::range(self, keys, limit)
            }
            fn range_rev(&self, keys: impl RangeBounds<u64>, limit: usize) -> Result<Vec<(u64, u64)>> {
                $tree::range_rev(self, keys, limit)
            }
            fn verify(&self) -> Result<()> {
                $tree::verify(self)
            }
            fn stats(&self) -> Result<TreeStats> {
                $tree::stats(self)
            }
            fn persist(&self) -> &P {
                $tree::persist(self)
            }
            fn region(&self) -> &Region {
                $tree::region(self)
            }
            fn close(self) -> Result<()> {
                $tree::close(self)
            }
            $($bytes)*
        }
    };
}

sorted!(B3Tree, crate::b3tree::KIND, {
    fn keys(&self) -> Keys {
        B3Tree::keys(self)
    }
    fn get_bytes(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        B3Tree::get_bytes(self, key)
    }
    fn insert_bytes(&self, key: &[u8], value: &[u8]) -> Result<bool> {
        B3Tree::insert_bytes(self, key, value)
    }
    fn remove_bytes(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        B3Tree::remove_bytes(self, key)
    }
    fn range_bytes(
        &self,
        low: Bound<&[u8]>,
        high: Bound<&[u8]>,
        limit: usize,
        forward: bool,
    ) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        B3Tree::range_bytes(self, low, high, limit, forward)
    }
});
sorted!(FastFair, crate::fastfair::KIND, {});

/// A kind of tree, whatever its persistence mode.
pub trait Family: Debug + 'static {
    type Of<P: Persist>: Sorted<P>;
    /// Bytes per page (or node) unless told otherwise: the size the
    /// family is measured at.
    const PAGE_BYTES: u64;
}

/// The B3-tree.
#[derive(Debug)]
pub struct B3;

impl Family for B3 {
    type Of<P: Persist> = B3Tree<P>;
    const PAGE_BYTES: u64 = PAGE_BYTES;
}

/// The sorted-leaf baseline (FAST&FAIR's manner).
#[derive(Debug)]
pub struct SortedLeaf;

impl Family for SortedLeaf {
    type Of<P: Persist> = FastFair<P>;
    const PAGE_BYTES: u64 = NODE_BYTES;
}

/// A tree of family `F` in one of the modes.
pub enum Tree<F: Family = B3> {
    Hardware(F::Of<Hardware>),
    Fence(F::Of<FenceOnly>),
    Volatile(F::Of<Volatile>),
    Latency(F::Of<Latency<Hardware>>),
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

fn open<P: Persist, T: Sorted<P>>(path: &Path, exists: bool, options: Options, persist: P) -> Result<T> {
    if exists {
        T::open(path, persist)
    } else {
        T::create(path, options, persist)
    }
}

impl<F: Family> Debug for Tree<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (path, persistence) =
            each!(self, tree => (tree.region().path().display(), tree.persist().name()));
        write!(f, "Tree({path}, {persistence})")
    }
}

impl<F: Family> Tree<F> {
    /// Opens the tree at `path` (recovering it), or creates it with
    /// `options` when no file is there; persisting with `mode`.
    pub fn open_or_create(path: &Path, mode: Mode, options: Options) -> Result<Tree<F>> {
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

    pub fn range_rev(&self, keys: impl RangeBounds<u64>, limit: usize) -> Result<Vec<(u64, u64)>> {
        each!(self, tree => tree.range_rev(keys, limit))
    }

    pub fn entries(&self) -> Result<Vec<(u64, u64)>> {
        each!(self, tree => tree.entries())
    }

    pub fn len(&self) -> Result<usize> {
        self.count(usize::MAX)
    }

    pub fn is_empty(&self) -> Result<bool> {
        self.count(1).map(|count| count == 0)
    }

    /// Its keys, up to `limit`.
    fn count(&self, limit: usize) -> Result<usize> {
        match self.keys() {
            Keys::U64 => self.range(.., limit).map(|pairs| pairs.len()),
            Keys::Bytes => self
                .range_bytes(Bound::Unbounded, Bound::Unbounded, limit, true)
                .map(|pairs| pairs.len()),
        }
    }

    pub fn verify(&self) -> Result<()> {
        each!(self, tree => tree.verify())
    }

    /// What it maps.
    pub fn keys(&self) -> Keys {
        each!(self, tree => tree.keys())
    }

    pub fn get_bytes(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        each!(self, tree => tree.get_bytes(key))
    }

    /// Sets `key` to `value`; returns whether a value was replaced.
    pub fn insert_bytes(&self, key: &[u8], value: &[u8]) -> Result<bool> {
        each!(self, tree => tree.insert_bytes(key, value))
    }

    pub fn remove_bytes(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        each!(self, tree => tree.remove_bytes(key))
    }

    /// The pairs with keys from `low` to `high`, in key order (`forward`)
    /// or from `high` down, at most `limit`.
    pub fn range_bytes(
        &self,
        low: Bound<&[u8]>,
        high: Bound<&[u8]>,
        limit: usize,
        forward: bool,
    ) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        each!(self, tree => tree.range_bytes(low, high, limit, forward))
    }

    /// Flushes, fences, and flushes by merges made so far.
    pub fn counts(&self) -> Result<(u64, u64, u64)> {
        let stats = self.stats()?;
        Ok((stats.flushes, stats.fences, stats.merge_flushes))
    }

    pub fn stats(&self) -> Result<TreeStats> {
        each!(self, tree => tree.stats())
    }

    /// Marks the tree closed and makes its file durable.
    pub fn close(self) -> Result<()> {
        each!(self, tree => tree.close())
    }
}
