//! The typed, vectorized path of GroupBy-Aggregate (DESIGN.md §4, "Speed
//! comes from types"): keys and values arrive as columns of one type,
//! hashes are computed a batch at a time, and each function's state is a
//! fixed number of 64-bit words in its key's row, updated by one loop per
//! function over a run of rows, with no dynamic call and no serialization
//! per record.
//!
//! It covers the common functions ([`TypedFunction`]: count, sum, min,
//! max, mean, variance and standard deviation, several at once) over
//! fixed-width keys ([`Keys`]: i64, u64, f64), byte strings or several
//! key columns at once, and i64 or f64 values ([`Values`]), one column
//! for every function or one per function. Its results equal the byte-level functions' over the same
//! pairs (tested), since the states follow the same rules: exact 128-bit
//! integer sums, Neumaier-compensated float sums, moments merged with
//! Chan's formula, values refused where the byte path refuses them.
//!
//! - [`functions`](mod@functions): the typed functions, their state words,
//!   their update loops and their results;
//! - [`table`]: one partition's open-addressing table of rows;
//! - [`composite`]: several key columns encoded as one byte string a row;
//! - [`results`]: results as columns, a key column each;
//! - [`engine`]: [`TypedHashAggregator`], the radix-partitioned hash
//!   engine whose threads each own a range of partitions.

mod composite;
mod engine;
mod functions;
mod results;
mod table;

pub use engine::{TypedHashAggregator, TypedHashStats, PARTITIONS, SMALL_GROUPS, SMALL_STRING_GROUPS};
pub use functions::{ResultColumn, TypedFunction};
pub use results::{KeyColumn, TypedResults};

use spillway_core::{bail, Result};

/// The type of an aggregator's keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyType {
    /// Signed 64-bit integers.
    I64,
    /// Unsigned 64-bit integers.
    U64,
    /// 64-bit floats (NaN refused; -0.0 groups with 0.0).
    F64,
    /// Byte strings (text as its UTF-8), up to
    /// [`KEY_BYTES_MAX`](crate::KEY_BYTES_MAX) bytes each.
    Bytes,
}

/// The type of an aggregator's values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NumberType {
    /// Signed 64-bit integers.
    Int,
    /// Finite 64-bit floats.
    Float,
}

/// A column of keys.
#[derive(Debug, Clone, Copy)]
pub enum Keys<'a> {
    /// Signed 64-bit integer keys.
    I64(&'a [i64]),
    /// Unsigned 64-bit integer keys.
    U64(&'a [u64]),
    /// Float keys.
    F64(&'a [f64]),
    /// Byte-string keys as Arrow lays them out: key i is
    /// `data[offsets[i]..offsets[i + 1]]`, so n keys have n + 1 offsets
    /// (which need not start at 0).
    Bytes {
        /// Where each key starts, and the end of the last.
        offsets: &'a [u64],
        /// The keys' bytes.
        data: &'a [u8],
    },
}

impl<'a> Keys<'a> {
    /// The number of keys.
    pub fn len(&self) -> usize {
        match self {
            Keys::I64(keys) => keys.len(),
            Keys::U64(keys) => keys.len(),
            Keys::F64(keys) => keys.len(),
            Keys::Bytes { offsets, .. } => offsets.len().saturating_sub(1),
        }
    }

    /// Whether the column is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The column's type.
    pub fn key_type(&self) -> KeyType {
        match self {
            Keys::I64(_) => KeyType::I64,
            Keys::U64(_) => KeyType::U64,
            Keys::F64(_) => KeyType::F64,
            Keys::Bytes { .. } => KeyType::Bytes,
        }
    }

    /// Byte-string key `index` (offsets checked by the engine first).
    #[inline]
    fn string(&self, index: usize) -> &'a [u8] {
        match *self {
            Keys::Bytes { offsets, data } => &data[offsets[index] as usize..offsets[index + 1] as usize],
            _ => unreachable!("a fixed-width key column has no byte strings"),
        }
    }

    /// Fixed-width key `index` as the word rows hold: integers as their
    /// bits, floats as their bits with -0.0 made 0.0 (NaN is refused
    /// before this).
    fn word(&self, index: usize) -> u64 {
        match self {
            Keys::I64(keys) => keys[index] as u64,
            Keys::U64(keys) => keys[index],
            Keys::F64(keys) => float_key_word(keys[index]),
            Keys::Bytes { .. } => unreachable!("a byte-string key has no word"),
        }
    }

    /// Key `index` as text for an error message.
    fn text(&self, index: usize) -> String {
        match self {
            Keys::I64(keys) => keys[index].to_string(),
            Keys::U64(keys) => keys[index].to_string(),
            Keys::F64(keys) => keys[index].to_string(),
            // Offsets may be what the message is about: show none.
            Keys::Bytes { offsets, data } => match (offsets.get(index), offsets.get(index + 1)) {
                (Some(&start), Some(&end)) if start <= end && end as usize <= data.len() => {
                    crate::key_text(&data[start as usize..end as usize])
                }
                _ => format!("number {index}"),
            },
        }
    }
}

/// An empty vector with room for `capacity` items, its pages asked to
/// be huge: result columns of millions of groups are written once, and a
/// fault per 4 KiB page cost more than the writing.
fn huge_vec<T>(capacity: usize) -> Vec<T> {
    let mut vec = Vec::with_capacity(capacity);
    spillway_core::memory::advise_huge_pages(&mut vec);
    vec
}

/// A float key's word: equal floats (0.0 and -0.0) give equal words.
fn float_key_word(key: f64) -> u64 {
    if key == 0.0 {
        0
    } else {
        key.to_bits()
    }
}

impl KeyType {
    /// A row's key word as text, for an error message (not for
    /// byte-string keys, whose rows hold a hash).
    fn text(self, word: u64) -> String {
        match self {
            KeyType::I64 => (word as i64).to_string(),
            KeyType::U64 => word.to_string(),
            KeyType::F64 => f64::from_bits(word).to_string(),
            KeyType::Bytes => unreachable!("a byte-string key's text comes from its bytes"),
        }
    }

    /// The name users write, for messages.
    pub fn name(self) -> &'static str {
        match self {
            KeyType::I64 => "int64",
            KeyType::U64 => "uint64",
            KeyType::F64 => "float64",
            KeyType::Bytes => "binary",
        }
    }
}

/// A column of values.
#[derive(Debug, Clone, Copy)]
pub enum Values<'a> {
    /// Integer values.
    Int(&'a [i64]),
    /// Float values; every one must be finite.
    Float(&'a [f64]),
}

impl Values<'_> {
    /// The number of values.
    pub fn len(&self) -> usize {
        match self {
            Values::Int(values) => values.len(),
            Values::Float(values) => values.len(),
        }
    }

    /// Whether the column is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The column's type.
    pub fn number_type(&self) -> NumberType {
        match self {
            Values::Int(_) => NumberType::Int,
            Values::Float(_) => NumberType::Float,
        }
    }
}

impl NumberType {
    /// The name users write, for messages.
    pub fn name(self) -> &'static str {
        match self {
            NumberType::Int => "int64",
            NumberType::Float => "float64",
        }
    }
}

/// The typed functions of a spec such as `sum+count` (the byte path's
/// composite syntax), or an error naming the part that has no typed form.
pub fn parse_functions(spec: &str) -> Result<Vec<TypedFunction>> {
    let parts: Vec<&str> = spec.split('+').map(str::trim).collect();
    if parts.len() > FUNCTIONS_MAX {
        bail!(
            InvalidArgument,
            "'{spec}' names {} functions; the typed path takes at most {FUNCTIONS_MAX}",
            parts.len()
        );
    }
    parts
        .into_iter()
        .map(|name| {
            TypedFunction::from_name(name).ok_or_else(|| {
                spillway_core::Error::InvalidArgument(format!(
                    "'{name}' has no typed form; the typed path computes {}",
                    TypedFunction::NAMES.join(", ")
                ))
            })
        })
        .collect()
}

/// The most functions one aggregator computes, as the byte path's
/// composite allows.
pub const FUNCTIONS_MAX: usize = 16;
