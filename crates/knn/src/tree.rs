//! The SS-tree: nodes and points as flat arrays.
//!
//! Nodes are numbered level by level from the root (node 0), each level
//! listing the children of the level above in their parents' order, so a
//! node's children are contiguous and the leaves (the last level) are in
//! depth-first order: leaf `l + 1` is leaf `l`'s right neighbour, and a
//! subtree's leaves are the ids `leaf_first..=leaf_last`. Points are stored
//! in leaf order, row-major, in the type they were given in.

use crate::options::Build;
use crate::points::Coordinate;
use crate::slot::Slot;
use crate::stats::TreeStats;

/// The most dimensions at which nodes keep a bounding box: at few
/// dimensions a box is much tighter than the sphere around the same points,
/// and its bound costs little more than the sphere's. At 10^6 points in 100
/// clusters of sigma 640, k = 10, one thread, branch-and-bound with boxes
/// against without: d = 4, 20 nodes and 15 leaves per query against 35
/// and 25, 0.15 s against 0.23 s for 10^4 queries; d = 8, 0.056 s against
/// 0.08-0.10 s for 1000; d = 16, 0.11 s against 0.13 s clustered but
/// 8.0-8.7 s against 7.7-7.8 s on uniform data, where nothing prunes.
pub(crate) const BOX_DIMS_MAX: usize = 8;

/// Points in leaf order, in their own type: each leaf's block
/// dimension-major (coordinate `j` of the leaf's point `i` at
/// `start * dims + j * count + i`), so that a leaf is scanned in one pass
/// over lanes per dimension.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Storage {
    F32(Vec<f32>),
    F64(Vec<f64>),
}

impl Storage {
    /// The largest coordinate magnitude.
    pub(crate) fn max_magnitude(&self) -> f64 {
        match self {
            Storage::F32(v) => v.iter().fold(0.0, |m, x| m.max(f64::from(x.abs()))),
            Storage::F64(v) => v.iter().fold(0.0, |m, x| m.max(x.abs())),
        }
    }

    pub(crate) fn dtype(&self) -> &'static str {
        match self {
            Storage::F32(_) => "f32",
            Storage::F64(_) => "f64",
        }
    }

    fn bytes(&self) -> usize {
        match self {
            Storage::F32(v) => v.len() * 4,
            Storage::F64(v) => v.len() * 8,
        }
    }
}

/// An SS-tree over a set of points (the layout is in the module doc and the
/// crate's DESIGN.md). Immutable once built: queries share it across threads.
#[derive(Debug, Clone, PartialEq)]
pub struct SsTree {
    pub(crate) dims: usize,
    pub(crate) leaf_size: usize,
    pub(crate) degree: usize,
    pub(crate) build: Build,
    pub(crate) build_s: f64,
    /// First node of each level, and the node count last (`levels + 1`).
    pub(crate) level_start: Vec<u32>,
    /// Per node: first child and child count (0 for leaves).
    pub(crate) child_first: Vec<u32>,
    pub(crate) child_count: Vec<u32>,
    /// Per node: its parent (`u32::MAX` for the root).
    pub(crate) parent: Vec<u32>,
    /// Per node: the first and last leaf id below it.
    pub(crate) leaf_first: Vec<u32>,
    pub(crate) leaf_last: Vec<u32>,
    /// Per node: points below it.
    pub(crate) point_count: Vec<u64>,
    /// Per node: the sphere's centre (`dims` f64, row-major) and radius.
    pub(crate) centres: Vec<f64>,
    /// The same centres by sibling group, dimension-major (see
    /// `build::group_centres`); derived, not saved.
    pub(crate) group_centres: Vec<f64>,
    /// The largest coordinate magnitude of any point (derived, not saved):
    /// whether the f32 filter of brute force may run.
    pub(crate) max_magnitude: f64,
    /// Per node, at up to [`BOX_DIMS_MAX`] dimensions: the bounding box of
    /// its points, the `dims` lows then the `dims` highs, by sibling group
    /// like `group_centres` (derived, not saved; empty above).
    /// Branch-and-bound bounds a node by the larger of its sphere's and its
    /// box's lower bounds.
    pub(crate) boxes: Vec<f64>,
    pub(crate) radii: Vec<f64>,
    /// Per leaf: where its points start in `storage` (in points), and the
    /// point count last (`leaves + 1`).
    pub(crate) leaf_point_start: Vec<u32>,
    /// Per stored point: its row in the input.
    pub(crate) point_ids: Vec<u32>,
    pub(crate) storage: Storage,
    /// The tree's copy on the GPU, once a query asked for it.
    pub(crate) gpu: Slot,
}

impl SsTree {
    /// Coordinates per point.
    pub fn dims(&self) -> usize {
        self.dims
    }

    /// Points indexed.
    pub fn len(&self) -> usize {
        self.point_ids.len()
    }

    /// Never true: a tree holds at least one point.
    pub fn is_empty(&self) -> bool {
        self.point_ids.is_empty()
    }

    /// `"f32"` or `"f64"`: how the points are stored.
    pub fn dtype(&self) -> &'static str {
        self.storage.dtype()
    }

    pub(crate) fn nodes(&self) -> usize {
        self.radii.len()
    }

    pub(crate) fn leaves(&self) -> usize {
        self.leaf_point_start.len() - 1
    }

    pub(crate) fn levels(&self) -> usize {
        self.level_start.len() - 1
    }

    /// Where leaf `leaf`'s points are stored (`start..end`, in points).
    #[inline]
    pub(crate) fn leaf_points(&self, leaf: usize) -> (usize, usize) {
        let starts = &self.leaf_point_start;
        (starts[leaf] as usize, starts[leaf + 1] as usize)
    }

    /// The node id of leaf `leaf`.
    #[inline]
    pub(crate) fn leaf_node(&self, leaf: u32) -> u32 {
        self.level_start[self.levels() - 1] + leaf
    }

    #[inline]
    pub(crate) fn centre(&self, node: u32) -> &[f64] {
        let at = node as usize * self.dims;
        &self.centres[at..at + self.dims]
    }

    /// Computes what is derived from the saved arrays (after a build or a
    /// load): the centres by sibling group, the largest magnitude, the
    /// nodes' boxes.
    pub(crate) fn derive(&mut self) {
        self.group_centres = by_sibling_group(self, &self.centres, self.dims);
        self.max_magnitude = self.storage.max_magnitude();
        self.boxes = if self.dims <= BOX_DIMS_MAX {
            let boxes = match &self.storage {
                Storage::F32(points) => node_boxes(self, points),
                Storage::F64(points) => node_boxes(self, points),
            };
            by_sibling_group(self, &boxes, 2 * self.dims)
        } else {
            Vec::new()
        };
    }

    /// The tree's shape and build cost.
    pub fn stats(&self) -> TreeStats {
        let arrays = self.level_start.len() * 4
            + self.nodes() * (4 * 5 + 8 + 8)
            + self.centres.len() * 16
            + self.leaf_point_start.len() * 4
            + self.point_ids.len() * 4;
        TreeStats {
            points: self.len() as u64,
            dims: self.dims as u32,
            dtype: self.dtype(),
            build: self.build,
            leaf_size: self.leaf_size as u32,
            degree: self.degree as u32,
            leaves: self.leaves() as u32,
            nodes: self.nodes() as u32,
            levels: self.levels() as u32,
            leaf_fill: self.len() as f64 / (self.leaves() * self.leaf_size) as f64,
            bytes: (arrays + self.storage.bytes()) as u64,
            build_s: self.build_s,
        }
    }
}

/// Each node's bounding box (row-major: a node's lows, then its highs): a
/// leaf's around its points, a node's around its children's boxes.
fn node_boxes<T: Coordinate>(tree: &SsTree, points: &[T]) -> Vec<f64> {
    let dims = tree.dims;
    let mut boxes = vec![0.0; tree.nodes() * 2 * dims];
    let first_leaf = tree.leaf_node(0) as usize;
    for (node, node_box) in boxes.chunks_exact_mut(2 * dims).enumerate().skip(first_leaf) {
        let (start, end) = tree.leaf_points(node - first_leaf);
        let (low, high) = node_box.split_at_mut(dims);
        for ((column, low), high) in points[start * dims..end * dims]
            .chunks_exact(end - start)
            .zip(low)
            .zip(high)
        {
            *low = column.iter().fold(f64::INFINITY, |m, x| m.min(x.to_f64()));
            *high = column.iter().fold(f64::NEG_INFINITY, |m, x| m.max(x.to_f64()));
        }
    }
    for node in (0..first_leaf).rev() {
        let (first, count) = (tree.child_first[node] as usize, tree.child_count[node] as usize);
        let (above, below) = boxes.split_at_mut(first * 2 * dims);
        let (low, high) = above[node * 2 * dims..][..2 * dims].split_at_mut(dims);
        low.fill(f64::INFINITY);
        high.fill(f64::NEG_INFINITY);
        for child in below[..count * 2 * dims].chunks_exact(2 * dims) {
            let (child_low, child_high) = child.split_at(dims);
            low.iter_mut().zip(child_low).for_each(|(m, &x)| *m = m.min(x));
            high.iter_mut().zip(child_high).for_each(|(m, &x)| *m = m.max(x));
        }
    }
    boxes
}

/// Per-node rows of `width` values (`rows[node * width + j]`) laid out
/// again by sibling group, column-major within it (value `j` of the group's
/// child `i` at `first * width + j * count + i`), so that a node's
/// children are evaluated in one pass over lanes per column. The root is a
/// group of one.
fn by_sibling_group(tree: &SsTree, rows: &[f64], width: usize) -> Vec<f64> {
    let mut out = vec![0.0; rows.len()];
    out[..width].copy_from_slice(&rows[..width]);
    for node in 0..tree.nodes() {
        let (first, count) = (tree.child_first[node] as usize, tree.child_count[node] as usize);
        for i in 0..count {
            for (j, &x) in rows[(first + i) * width..][..width].iter().enumerate() {
                out[first * width + j * count + i] = x;
            }
        }
    }
    out
}
