#![warn(missing_docs)]
//! The kNN index (seed 002, chapter V): an SS-tree (a tree of bounding
//! spheres) built bottom-up, searched exactly by Parallel Scan and Backtrack
//! (PSB), by branch-and-bound, or by brute force.
//!
//! Every method returns what a float64 brute force returns, bit for bit:
//! the `k` points with the smallest canonical squared distance
//! ([`distance::d2`]), ties broken by the point's row, distances reported as
//! the square root of that sum.
//!
//! ```
//! use spillway_core::Interrupt;
//! use spillway_knn::{reference, Build, BuildOptions, Method, Points, QueryOptions, SsTree};
//! # fn main() -> spillway_core::Result<()> {
//! let coordinates: Vec<f64> = (0..2_000).map(|i| ((i * 7919) % 1000) as f64 / 10.0).collect();
//! let points = Points::f64(&coordinates, 2)?;
//! let options = BuildOptions { leaf_size: 16, build: Build::Hilbert, ..BuildOptions::default() };
//! let tree = SsTree::build(points, &options, &Interrupt::new())?;
//! let queries = [50.0, 50.0, 3.0, 97.0];
//! let found = tree.query(&queries, 5, &QueryOptions { method: Method::Psb, ..QueryOptions::default() }, &Interrupt::new())?;
//! let expected = reference::knn(points, &queries, 5)?;
//! assert_eq!(found.indices, expected.indices);
//! assert_eq!(found.distances, expected.distances);
//! # Ok(())
//! # }
//! ```
//!
//! - [`SsTree`]: the index, as flat arrays; [`SsTree::build`] (Hilbert
//!   packing or k-means clustering, bounding spheres by a corrected
//!   Ritter's algorithm), [`SsTree::query`] for a batch of queries on every
//!   core, [`SsTree::save`] / [`SsTree::load`] (a checksummed file),
//!   [`SsTree::check_invariants`];
//! - [`Points`]: a borrowed row-major matrix of f32 or f64 coordinates,
//!   checked (finite, not too large) before anything is built;
//! - [`distance`]: the canonical distance and the sphere bounds with their
//!   rounding slack, on which exactness rests;
//! - [`reference`]: the definition of the answer, a scalar brute force;
//! - [`npy`]: NumPy's `.npy` files, for the CLI.
//!
//! The layout, the exactness argument, the file format and the fixes to the
//! seed's listings are in the crate's [DESIGN.md](../DESIGN.md).

mod brute_force;
mod build;
mod device;
pub mod distance;
mod file;
mod filter;
mod gpu;
mod hilbert;
mod kmeans;
mod knn_set;
pub mod npy;
mod options;
mod parallel;
mod points;
mod psb;
mod query;
pub mod reference;
mod ritter;
mod search;
mod slot;
mod stats;
mod tree;

pub use gpu::{gpu_available, GpuTree, GPU_DEGREE_MAX};
pub use options::{Build, BuildOptions, Device, Method, QueryOptions};
pub use points::Points;
pub use query::Neighbours;
pub use stats::{QueryStats, TreeStats};
pub use tree::SsTree;
