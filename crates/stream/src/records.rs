//! Records in flat columns, and what a query computes over them.

use std::ops::Range;

/// Records sorted by (key, time, sequence number) in flat columns: how a
/// segment's leaves are decoded, and what a range query returns. Flat
/// columns keep a scan cache-friendly and hand over to NumPy without a
/// per-record object.
///
/// The columns are public to read; the engine changes them only through
/// these methods, which keep track of the values' widths.
#[derive(Debug, Default, Clone)]
pub struct Records {
    /// Encoded keys (see [`crate::key`]).
    pub keys: Vec<u64>,
    /// Timestamps.
    pub times: Vec<u64>,
    /// Sequence numbers: the order in which the records were written.
    pub seqs: Vec<u64>,
    /// `values[value_ends[i - 1]..value_ends[i]]` is record `i`'s value.
    pub value_ends: Vec<u64>,
    /// The values, back to back.
    pub values: Vec<u8>,
    /// Whether every value has one width: lets a merge copy values as
    /// fixed-size words without reading their ends (a pass over cold
    /// memory).
    widths: Widths,
}

/// Columns of records whose values are all `WIDTH` bytes long, to be
/// filled: see [`Records::overwrite_fixed`].
#[derive(Debug)]
pub(crate) struct FixedMut<'a, const WIDTH: usize> {
    pub keys: &'a mut [u64],
    pub times: &'a mut [u64],
    pub seqs: &'a mut [u64],
    pub values: &'a mut [[u8; WIDTH]],
}

impl<'a, const WIDTH: usize> FixedMut<'a, WIDTH> {
    /// Each record's key, time, sequence number and value, in order, to
    /// write in one pass.
    pub fn slots(&mut self) -> impl Iterator<Item = (&mut u64, &mut u64, &mut u64, &mut [u8; WIDTH])> {
        (self.keys.iter_mut())
            .zip(self.times.iter_mut())
            .zip(self.seqs.iter_mut())
            .zip(self.values.iter_mut())
            .map(|(((key, time), seq), value)| (key, time, seq, value))
    }

    /// The first `mid` records' columns and the rest's.
    pub fn split_at(self, mid: usize) -> (Self, Self) {
        let (keys, keys_rest) = self.keys.split_at_mut(mid);
        let (times, times_rest) = self.times.split_at_mut(mid);
        let (seqs, seqs_rest) = self.seqs.split_at_mut(mid);
        let (values, values_rest) = self.values.split_at_mut(mid);
        (
            FixedMut {
                keys,
                times,
                seqs,
                values,
            },
            FixedMut {
                keys: keys_rest,
                times: times_rest,
                seqs: seqs_rest,
                values: values_rest,
            },
        )
    }
}

/// What is known of the widths of a [`Records`]' values.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum Widths {
    /// No values.
    #[default]
    None,
    /// Every value is this many bytes long.
    One(usize),
    /// Values of several widths, or values not known to share one.
    Mixed,
}

impl Widths {
    /// The widths of two sets of values together.
    fn and(self, other: Widths) -> Widths {
        match (self, other) {
            (Widths::None, widths) | (widths, Widths::None) => widths,
            (Widths::One(a), Widths::One(b)) if a == b => Widths::One(a),
            _ => Widths::Mixed,
        }
    }
}

/// Equal records: equal columns (what is known of their widths aside).
impl PartialEq for Records {
    fn eq(&self, other: &Records) -> bool {
        self.keys == other.keys
            && self.times == other.times
            && self.seqs == other.seqs
            && self.value_ends == other.value_ends
            && self.values == other.values
    }
}

impl Records {
    /// Room for `records` records and `value_bytes` bytes of values.
    pub fn with_capacity(records: usize, value_bytes: usize) -> Self {
        Records {
            keys: Vec::with_capacity(records),
            times: Vec::with_capacity(records),
            seqs: Vec::with_capacity(records),
            value_ends: Vec::with_capacity(records),
            values: Vec::with_capacity(value_bytes),
            widths: Widths::None,
        }
    }

    /// Makes room for `records` more records and `value_bytes` more bytes
    /// of values.
    pub fn reserve(&mut self, records: usize, value_bytes: usize) {
        self.keys.reserve(records);
        self.times.reserve(records);
        self.seqs.reserve(records);
        self.value_ends.reserve(records);
        self.values.reserve(value_bytes);
    }

    /// Records held.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// Record `i`'s value.
    #[inline]
    pub fn value(&self, i: usize) -> &[u8] {
        &self.values[self.value_start(i)..self.value_start(i + 1)]
    }

    /// Record `i`'s value as a number (a little-endian float64), or an
    /// error naming the record if its value is not 8 bytes.
    pub fn number(&self, i: usize) -> spillway_core::Result<f64> {
        let value = self.value(i);
        Aggregate::number(value).ok_or_else(|| {
            spillway_core::Error::InvalidArgument(format!(
                "record {i} (key {}, time {}) has a {}-byte value, not an 8-byte number; read its \
                 value as bytes",
                self.keys[i],
                self.times[i],
                value.len()
            ))
        })
    }

    /// Where record `i`'s value starts in `values` (for `i == len()`, the
    /// end of the last one).
    #[inline]
    pub(crate) fn value_start(&self, i: usize) -> usize {
        match i {
            0 => 0,
            _ => self.value_ends[i - 1] as usize,
        }
    }

    /// Appends a record.
    #[inline]
    pub fn push(&mut self, key: u64, time: u64, seq: u64, value: &[u8]) {
        self.keys.push(key);
        self.times.push(time);
        self.seqs.push(seq);
        self.push_value(value);
    }

    /// Appends a value (the record's other columns are pushed apart).
    #[inline]
    pub(crate) fn push_value(&mut self, value: &[u8]) {
        // An 8-byte value (a number) is copied as one word, not by a call
        // to `memcpy`: most values are numbers, and queries copy them all.
        match <&[u8; 8]>::try_from(value) {
            Ok(word) => self.values.extend_from_slice(word),
            Err(_) => self.values.extend_from_slice(value),
        }
        self.value_ends.push(self.values.len() as u64);
        self.widths = self.widths.and(Widths::One(value.len()));
    }

    /// The width of every value, if they are known to share one (and
    /// there is at least one). Answered without reading the values.
    #[inline]
    pub(crate) fn fixed_width(&self) -> Option<usize> {
        match self.widths {
            Widths::One(width) => Some(width),
            Widths::None | Widths::Mixed => None,
        }
    }

    /// Appends `count` records with values of `WIDTH` bytes, zeroed, and
    /// returns their columns to fill (their value ends are written).
    pub(crate) fn push_fixed<const WIDTH: usize>(&mut self, count: usize) -> FixedMut<'_, WIDTH> {
        let (start, base) = (self.len(), self.values.len());
        self.keys.resize(start + count, 0);
        self.times.resize(start + count, 0);
        self.seqs.resize(start + count, 0);
        self.values.resize(base + count * WIDTH, 0);
        self.value_ends
            .extend((1..=count).map(|i| (base + i * WIDTH) as u64));
        if count > 0 {
            self.widths = self.widths.and(Widths::One(WIDTH));
        }
        FixedMut {
            keys: &mut self.keys[start..],
            times: &mut self.times[start..],
            seqs: &mut self.seqs[start..],
            values: self.values[base..].as_chunks_mut().0,
        }
    }

    /// Makes these `count` records with values of `WIDTH` bytes, to be
    /// overwritten, and returns their columns to fill: the caller writes
    /// every record. What the columns held is left in place rather than
    /// zeroed (a query that reuses its last result spares a pass over it),
    /// and the value ends are written.
    pub(crate) fn overwrite_fixed<const WIDTH: usize>(&mut self, count: usize) -> FixedMut<'_, WIDTH> {
        // Values that all had this width had these ends already.
        let ends_kept = match self.widths {
            Widths::One(width) if width == WIDTH => self.len().min(count),
            _ => 0,
        };
        self.keys.resize(count, 0);
        self.times.resize(count, 0);
        self.seqs.resize(count, 0);
        self.values.resize(count * WIDTH, 0);
        self.value_ends.truncate(ends_kept);
        self.value_ends
            .extend((ends_kept + 1..=count).map(|i| (i * WIDTH) as u64));
        self.widths = if count > 0 {
            Widths::One(WIDTH)
        } else {
            Widths::None
        };
        FixedMut {
            keys: &mut self.keys,
            times: &mut self.times,
            seqs: &mut self.seqs,
            values: self.values.as_chunks_mut().0,
        }
    }

    /// Appends every record of `other`.
    pub fn append(&mut self, other: &Records) {
        self.extend_from(other, 0..other.len());
    }

    /// Appends records `rows` of `other`, a column at a time.
    pub fn extend_from(&mut self, other: &Records, rows: Range<usize>) {
        self.keys.extend_from_slice(&other.keys[rows.clone()]);
        self.times.extend_from_slice(&other.times[rows.clone()]);
        self.seqs.extend_from_slice(&other.seqs[rows.clone()]);
        self.extend_values_from(other, rows);
    }

    /// Appends the values of records `rows` of `other` (their other
    /// columns are appended apart): one copy of their bytes, and their
    /// ends moved to where the bytes land.
    pub(crate) fn extend_values_from(&mut self, other: &Records, rows: Range<usize>) {
        if !rows.is_empty() {
            self.widths = self.widths.and(other.widths);
        }
        let (start, end) = (other.value_start(rows.start), other.value_start(rows.end));
        let base = self.values.len() as u64;
        self.value_ends.extend(
            other.value_ends[rows]
                .iter()
                .map(|&value_end| base + value_end - start as u64),
        );
        self.values.extend_from_slice(&other.values[start..end]);
    }

    /// Appends record `i` of `other`.
    #[inline]
    pub fn push_from(&mut self, other: &Records, i: usize) {
        self.push(other.keys[i], other.times[i], other.seqs[i], other.value(i));
    }

    /// Removes every record, keeping the allocations.
    pub fn clear(&mut self) {
        self.keys.clear();
        self.times.clear();
        self.seqs.clear();
        self.value_ends.clear();
        self.values.clear();
        self.widths = Widths::None;
    }

    /// Bytes the columns hold (for the cache's budget).
    pub fn heap_bytes(&self) -> usize {
        self.keys.len() * 32 + self.values.len()
    }

    /// The records' order: (key, time, sequence number).
    #[inline]
    pub(crate) fn order(&self, i: usize) -> (u64, u64, u64) {
        (self.keys[i], self.times[i], self.seqs[i])
    }
}

/// Marks every record with the same key and time and a lower sequence
/// number as dead: what an update (which also writes its new record) or
/// a delete leaves behind it. Newest wins.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Shadow {
    /// The key of the records replaced.
    pub key: u64,
    /// Their time.
    pub time: u64,
    /// The sequence number of the update or delete.
    pub seq: u64,
}

/// Count, sum, min and max: a range aggregate, or a leaf's summary.
///
/// `count` counts every live record; the others count only values that
/// are numbers, which is a value of exactly 8 bytes read as a
/// little-endian `f64` (how `append_batch` stores a NumPy float array).
/// Numbers are finite: writes refuse an 8-byte value that reads as NaN or
/// an infinity (see [`Aggregate::check_number`]).
///
/// The sum is kept in two parts, so that no partial sum overflows (two
/// leaves whose sums overflowed to `+inf` and `-inf` once made a NaN):
/// numbers of magnitude below 2^960 are added as they are, larger ones
/// scaled down by 2^-128. Neither part can overflow (it would take more
/// than 2^64 numbers), so [`Aggregate::sum`] is infinite only when the
/// total itself lies beyond the range of an `f64`, and never NaN.
///
/// Serialized as `count`, `numeric`, `sum`, `min` and `max`: `min` and
/// `max` null when no value is a number, and a sum beyond a float64's
/// range, which JSON cannot write as a number, as the text `"inf"` or
/// `"-inf"`.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
#[serde(into = "AggregateReport")]
pub struct Aggregate {
    /// Live records.
    pub count: u64,
    /// Records whose value is a number.
    pub numeric: u64,
    /// Least number (`+inf` when there is none).
    pub min: f64,
    /// Greatest number (`-inf` when there is none).
    pub max: f64,
    /// The sum of the numbers of magnitude below 2^960.
    pub(crate) sum_small: f64,
    /// The sum of the others, each times 2^-128.
    pub(crate) sum_large: f64,
}

/// [`Aggregate`] as it is serialized.
#[derive(serde::Serialize)]
struct AggregateReport {
    count: u64,
    numeric: u64,
    sum: Sum,
    min: Option<f64>,
    max: Option<f64>,
}

/// A sum: a number, or the text of an infinity.
#[derive(serde::Serialize)]
#[serde(untagged)]
enum Sum {
    Number(f64),
    Infinite(&'static str),
}

impl From<Aggregate> for AggregateReport {
    fn from(aggregate: Aggregate) -> Self {
        let number = |value: f64| (aggregate.numeric > 0).then_some(value);
        let sum = aggregate.sum();
        AggregateReport {
            count: aggregate.count,
            numeric: aggregate.numeric,
            sum: match sum {
                sum if sum.is_finite() => Sum::Number(sum),
                sum if sum > 0.0 => Sum::Infinite("inf"),
                _ => Sum::Infinite("-inf"),
            },
            min: number(aggregate.min),
            max: number(aggregate.max),
        }
    }
}

/// Numbers of this magnitude or more are summed apart, scaled: 2^960.
const LARGE: f64 = f64::from_bits((1023 + 960) << 52);
/// 2^-128 and 2^128: how large numbers are scaled while summed.
const SCALE_DOWN: f64 = f64::from_bits((1023 - 128) << 52);
const SCALE_UP: f64 = f64::from_bits((1023 + 128) << 52);

impl Default for Aggregate {
    fn default() -> Self {
        Aggregate {
            count: 0,
            numeric: 0,
            min: f64::INFINITY,
            max: f64::NEG_INFINITY,
            sum_small: 0.0,
            sum_large: 0.0,
        }
    }
}

impl Aggregate {
    /// The number a value stands for, if it is one.
    pub fn number(value: &[u8]) -> Option<f64> {
        let bytes: [u8; 8] = value.try_into().ok()?;
        Some(f64::from_le_bytes(bytes))
    }

    /// Whether `value` may be written: any value but an 8-byte one that
    /// reads as NaN or an infinity (a number must be finite, so that
    /// every aggregate is a number). Returns the number it refuses.
    #[inline]
    pub fn check_number(value: &[u8]) -> Result<(), f64> {
        match Self::number(value) {
            Some(number) if !number.is_finite() => Err(number),
            _ => Ok(()),
        }
    }

    /// Counts one record with `value`.
    #[inline]
    pub fn add(&mut self, value: &[u8]) {
        self.count += 1;
        if let Some(number) = Self::number(value) {
            self.numeric += 1;
            if number.abs() < LARGE {
                self.sum_small += number;
            } else {
                self.sum_large += number * SCALE_DOWN;
            }
            self.min = self.min.min(number);
            self.max = self.max.max(number);
        }
    }

    /// Folds `other` in.
    pub fn combine(&mut self, other: &Aggregate) {
        self.count += other.count;
        self.numeric += other.numeric;
        self.sum_small += other.sum_small;
        self.sum_large += other.sum_large;
        self.min = self.min.min(other.min);
        self.max = self.max.max(other.max);
    }

    /// The sum of the numbers (0 when there are none): `+inf` or `-inf`
    /// only when the total lies beyond the range of an `f64`, never NaN.
    pub fn sum(&self) -> f64 {
        if self.sum_large == 0.0 {
            self.sum_small
        } else {
            (self.sum_large + self.sum_small * SCALE_DOWN) * SCALE_UP
        }
    }

    /// The two parts of the sum, as a segment stores them.
    pub(crate) fn sum_parts(&self) -> [f64; 2] {
        [self.sum_small, self.sum_large]
    }
}

/// A key range and a time range, both inclusive: what a query selects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    /// Lowest key.
    pub key_low: u64,
    /// Highest key.
    pub key_high: u64,
    /// Earliest time.
    pub time_low: u64,
    /// Latest time.
    pub time_high: u64,
}

impl Bounds {
    /// Keys `key_low..=key_high` at any time.
    pub fn keys(key_low: u64, key_high: u64) -> Self {
        Bounds {
            key_low,
            key_high,
            time_low: 0,
            time_high: u64::MAX,
        }
    }

    /// Also restricts the times to `time_low..=time_high`.
    pub fn times(self, time_low: u64, time_high: u64) -> Self {
        Bounds {
            time_low,
            time_high,
            ..self
        }
    }

    /// Whether a record at `key` and `time` is selected.
    #[inline]
    pub fn contains(&self, key: u64, time: u64) -> bool {
        (self.key_low..=self.key_high).contains(&key) && (self.time_low..=self.time_high).contains(&time)
    }

    /// Whether anything with keys in `key_min..=key_max` and times in
    /// `time_min..=time_max` may be selected.
    pub fn overlaps(&self, key_min: u64, key_max: u64, time_min: u64, time_max: u64) -> bool {
        key_min <= self.key_high
            && key_max >= self.key_low
            && time_min <= self.time_high
            && time_max >= self.time_low
    }

    /// Whether everything in those ranges is selected.
    pub fn covers(&self, key_min: u64, key_max: u64, time_min: u64, time_max: u64) -> bool {
        key_min >= self.key_low
            && key_max <= self.key_high
            && time_min >= self.time_low
            && time_max <= self.time_high
    }

    /// Whether the ranges are empty.
    pub fn is_empty(&self) -> bool {
        self.key_low > self.key_high || self.time_low > self.time_high
    }
}

/// Drops the records that a newer update or delete replaced: a record is
/// dead when a shadow with its key and time has a higher sequence number.
/// `records` and `shadows` are sorted.
pub(crate) fn drop_shadowed(records: Records, shadows: &[Shadow]) -> Records {
    if shadows.is_empty() {
        return records;
    }
    let mut live = Records::default();
    for i in 0..records.len() {
        if newest_shadow(shadows, records.keys[i], records.times[i]).is_none_or(|seq| seq <= records.seqs[i])
        {
            live.push_from(&records, i);
        }
    }
    live
}

/// The sequence number of the newest shadow of `key` and `time`, if any
/// (`shadows` sorted).
pub(crate) fn newest_shadow(shadows: &[Shadow], key: u64, time: u64) -> Option<u64> {
    let end = shadows.partition_point(|shadow| (shadow.key, shadow.time) <= (key, time));
    let newest = shadows[..end].last()?;
    ((newest.key, newest.time) == (key, time)).then_some(newest.seq)
}

/// Keeps only the newest shadow of each key and time (`shadows` sorted).
pub(crate) fn newest_shadows(shadows: &mut Vec<Shadow>) {
    let mut kept: Vec<Shadow> = Vec::with_capacity(shadows.len());
    for shadow in shadows.drain(..) {
        match kept.last_mut() {
            Some(last) if (last.key, last.time) == (shadow.key, shadow.time) => *last = shadow,
            _ => kept.push(shadow),
        }
    }
    *shadows = kept;
}

/// Records in (key, time, seq) order.
pub(crate) fn sort_records(records: Records) -> Records {
    let mut order: Vec<u32> = (0..records.len() as u32).collect();
    order.sort_unstable_by_key(|&i| records.order(i as usize));
    if order.iter().enumerate().all(|(at, &i)| at == i as usize) {
        return records;
    }
    let mut sorted = Records::with_capacity(records.len(), records.values.len());
    for i in order {
        sorted.push_from(&records, i as usize);
    }
    sorted
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_know_when_every_value_has_one_width() {
        let mut records = Records::default();
        assert_eq!(records.fixed_width(), None, "no values");
        records.push(1, 1, 1, &[7; 8]);
        records.push(2, 1, 2, &[8; 8]);
        assert_eq!(records.fixed_width(), Some(8));
        records.push(3, 1, 3, b"abc");
        assert_eq!(records.fixed_width(), None, "mixed");
        let mut copy = Records::default();
        copy.extend_from(&records, 0..2);
        assert_eq!(
            copy.fixed_width(),
            None,
            "rows of mixed records are not known to share one"
        );
        records.clear();
        assert_eq!(records.fixed_width(), None, "cleared");
        records.push(4, 1, 4, b"abcd");
        assert_eq!(records.fixed_width(), Some(4));

        // Filled in place: the ends are written, the width noted.
        let mut fixed = Records::default();
        fixed.push(1, 1, 1, &[1; 4]);
        let out = fixed.push_fixed::<4>(2);
        out.keys.copy_from_slice(&[2, 3]);
        out.values.copy_from_slice(&[[2; 4], [3; 4]]);
        assert_eq!(fixed.fixed_width(), Some(4));
        assert_eq!(fixed.value_ends, [4, 8, 12]);
        assert_eq!(fixed.value(2), [3; 4]);
        // Overwritten with fewer records of another width, then more of
        // the first: each time as if written afresh.
        let out = fixed.overwrite_fixed::<8>(2);
        out.values.copy_from_slice(&[[5; 8], [6; 8]]);
        assert_eq!(fixed.fixed_width(), Some(8));
        assert_eq!((fixed.len(), &fixed.value_ends[..]), (2, &[8, 16][..]));
        assert_eq!(fixed.value(1), [6; 8]);
        let out = fixed.overwrite_fixed::<8>(3);
        out.values.copy_from_slice(&[[1; 8], [2; 8], [3; 8]]);
        assert_eq!(fixed.value_ends, [8, 16, 24]);
        fixed.overwrite_fixed::<8>(0);
        assert_eq!(
            (fixed.len(), fixed.values.len(), fixed.fixed_width()),
            (0, 0, None)
        );
    }
}
