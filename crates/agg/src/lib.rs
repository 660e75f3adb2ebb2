//! GroupBy-Aggregate (seed 000 ch. IV-V): aggregate functions as partial
//! aggregation objects (PAOs).
//!
//! A PAO is the state of an aggregate over some of a key's values. It is
//! made from one value ([`Aggregate::init`]), merged with another PAO of the
//! same key ([`Aggregate::merge`], commutative and associative, so values
//! can be combined in any grouping and order), written into a contiguous
//! buffer and read back, and finally turned into the result
//! ([`Aggregate::finalize`]: a mean divides its sum by its count).
//!
//! Engines hold PAOs as bytes and use them through the object-safe
//! [`AggregateFunction`], which every [`Aggregate`] implements; built-in
//! functions are chosen by name with [`function`].
//!
//! Two engines aggregate by key behind one [`Aggregator`]: the
//! [`CompressedBufferTree`] (seed 000 ch. V), which keeps PAOs compressed
//! and hash-sorted and merges them lazily, and the [`HashAggregator`], which
//! updates one state per key in place.

pub mod admission;
pub mod aggregator;
pub mod cbt;
mod clock;
pub mod function;
pub mod hash;
pub mod value;

pub use admission::{key_text, Admission};
pub use aggregator::{Aggregator, AggregatorOptions, AggregatorStats, Engine, Results, THREADS_MAX};
pub use cbt::{CbtIter, CbtOptions, CbtStats, CompressedBufferTree, ParallelCbt};
pub use function::{function, Aggregate, AggregateFunction, Input, Takes, FUNCTION_NAMES};
pub use hash::{HashAggregator, HashStats};
pub use value::{Comparable, Output, Scalar, Value};
