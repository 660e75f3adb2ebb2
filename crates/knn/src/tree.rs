//! The SS-tree.

use std::path::Path;

use spillway_core::{Fs, Interrupt, Result};

use crate::options::{BuildOptions, QueryOptions};
use crate::points::Points;
use crate::query::Neighbours;
use crate::stats::TreeStats;

/// An SS-tree over a set of points (see the crate's DESIGN.md for the layout).
#[derive(Debug)]
pub struct SsTree {}

impl SsTree {
    /// Builds the tree bottom-up over `points`.
    pub fn build(points: Points<'_>, options: &BuildOptions, interrupt: &Interrupt) -> Result<SsTree> {
        let _ = (points, options, interrupt);
        unimplemented!()
    }

    /// The `k` nearest points to each query (`queries` is row-major, `dims()`
    /// coordinates per query).
    pub fn query(
        &self,
        queries: &[f64],
        k: usize,
        options: &QueryOptions,
        interrupt: &Interrupt,
    ) -> Result<Neighbours> {
        let _ = (queries, k, options, interrupt);
        unimplemented!()
    }

    /// Coordinates per point.
    pub fn dims(&self) -> usize {
        unimplemented!()
    }

    /// Points indexed.
    pub fn len(&self) -> usize {
        unimplemented!()
    }

    /// Never true: a tree holds at least one point.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// `"f32"` or `"f64"`.
    pub fn dtype(&self) -> &'static str {
        unimplemented!()
    }

    /// The tree's shape and build cost.
    pub fn stats(&self) -> TreeStats {
        unimplemented!()
    }

    /// Checks every structural and geometric invariant (DESIGN.md).
    pub fn check_invariants(&self) -> Result<()> {
        unimplemented!()
    }

    /// Writes the tree to `path`, atomically and durably.
    pub fn save(&self, fs: &dyn Fs, path: &Path) -> Result<()> {
        let _ = (fs, path);
        unimplemented!()
    }

    /// Reads a tree saved by [`SsTree::save`], checking every checksum and
    /// invariant.
    pub fn load(fs: &dyn Fs, path: &Path) -> Result<SsTree> {
        let _ = (fs, path);
        unimplemented!()
    }
}
