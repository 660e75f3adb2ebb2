//! `approx_distinct(P)`: the number of distinct values, estimated with a
//! HyperLogLog sketch of 2^P registers (Flajolet et al. 2007, with linear
//! counting for small cardinalities).
//!
//! The relative standard error is 1.04 / sqrt(2^P): 0.81% at the default
//! P = 14, 1.6% at P = 12, 3.25% at P = 10. A key with few distinct values
//! keeps a sparse list of (register, rank) pairs instead of all 2^P
//! registers, so small groups stay small; the list turns dense once it would
//! take more than a quarter of the registers' bytes. The estimate depends
//! only on the registers, so it is the same whichever representation and
//! merge order led to them.

use spillway_core::{ensure, hash64, varint, DecodeError, Result};

use super::{Aggregate, Input, Takes};
use crate::value::{expect_end, Output, Value};

/// The smallest precision accepted.
pub const PRECISION_MIN: u8 = 4;
/// The largest precision accepted (256 KiB of registers per key).
pub const PRECISION_MAX: u8 = 18;
/// The precision when none is given.
pub const PRECISION_DEFAULT: u8 = 14;

/// Approximate count of distinct values.
#[derive(Debug, Clone, Copy)]
pub struct ApproxDistinct {
    precision: u8,
}

/// The state of [`ApproxDistinct`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Sketch {
    /// Registers that are not zero, as `register << 8 | rank`, sorted by
    /// register, one entry per register.
    Sparse(Vec<u32>),
    /// Every register's rank.
    Dense(Vec<u8>),
}

const SPARSE: u8 = 0;
const DENSE: u8 = 1;

impl ApproxDistinct {
    /// A sketch of 2^`precision` registers.
    pub fn new(precision: u64) -> Result<Self> {
        ensure!(
            (u64::from(PRECISION_MIN)..=u64::from(PRECISION_MAX)).contains(&precision),
            InvalidArgument,
            "approx_distinct: the precision must be from {PRECISION_MIN} to {PRECISION_MAX}, got {precision}"
        );
        Ok(ApproxDistinct {
            precision: precision as u8,
        })
    }

    fn registers(&self) -> usize {
        1 << self.precision
    }

    /// The register a hash goes to and its rank there: one more than the
    /// number of leading zeros of the bits after the register's.
    fn place(&self, hash: u64) -> u32 {
        let register = (hash >> (64 - self.precision)) as u32;
        let rank = ((hash << self.precision).leading_zeros() + 1).min(65 - u32::from(self.precision));
        register << 8 | rank
    }

    /// Applies sparse entries to dense registers.
    fn apply(registers: &mut [u8], entries: &[u32]) {
        for &entry in entries {
            let register = &mut registers[(entry >> 8) as usize];
            *register = (*register).max(entry as u8);
        }
    }

    fn densify(&self, entries: &[u32]) -> Vec<u8> {
        let mut registers = vec![0u8; self.registers()];
        Self::apply(&mut registers, entries);
        registers
    }

    /// The most sparse entries before a sketch turns dense.
    fn sparse_max(&self) -> usize {
        self.registers() / 4
    }
}

impl Aggregate for ApproxDistinct {
    type State = Sketch;

    fn name(&self) -> String {
        format!("approx_distinct({})", self.precision)
    }

    fn init(&self, input: Input<'_>) -> Result<Sketch> {
        // The value's encoding is hashed, so 1 and "1" are distinct.
        let mut encoded = Vec::with_capacity(16);
        input.value.to_scalar(&self.name())?.encode(&mut encoded);
        Ok(Sketch::Sparse(vec![self.place(hash64(&encoded))]))
    }

    fn merge(&self, into: &mut Sketch, other: Sketch) -> Result<()> {
        match (&mut *into, other) {
            (Sketch::Dense(registers), Sketch::Dense(others)) => {
                for (register, other) in registers.iter_mut().zip(others) {
                    *register = (*register).max(other);
                }
            }
            (Sketch::Dense(registers), Sketch::Sparse(entries)) => Self::apply(registers, &entries),
            (Sketch::Sparse(entries), Sketch::Dense(mut registers)) => {
                Self::apply(&mut registers, entries);
                *into = Sketch::Dense(registers);
            }
            (Sketch::Sparse(entries), Sketch::Sparse(others)) => {
                let merged = merge_entries(entries, &others);
                *into = if merged.len() > self.sparse_max() {
                    Sketch::Dense(self.densify(&merged))
                } else {
                    Sketch::Sparse(merged)
                };
            }
        }
        Ok(())
    }

    fn serialize(&self, state: &Sketch, out: &mut Vec<u8>) {
        match state {
            Sketch::Sparse(entries) => {
                out.push(SPARSE);
                varint::encode_u64(entries.len() as u64, out);
                let mut previous = 0;
                for &entry in entries {
                    varint::encode_u32((entry >> 8) - previous, out);
                    out.push(entry as u8);
                    previous = entry >> 8;
                }
            }
            Sketch::Dense(registers) => {
                out.push(DENSE);
                out.extend_from_slice(registers);
            }
        }
    }

    fn deserialize(&self, bytes: &[u8]) -> Result<Sketch, DecodeError> {
        let Some((&tag, rest)) = bytes.split_first() else {
            return Err(DecodeError::new("a sketch is empty"));
        };
        let rank_max = 65 - self.precision;
        match tag {
            SPARSE => {
                let (count, mut used) = varint::decode_u64(rest)?;
                if count > self.sparse_max() as u64 {
                    return Err(DecodeError::new(format!("a sparse sketch of {count} entries")));
                }
                let mut entries = Vec::with_capacity(count as usize);
                let mut register = 0u32;
                for index in 0..count {
                    let (delta, length) = varint::decode_u32(&rest[used..])?;
                    let rank = *rest
                        .get(used + length)
                        .ok_or_else(|| DecodeError::new("a sparse sketch is cut short"))?;
                    register = register
                        .checked_add(delta)
                        .filter(|&register| (register as usize) < self.registers())
                        .filter(|_| index == 0 || delta > 0)
                        .ok_or_else(|| DecodeError::new("a sparse sketch's registers are out of order"))?;
                    if rank == 0 || rank > rank_max {
                        return Err(DecodeError::new(format!("a rank of {rank}")));
                    }
                    entries.push(register << 8 | u32::from(rank));
                    used += length + 1;
                }
                expect_end(rest, used)?;
                Ok(Sketch::Sparse(entries))
            }
            DENSE => {
                expect_end(rest, self.registers())?;
                if rest.iter().any(|&rank| rank > rank_max) {
                    return Err(DecodeError::new("a register's rank is too large"));
                }
                Ok(Sketch::Dense(rest.to_vec()))
            }
            other => Err(DecodeError::new(format!("unknown sketch kind {other}"))),
        }
    }

    fn finalize(&self, state: Sketch) -> Result<Output> {
        let registers = match state {
            Sketch::Dense(registers) => registers,
            Sketch::Sparse(entries) => self.densify(&entries),
        };
        let m = registers.len() as f64;
        let alpha = match registers.len() {
            16 => 0.673,
            32 => 0.697,
            64 => 0.709,
            _ => 0.7213 / (1.0 + 1.079 / m),
        };
        let harmonic: f64 = registers.iter().map(|&rank| (-f64::from(rank)).exp2()).sum();
        let zeros = registers.iter().filter(|&&rank| rank == 0).count();
        let mut estimate = alpha * m * m / harmonic;
        if estimate <= 2.5 * m && zeros > 0 {
            estimate = m * (m / zeros as f64).ln();
        }
        Ok(Output::Int(estimate.round() as i64))
    }

    fn check_value(&self, value: Value<'_>) -> Result<()> {
        value.check_named(|| self.name())
    }

    fn takes(&self) -> Takes {
        Takes::Anything
    }
}

/// The union of two sparse lists, keeping each register's highest rank.
fn merge_entries(left: &[u32], right: &[u32]) -> Vec<u32> {
    let mut merged = Vec::with_capacity(left.len() + right.len());
    let (mut i, mut j) = (0, 0);
    while i < left.len() && j < right.len() {
        let (a, b) = (left[i], right[j]);
        match (a >> 8).cmp(&(b >> 8)) {
            std::cmp::Ordering::Less => {
                merged.push(a);
                i += 1;
            }
            std::cmp::Ordering::Greater => {
                merged.push(b);
                j += 1;
            }
            std::cmp::Ordering::Equal => {
                merged.push(a.max(b));
                i += 1;
                j += 1;
            }
        }
    }
    merged.extend_from_slice(&left[i..]);
    merged.extend_from_slice(&right[j..]);
    merged
}
