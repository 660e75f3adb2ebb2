//! What a build and a batch of queries report.

use serde::Serialize;

use crate::options::{Build, Method};

/// The shape of a tree and what its build cost.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct TreeStats {
    /// Points indexed.
    pub points: u64,
    /// Coordinates per point.
    pub dims: u32,
    /// `"f32"` or `"f64"`: how the points are stored.
    pub dtype: &'static str,
    /// How the tree was grouped.
    pub build: Build,
    /// Points per full leaf.
    pub leaf_size: u32,
    /// Children per full node.
    pub degree: u32,
    /// Leaves.
    pub leaves: u32,
    /// Nodes, leaves included.
    pub nodes: u32,
    /// Levels, the leaves' included (a one-leaf tree has one).
    pub levels: u32,
    /// Average points per leaf over the leaf size.
    pub leaf_fill: f64,
    /// Memory the tree holds, in bytes.
    pub bytes: u64,
    /// Seconds the build took (0 for a loaded tree).
    pub build_s: f64,
}

/// What a batch of queries did: the seed's measure is nodes visited per query.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct QueryStats {
    /// Queries answered.
    pub queries: u64,
    /// Neighbours asked for per query.
    pub k: u64,
    /// The search that ran (the one `auto` picked).
    pub method: &'static str,
    /// Where it ran: `"cpu"` or `"cuda"`.
    pub device: &'static str,
    /// Internal nodes whose children's bounds were evaluated.
    pub nodes_visited: u64,
    /// Leaves whose points were scanned.
    pub leaves_scanned: u64,
    /// Point distances computed (by the f32 filter or canonically).
    pub distances_computed: u64,
    /// On the GPU, by PSB: the share of lanes with work in the warps' steps
    /// over a node's children and a leaf's points (the seed's warp
    /// efficiency, counted by the kernel itself); absent elsewhere.
    pub warp_efficiency: Option<f64>,
    /// On the GPU: seconds from the first kernel launch to the end of the
    /// last (the rest of `query_s` is copies and the host's work); absent
    /// elsewhere.
    pub kernel_s: Option<f64>,
    /// Seconds the batch took.
    pub query_s: f64,
}

impl QueryStats {
    /// Adds one worker's counters.
    pub(crate) fn add(&mut self, other: &QueryStats) {
        self.queries += other.queries;
        self.nodes_visited += other.nodes_visited;
        self.leaves_scanned += other.leaves_scanned;
        self.distances_computed += other.distances_computed;
    }

    /// The method's name, for stats built before one was chosen.
    pub(crate) fn with_method(mut self, method: Method) -> Self {
        self.method = method.name();
        self
    }
}
