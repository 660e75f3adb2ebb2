#![forbid(unsafe_code)]
#![warn(missing_docs)]
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
//! ```
//! use spillway_agg::{Aggregator, AggregatorOptions, Output, Value};
//! # fn main() -> spillway_core::Result<()> {
//! let mut totals = Aggregator::new("sum", AggregatorOptions::default())?;
//! totals.insert(b"apples", Value::Int(3))?;
//! totals.insert_batch([(&b"pears"[..], Value::Int(5)), (b"apples", Value::Int(4))])?;
//! totals.finalize()?;
//! assert_eq!(totals.get(b"apples")?, Some(Output::Int(7)));
//! assert_eq!(totals.get(b"plums")?, None);
//! # Ok(())
//! # }
//! ```
//!
//! - [`Aggregator`]: one front for both engines, chosen by [`Engine`]: the
//!   [`CompressedBufferTree`] (seed 000 ch. V), which keeps PAOs compressed
//!   and hash-sorted and merges them lazily ([`ParallelCbt`] runs several
//!   on worker threads), and the [`HashAggregator`], which updates one
//!   state per key in place;
//! - [`Aggregate`] and the object-safe [`AggregateFunction`] every
//!   aggregate implements; built-in functions are chosen by name with
//!   [`function`] ([`FUNCTION_NAMES`]);
//! - [`Value`], [`Output`]: what goes in and comes out; [`Admission`]: the
//!   door values pass, holding an engine to one class of values where the
//!   function orders them;
//! - [`TypedHashAggregator`]: the typed, vectorized path for the common
//!   functions over fixed-width keys and number columns, in a
//!   radix-partitioned hash table folded by several threads;
//! - [`aggregate_delimited`]: delimited text records (CSV-like lines) into
//!   an aggregator, values read as what they look like ([`parse_value`]);
//! - [`format`](mod@format): the decoders of the byte formats, for fuzzing.
//!
//! The state formats, the tree's algorithm, its invariants and costs are in
//! the crate's [DESIGN.md](../DESIGN.md).

mod admission;
mod aggregator;
mod cbt;
mod clock;
mod delimited;
pub mod format;
mod function;
mod hash;
mod ingest;
mod typed;
mod value;

pub use admission::{key_text, Admission, KEY_BYTES_MAX};
pub use aggregator::{Aggregator, AggregatorOptions, AggregatorStats, Engine, Results, THREADS_MAX};
pub use cbt::{CbtIter, CbtOptions, CbtStats, CompressedBufferTree, ParallelCbt, ROOT_BUFFERS};
pub use delimited::{
    aggregate_delimited, aggregate_delimited_columns, parse_delimiter, parse_value, ColumnsOptions,
    DelimitedOptions, ValueType, COLUMNS_BATCH_LINES, INTERRUPT_CHECK_RECORDS,
};
pub use function::{
    function, Aggregate, AggregateFunction, ApproxDistinct, CollectList, CollectSet, Composite, Count,
    Extreme, Input, Moment, Moments, Positional, Sum, Takes, TopK, FUNCTION_NAMES, PRECISION_DEFAULT,
    PRECISION_MAX, PRECISION_MIN, TOP_K_MAX,
};
pub use hash::{HashAggregator, HashStats};
pub use typed::{
    parse_functions, KeyColumn, KeyType, Keys, NumberType, ResultColumn, TypedFunction, TypedHashAggregator,
    TypedHashStats, TypedResults, Values, FUNCTIONS_MAX, PARTITIONS, SMALL_GROUPS, SMALL_STRING_GROUPS,
};
pub use value::{Comparable, Output, Scalar, Value};
