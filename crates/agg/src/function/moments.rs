//! `mean`, `variance`, `variance_pop`, `stddev` and `stddev_pop` from one
//! mergeable state: count, mean and the sum of squared deviations (M2).
//!
//! Merging uses Chan, Golub and LeVeque's pairwise update, which, unlike
//! sums of x and x², does not cancel catastrophically when the mean is large
//! against the spread.

use spillway_core::{bail, DecodeError, Result};

use super::{Aggregate, Input, Takes};
use crate::value::{expect_end, read_f64, read_u64, Output};

/// Which statistic [`Moments`] finalizes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Moment {
    /// The arithmetic mean.
    Mean,
    /// The sample variance (divided by n - 1; null for one value).
    Variance,
    /// The population variance (divided by n).
    VariancePop,
    /// The sample standard deviation.
    Stddev,
    /// The population standard deviation.
    StddevPop,
}

/// Mean, variance or standard deviation of numbers.
#[derive(Debug, Clone, Copy)]
pub struct Moments(pub Moment);

/// The state of [`Moments`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MomentsState {
    pub(crate) count: u64,
    pub(crate) mean: f64,
    pub(crate) m2: f64,
}

impl MomentsState {
    /// Folds one value in: the state a merge with the value's own state
    /// (count 1, the value as mean, M2 0) gives, bit for bit, from a state
    /// of any count, 0 included.
    pub(crate) fn push(&mut self, value: f64) {
        let one = MomentsState {
            count: 1,
            mean: value,
            m2: 0.0,
        };
        if self.count == 0 {
            *self = one;
        } else {
            self.absorb(one, self.count + 1);
        }
    }

    /// Chan, Golub and LeVeque's pairwise update with `other`, `count`
    /// being the two counts' sum.
    fn absorb(&mut self, other: MomentsState, count: u64) {
        let (a, b, n) = (self.count as f64, other.count as f64, count as f64);
        let delta = other.mean - self.mean;
        if delta.is_finite() {
            self.mean += delta * b / n;
        } else {
            // Means of opposite signs near the float range: their
            // difference overflows, a weighted average of them does not.
            self.mean = self.mean * (a / n) + other.mean * (b / n);
        }
        // M2 overflows only when the spread itself passes the float range;
        // finalize reports that for the statistics that need M2.
        self.m2 += other.m2 + delta * delta * a * b / n;
        self.count = count;
    }
}

const STATE_BYTES: usize = 24;

impl Aggregate for Moments {
    type State = MomentsState;

    fn name(&self) -> String {
        match self.0 {
            Moment::Mean => "mean",
            Moment::Variance => "variance",
            Moment::VariancePop => "variance_pop",
            Moment::Stddev => "stddev",
            Moment::StddevPop => "stddev_pop",
        }
        .into()
    }

    fn init(&self, input: Input<'_>) -> Result<MomentsState> {
        let value = input
            .value
            .to_scalar(&self.name())?
            .as_value()
            .number(&self.name())?;
        Ok(MomentsState {
            count: 1,
            mean: value,
            m2: 0.0,
        })
    }

    fn merge(&self, into: &mut MomentsState, other: MomentsState) -> Result<()> {
        let Some(count) = into.count.checked_add(other.count) else {
            bail!(
                InvalidArgument,
                "{}: more values than a 64-bit count holds",
                self.name()
            );
        };
        into.absorb(other, count);
        Ok(())
    }

    fn serialize(&self, state: &MomentsState, out: &mut Vec<u8>) {
        out.extend_from_slice(&state.count.to_le_bytes());
        out.extend_from_slice(&state.mean.to_le_bytes());
        out.extend_from_slice(&state.m2.to_le_bytes());
    }

    fn deserialize(&self, bytes: &[u8]) -> Result<MomentsState, DecodeError> {
        expect_end(bytes, STATE_BYTES)?;
        let count = read_u64(bytes, "a count")?;
        if count == 0 {
            return Err(DecodeError::new("moments over no values"));
        }
        Ok(MomentsState {
            count,
            mean: read_f64(&bytes[8..], "a mean")?,
            m2: read_f64(&bytes[16..], "a sum of squares")?,
        })
    }

    fn takes(&self) -> Takes {
        Takes::Numbers
    }

    fn finalize(&self, state: MomentsState) -> Result<Output> {
        let spread_needed = self.0 != Moment::Mean;
        if !state.mean.is_finite() || (spread_needed && !state.m2.is_finite()) {
            bail!(
                InvalidArgument,
                "{}: the values' {} passes the range of a 64-bit float (about ±1.8e308)",
                self.name(),
                if state.mean.is_finite() { "spread" } else { "mean" }
            );
        }
        let n = state.count as f64;
        // Rounding can leave M2 a hair below zero for equal values.
        let m2 = state.m2.max(0.0);
        let sample = |value: f64| {
            if state.count < 2 {
                Output::Null
            } else {
                Output::Float(value)
            }
        };
        Ok(match self.0 {
            Moment::Mean => Output::Float(state.mean),
            Moment::Variance => sample(m2 / (n - 1.0)),
            Moment::VariancePop => Output::Float(m2 / n),
            Moment::Stddev => sample((m2 / (n - 1.0)).sqrt()),
            Moment::StddevPop => Output::Float((m2 / n).sqrt()),
        })
    }
}
