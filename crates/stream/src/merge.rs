//! What a query selects from each source, and the k-way merge that puts
//! the selections into one key order.
//!
//! A range query reads every segment whose ranges overlap it and the
//! buffers: about one source per flushed buffer, each sorted by (key,
//! time, seq), their keys finely interleaved. When every value has one
//! width (numbers, most often), the result's columns are sized once and
//! written in place: a few sources (a query over tiers meets a few large
//! ones and small recent segments) are merged two at a time, smallest
//! first, each merge moving keys, times, sequence numbers and values
//! together; more of them at once by a loser tree (one comparison per
//! level, log2(k) per record, against k for a linear look at the heads),
//! whose records are then gathered in one pass. A large merge is cut at a
//! key and its halves written on two threads, each into its part of the
//! result. Values of several widths are merged by the loser tree on one
//! thread and appended record by record.

use std::hint::select_unpredictable;
use std::ops::Range;
use std::sync::{Arc, OnceLock};

use crate::records::{FixedMut, Records};

/// The rows of one source that a query selects, ascending.
#[derive(Debug)]
pub(crate) enum Rows {
    /// Every row of a span: a key range of a source with no time bound or
    /// shadow to check row by row (the common case).
    Span(Range<usize>),
    /// The rows that passed a check.
    Picked(Vec<u32>),
}

/// One source's selection: its records (shared, never copied) and rows.
#[derive(Debug)]
pub(crate) struct Run {
    pub records: Arc<Records>,
    pub rows: Rows,
}

impl Run {
    pub fn len(&self) -> usize {
        match &self.rows {
            Rows::Span(span) => span.len(),
            Rows::Picked(rows) => rows.len(),
        }
    }

    /// Calls `visit` with every selected row, in order.
    pub fn for_each_row(&self, mut visit: impl FnMut(usize)) {
        match &self.rows {
            Rows::Span(span) => span.clone().for_each(visit),
            Rows::Picked(rows) => rows.iter().for_each(|&row| visit(row as usize)),
        }
    }

    /// The selected records, copied.
    fn gather(&self) -> Records {
        let records = &*self.records;
        let mut gathered = Records::with_capacity(self.len(), self.value_bytes());
        match &self.rows {
            Rows::Span(span) => gathered.extend_from(records, span.clone()),
            Rows::Picked(rows) => rows
                .iter()
                .for_each(|&row| gathered.push_from(records, row as usize)),
        }
        gathered
    }

    /// Bytes of the selected values.
    fn value_bytes(&self) -> usize {
        let records = &*self.records;
        match &self.rows {
            Rows::Span(span) => records.value_start(span.end) - records.value_start(span.start),
            Rows::Picked(rows) => rows.iter().map(|&row| records.value(row as usize).len()).sum(),
        }
    }
}

/// The selected records of every run, in one (key, time, seq) order.
///
/// `runs` must be in the order of their sequence numbers (every record of
/// a run older than every record of the next: segments oldest first, then
/// the buffers), so that among records of equal key and time the run's
/// number orders them as their sequence numbers do; within a run the rows
/// are in (key, time, seq) order already.
///
/// `merged`'s records are replaced; its allocations are reused (and, for
/// values of one width, its columns overwritten in place rather than
/// cleared), which spares a caller that runs query after query the page
/// faults of fresh memory and a pass that zeroes it.
///
/// Each run's selection becomes a span of records (picked rows are
/// gathered first). Spans whose values share one width (numbers, most
/// often) are merged by [`merge_fixed`], on two threads when they are
/// many; others on this thread by a loser tree.
pub(crate) fn merge_into(runs: &[Run], merged: &mut Records) {
    merge(runs, merged, parallelism() >= 2);
}

/// [`merge_into`] on the calling thread alone: for a background merge,
/// which must leave the other cores to the writers.
pub(crate) fn merge_one(runs: &[Run], merged: &mut Records) {
    merge(runs, merged, false);
}

fn merge(runs: &[Run], merged: &mut Records, two_threads: bool) {
    let nonempty: Vec<&Run> = runs.iter().filter(|run| run.len() > 0).collect();
    let gathered: Vec<Option<Records>> = nonempty
        .iter()
        .map(|run| match &run.rows {
            Rows::Span(_) => None,
            Rows::Picked(_) => Some(run.gather()),
        })
        .collect();
    let spans: Vec<(&Records, Range<usize>)> = nonempty
        .iter()
        .zip(&gathered)
        .map(|(run, gathered)| match (&run.rows, gathered) {
            (_, Some(records)) => (records, 0..records.len()),
            (Rows::Span(span), None) => (&*run.records, span.clone()),
            (Rows::Picked(_), None) => unreachable!("picked rows are gathered"),
        })
        .collect();
    match (&spans[..], common_width(&spans)) {
        ([], _) => merged.clear(),
        ([(records, span)], _) => {
            merged.clear();
            merged.extend_from(records, span.clone());
        }
        (_, Some(8)) => merge_fixed::<8>(&spans, merged, two_threads),
        (_, Some(4)) => merge_fixed::<4>(&spans, merged, two_threads),
        (_, Some(16)) => merge_fixed::<16>(&spans, merged, two_threads),
        _ => merge_each(&spans, merged),
    }
    debug_assert!(merged.keys.is_sorted(), "the merge keeps key order");
}

/// The width every value of every span has, if they share one.
fn common_width(spans: &[(&Records, Range<usize>)]) -> Option<usize> {
    let width = spans.first()?.0.fixed_width()?;
    spans
        .iter()
        .all(|(records, _)| records.fixed_width() == Some(width))
        .then_some(width)
}

/// [`merge_into`] for spans whose values are all `WIDTH` bytes long: the
/// result's columns are sized once and filled in place. A large merge is
/// cut in two at a key and the halves written on two threads, each into
/// its part of the result, if `two_threads` allows (a range query is
/// answered by one caller thread, and on a machine of few cores the
/// others are idle while it waits).
fn merge_fixed<const WIDTH: usize>(
    spans: &[(&Records, Range<usize>)],
    merged: &mut Records,
    two_threads: bool,
) {
    let spans: Vec<Columns<'_, WIDTH>> = spans
        .iter()
        .map(|(records, span)| Columns::of(records).slice(span.clone()))
        .collect();
    let total = spans.iter().map(Columns::len).sum();
    let out = merged.overwrite_fixed::<WIDTH>(total);
    match split(&spans) {
        Some((low, high)) if two_threads && total >= PARALLEL_MIN_RECORDS => {
            let (out_low, out_high) = out.split_at(low.iter().map(Columns::len).sum());
            std::thread::scope(|scope| {
                scope.spawn(|| merge_spans(&high, out_high));
                merge_spans(&low, out_low);
            });
        }
        _ => merge_spans(&spans, out),
    }
}

/// Records below which a merge stays on one thread: starting a thread
/// costs tens of microseconds.
const PARALLEL_MIN_RECORDS: usize = 1 << 15;

/// The threads this process may run at once (asked once: the answer
/// comes from files under /proc and /sys).
fn parallelism() -> usize {
    static THREADS: OnceLock<usize> = OnceLock::new();
    *THREADS.get_or_init(|| std::thread::available_parallelism().map_or(1, usize::from))
}

/// `spans` cut at a key near the middle of the largest: the records below
/// it and those from it on, each as spans in the same order. `None` when
/// one side would be empty (every key the same).
#[allow(clippy::type_complexity)]
fn split<'a, const WIDTH: usize>(
    spans: &[Columns<'a, WIDTH>],
) -> Option<(Vec<Columns<'a, WIDTH>>, Vec<Columns<'a, WIDTH>>)> {
    let largest = spans.iter().max_by_key(|span| span.len())?;
    let pivot = largest.keys[largest.len() / 2];
    let (low, high): (Vec<_>, Vec<_>) = spans
        .iter()
        .map(|span| {
            let cut = span.keys.partition_point(|&key| key < pivot);
            (span.slice(0..cut), span.slice(cut..span.len()))
        })
        .unzip();
    let empty = |side: &[Columns<'_, WIDTH>]| side.iter().all(|span| span.len() == 0);
    (!empty(&low) && !empty(&high)).then_some((low, high))
}

/// Writes `spans` (in run order) merged into `out`: a lone span copied,
/// up to [`CASCADE_MAX_RUNS`] merged two at a time (see [`cascade`]),
/// more by a loser tree that notes each record's span, whose records are
/// then gathered.
fn merge_spans<const WIDTH: usize>(spans: &[Columns<'_, WIDTH>], out: FixedMut<'_, WIDTH>) {
    let spans: Vec<Columns<'_, WIDTH>> = spans.iter().filter(|span| span.len() > 0).copied().collect();
    match spans.len() {
        0 => {}
        1 => spans[0].copy_to(out),
        2..=CASCADE_MAX_RUNS => cascade(&spans, out),
        _ => {
            let columns: Vec<(&[u64], &[u64])> = spans.iter().map(|span| (span.keys, span.times)).collect();
            let mut sources = Vec::with_capacity(out.keys.len());
            merge_heads(&columns, out.keys.len(), |run| sources.push(run as u32));
            gather_fixed(&sources, &spans, out);
        }
    }
}

/// Spans up to which [`merge_spans`] merges pairs in a [`cascade`] rather
/// than all at once with [`merge_heads`]. Measured on 10^5 records of
/// 8-byte values, on one thread: three runs of 82%, 9% and 9% took 0.9 ms
/// in a cascade and 1.9 ms with the loser tree, two even runs 0.7 and
/// 1.4 ms, but ten even runs 4.3 and 2.8 ms (each merge of a cascade is a
/// pass over its records, and the passes add up).
const CASCADE_MAX_RUNS: usize = 4;

/// Writes the merged records to `out`, each from the next row of its span
/// in `sources`, in one pass over every column.
fn gather_fixed<const WIDTH: usize>(
    sources: &[u32],
    spans: &[Columns<'_, WIDTH>],
    mut out: FixedMut<'_, WIDTH>,
) {
    let mut next = vec![0usize; spans.len()];
    for ((key, time, seq, value), &span) in out.slots().zip(sources) {
        let (from, at) = (&spans[span as usize], &mut next[span as usize]);
        (*key, *time, *seq, *value) = (from.keys[*at], from.times[*at], from.seqs[*at], from.values[*at]);
        *at += 1;
    }
}

/// [`merge_into`] for values of several widths, on this thread: a loser
/// tree notes each record's span, and the records are then appended one
/// by one.
fn merge_each(spans: &[(&Records, Range<usize>)], merged: &mut Records) {
    let columns: Vec<(&[u64], &[u64])> = spans
        .iter()
        .map(|(records, span)| (&records.keys[span.clone()], &records.times[span.clone()]))
        .collect();
    let total = columns.iter().map(|(keys, _)| keys.len()).sum();
    let value_bytes = spans
        .iter()
        .map(|(records, span)| records.value_start(span.end) - records.value_start(span.start))
        .sum();
    merged.clear();
    merged.reserve(total, value_bytes);
    let mut next: Vec<usize> = spans.iter().map(|(_, span)| span.start).collect();
    merge_heads(&columns, total, |run| {
        merged.push_from(spans[run].0, next[run]);
        next[run] += 1;
    });
}

/// Calls `emit(run)` for each of the `total` records of `columns` (per
/// run, its sorted keys and their times) in (key, time, run) order, with a
/// loser tree: `losers[node]` is the run that lost the match at internal
/// node `node` of a tree whose leaves are the runs, padded to a power of
/// two with runs that are used up. A run's head is its (key, time) as one
/// number, so that one comparison orders two heads; its number breaks
/// ties (`u32::MAX` once it is used up, so that it loses to every record).
fn merge_heads(columns: &[(&[u64], &[u64])], total: usize, mut emit: impl FnMut(usize)) {
    const USED_UP: (u128, u32) = (u128::MAX, u32::MAX);
    let width = columns.len().next_power_of_two();
    let head = |run: usize, at: usize| -> (u128, u32) {
        match columns.get(run) {
            Some((keys, times)) if at < keys.len() => {
                ((u128::from(keys[at]) << 64) | u128::from(times[at]), run as u32)
            }
            _ => USED_UP,
        }
    };
    let mut heads: Vec<(u128, u32)> = (0..width).map(|run| head(run, 0)).collect();
    let mut next = vec![0usize; width];
    // `&` and `|`, not `&&` and `||`: the outcome is a coin toss, so it is
    // computed, not branched on.
    let before = |a: (u128, u32), b: (u128, u32)| (a.0 < b.0) | ((a.0 == b.0) & (a.1 < b.1));
    // Play every match once, bottom-up: `winners[node]` wins under `node`.
    let mut losers = vec![0u32; width];
    let mut winners = vec![0u32; 2 * width];
    for run in 0..width {
        winners[width + run] = run as u32;
    }
    for node in (1..width).rev() {
        let (left, right) = (winners[2 * node], winners[2 * node + 1]);
        let right_first = before(heads[right as usize], heads[left as usize]);
        winners[node] = if right_first { right } else { left };
        losers[node] = if right_first { left } else { right };
    }
    let mut winner = if width == 1 { 0 } else { winners[1] };
    for _ in 0..total {
        let run = winner as usize;
        emit(run);
        next[run] += 1;
        let mut best = head(run, next[run]);
        heads[run] = best;
        // Replay from the run's leaf to the root with the new head.
        let mut node = (width + run) / 2;
        while node > 0 {
            let other = losers[node];
            let challenger = heads[other as usize];
            let swap = before(challenger, best);
            losers[node] = if swap { winner } else { other };
            winner = if swap { other } else { winner };
            best = if swap { challenger } else { best };
            node /= 2;
        }
    }
}

/// Records in (key, time, seq) order with values of `WIDTH` bytes, read
/// in place: a run's span, or runs merged.
#[derive(Debug, Clone, Copy)]
struct Columns<'a, const WIDTH: usize> {
    keys: &'a [u64],
    times: &'a [u64],
    seqs: &'a [u64],
    values: &'a [[u8; WIDTH]],
}

impl<'a, const WIDTH: usize> Columns<'a, WIDTH> {
    /// Every record of `records`, whose values must all be `WIDTH` bytes
    /// long.
    fn of(records: &'a Records) -> Self {
        debug_assert!(records.is_empty() || records.fixed_width() == Some(WIDTH));
        Columns {
            keys: &records.keys,
            times: &records.times,
            seqs: &records.seqs,
            values: records.values.as_chunks().0,
        }
    }

    /// Writes these records to `out`, which has room for them all.
    fn copy_to(&self, out: FixedMut<'_, WIDTH>) {
        out.keys.copy_from_slice(self.keys);
        out.times.copy_from_slice(self.times);
        out.seqs.copy_from_slice(self.seqs);
        out.values.copy_from_slice(self.values);
    }

    /// Records `rows`.
    fn slice(&self, rows: Range<usize>) -> Self {
        Columns {
            keys: &self.keys[rows.clone()],
            times: &self.times[rows.clone()],
            seqs: &self.seqs[rows.clone()],
            values: &self.values[rows],
        }
    }

    fn len(&self) -> usize {
        self.keys.len()
    }
}

/// Runs merged by a step of the cascade: owned columns.
#[derive(Debug)]
struct Merged<const WIDTH: usize> {
    keys: Vec<u64>,
    times: Vec<u64>,
    seqs: Vec<u64>,
    values: Vec<[u8; WIDTH]>,
}

impl<const WIDTH: usize> Merged<WIDTH> {
    /// Room for `len` records, zeroed, to be filled by [`merge_two`].
    fn zeroed(len: usize) -> Self {
        Merged {
            keys: vec![0; len],
            times: vec![0; len],
            seqs: vec![0; len],
            values: vec![[0; WIDTH]; len],
        }
    }

    fn columns(&self) -> Columns<'_, WIDTH> {
        Columns {
            keys: &self.keys,
            times: &self.times,
            seqs: &self.seqs,
            values: &self.values,
        }
    }
}

/// A part of the cascade: one run's span, read in place, or adjacent runs
/// merged.
#[derive(Debug)]
enum Part<'a, const WIDTH: usize> {
    Run(Columns<'a, WIDTH>),
    Merged(Merged<WIDTH>),
}

impl<const WIDTH: usize> Part<'_, WIDTH> {
    fn columns(&self) -> Columns<'_, WIDTH> {
        match self {
            Part::Run(columns) => *columns,
            Part::Merged(merged) => merged.columns(),
        }
    }
}

/// Writes `spans` (in run order, at least two) merged into `out`, two
/// adjacent parts at a time, always the
/// pair with the fewest records. Merging the smallest first keeps the
/// records merged again and again few: the sources of a range query are a
/// few large tiers and small recent segments, and the small ones are
/// merged among themselves before they meet a large one. Adjacent parts
/// only, so that among equal keys and times the older part's records come
/// first. Each merge moves every column at once: the last writes the
/// result, with no pass after it.
fn cascade<const WIDTH: usize>(spans: &[Columns<'_, WIDTH>], out: FixedMut<'_, WIDTH>) {
    assert!(spans.len() >= 2, "a cascade merges at least two parts");
    let mut parts: Vec<Part<'_, WIDTH>> = spans.iter().map(|span| Part::Run(*span)).collect();
    while parts.len() > 2 {
        let at = (0..parts.len() - 1)
            .min_by_key(|&at| parts[at].columns().len() + parts[at + 1].columns().len())
            .expect("at least two parts");
        let newer = parts.remove(at + 1);
        let (older, newer) = (parts[at].columns(), newer.columns());
        let mut pair = Merged::zeroed(older.len() + newer.len());
        merge_two(
            older,
            newer,
            FixedMut {
                keys: &mut pair.keys,
                times: &mut pair.times,
                seqs: &mut pair.seqs,
                values: &mut pair.values,
            },
        );
        parts[at] = Part::Merged(pair);
    }
    merge_two(parts[0].columns(), parts[1].columns(), out);
}

/// Writes `older` and `newer` merged into `out` (`older`'s records first
/// among equal keys and times). Which side goes next is a coin toss among
/// interleaved keys, so it is computed, not branched on.
fn merge_two<const WIDTH: usize>(
    older: Columns<'_, WIDTH>,
    newer: Columns<'_, WIDTH>,
    mut out: FixedMut<'_, WIDTH>,
) {
    assert_eq!(
        out.keys.len(),
        older.len() + newer.len(),
        "the output fits the merge"
    );
    // Every column cut to its keys' length and the output walked by
    // iterators: the loop then checks no bounds but its own.
    let (older, newer) = (older.slice(0..older.len()), newer.slice(0..newer.len()));
    let (mut i, mut j) = (0, 0);
    for (key, time, seq, value) in out.slots() {
        if i == older.len() || j == newer.len() {
            break;
        }
        let (a, b) = (older.keys[i], newer.keys[j]);
        let (ta, tb) = (older.times[i], newer.times[j]);
        let newer_first = (b < a) | ((b == a) & (tb < ta));
        *key = select_unpredictable(newer_first, b, a);
        *time = select_unpredictable(newer_first, tb, ta);
        *seq = select_unpredictable(newer_first, newer.seqs[j], older.seqs[i]);
        *value = select_unpredictable(newer_first, newer.values[j], older.values[i]);
        j += usize::from(newer_first);
        i += usize::from(!newer_first);
    }
    let rest = if i < older.len() {
        older.slice(i..older.len())
    } else {
        newer.slice(j..newer.len())
    };
    rest.copy_to(out.split_at(i + j).1);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Record `seq`'s value: `width` bytes made from `seq`, or from 0 to 8
    /// of them when `width` is `None`.
    fn value_of(seq: u64, width: Option<usize>) -> Vec<u8> {
        let bytes = [seq.to_le_bytes(), (!seq).to_le_bytes()].concat();
        bytes[..width.unwrap_or((seq % 9) as usize)].to_vec()
    }

    fn records_of(rows: &[(u64, u64, u64)], width: Option<usize>) -> Arc<Records> {
        let mut records = Records::default();
        for &(key, time, seq) in rows {
            records.push(key, time, seq, &value_of(seq, width));
        }
        Arc::new(records)
    }

    fn records(rows: &[(u64, u64, u64)]) -> Arc<Records> {
        records_of(rows, None)
    }

    #[test]
    fn the_merge_orders_by_key_time_and_run_and_copies_values() {
        // Three runs, with equal (key, time) across runs: the older run's
        // record (lower seq) comes first.
        let a = records(&[(1, 5, 0), (3, 1, 1), (3, 1, 2), (9, 0, 3)]);
        let b = records(&[(0, 0, 10), (3, 1, 11), (4, 0, 12)]);
        let c = records(&[(3, 0, 20), (3, 1, 21), (u64::MAX, u64::MAX, 22)]);
        let runs = vec![
            Run {
                records: a.clone(),
                rows: Rows::Span(0..4),
            },
            Run {
                records: b.clone(),
                rows: Rows::Picked(vec![0, 1, 2]),
            },
            Run {
                records: c.clone(),
                rows: Rows::Picked(vec![1, 2]),
            },
        ];
        let mut merged = Records::default();
        merge_into(&runs, &mut merged);
        let order: Vec<(u64, u64, u64)> = (0..merged.len()).map(|i| merged.order(i)).collect();
        let mut expected: Vec<(u64, u64, u64)> = [&a, &b]
            .iter()
            .flat_map(|records| (0..records.len()).map(|i| records.order(i)))
            .chain([c.order(1), c.order(2)])
            .collect();
        expected.sort_unstable();
        assert_eq!(order, expected);
        for i in 0..merged.len() {
            let seq = merged.seqs[i];
            assert_eq!(merged.value(i), &seq.to_le_bytes()[..(seq % 9) as usize]);
        }
    }

    #[test]
    fn a_merge_of_many_random_runs_is_sorted_and_complete() {
        let mut state = 7u64;
        let mut next = move || {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            state >> 33
        };
        // One result reused throughout: each merge replaces what the last
        // left, whatever its size and the width of its values.
        let mut merged = Records::default();
        for width in [Some(8), None, Some(4), Some(16), Some(8)] {
            for runs_count in [13usize, 0, 1, 2, 3, 4, 5, 8] {
                let mut seq = 0;
                let mut runs = Vec::new();
                let mut expected = Vec::new();
                for number in 0..runs_count {
                    let len = (next() % 300) as usize;
                    let mut rows: Vec<(u64, u64)> = (0..len).map(|_| (next() % 50, next() % 4)).collect();
                    rows.sort_unstable();
                    let with_seqs: Vec<(u64, u64, u64)> = rows
                        .iter()
                        .map(|&(key, time)| {
                            seq += 1;
                            (key, time, seq)
                        })
                        .collect();
                    // Picked rows in some runs, a span in others.
                    let rows = if number % 2 == 0 {
                        Rows::Picked((0..len as u32).filter(|row| row % 3 != 1).collect())
                    } else {
                        Rows::Span(len / 4..len)
                    };
                    let run = Run {
                        records: records_of(&with_seqs, width),
                        rows,
                    };
                    run.for_each_row(|row| expected.push(with_seqs[row]));
                    runs.push(run);
                }
                expected.sort_unstable();
                merge_into(&runs, &mut merged);
                let got: Vec<(u64, u64, u64)> = (0..merged.len()).map(|i| merged.order(i)).collect();
                assert_eq!(got, expected, "{runs_count} runs, width {width:?}");
                for i in 0..merged.len() {
                    assert_eq!(merged.value(i), value_of(merged.seqs[i], width));
                }
            }
        }
    }
}

#[cfg(test)]
mod large {
    use super::*;

    /// Every record of each run, as the merge of fixed-width values sees
    /// them.
    fn whole(runs: &[Run]) -> Vec<Columns<'_, 8>> {
        runs.iter().map(|run| Columns::of(&run.records)).collect()
    }

    fn run_of(rows: &[(u64, u64)], first_seq: u64) -> Run {
        let mut records = Records::default();
        for (i, &(key, time)) in rows.iter().enumerate() {
            records.push(key, time, first_seq + i as u64, &key.to_le_bytes());
        }
        let len = records.len();
        Run {
            records: Arc::new(records),
            rows: Rows::Span(0..len),
        }
    }

    #[test]
    fn a_merge_large_enough_for_two_threads_equals_a_sort() {
        let mut state = 3u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        // Three runs: each half merged in a cascade; five: by a loser
        // tree. One result reused by both.
        let mut merged = Records::default();
        for runs_count in [3u64, 5] {
            let mut runs = Vec::new();
            let mut expected = Vec::new();
            for number in 0..runs_count {
                // Few distinct keys: equal keys straddle the cut of the split.
                let mut rows: Vec<(u64, u64)> = (0..20_000).map(|_| (next() % 500, next() % 3)).collect();
                rows.sort_unstable();
                let run = run_of(&rows, number << 32);
                expected.extend((0..run.len()).map(|i| run.records.order(i)));
                runs.push(run);
            }
            // A picked run too.
            let last = runs_count as usize - 1;
            let picked: Vec<u32> = (0..20_000).filter(|row| row % 2 == 0).collect();
            let mut picked_expected: Vec<_> = picked
                .iter()
                .map(|&row| runs[last].records.order(row as usize))
                .collect();
            expected.retain(|&(_, _, seq)| seq >> 32 != last as u64);
            expected.append(&mut picked_expected);
            runs[last].rows = Rows::Picked(picked);
            expected.sort_unstable();
            assert!(split(&whole(&runs)).is_some());
            merge_into(&runs, &mut merged);
            let got: Vec<_> = (0..merged.len()).map(|i| merged.order(i)).collect();
            assert_eq!(got, expected, "{runs_count} runs");
            for i in 0..merged.len() {
                assert_eq!(merged.value(i), &merged.keys[i].to_le_bytes());
            }
        }
    }

    #[test]
    fn two_runs_merge_older_first_among_equal_keys_and_times() {
        // Equal (key, time) pairs across the runs, a run that ends first
        // and a run of picked rows (gathered before the merge).
        let mut older: Vec<(u64, u64)> = (0..3000).map(|i| (i / 3, i % 2)).collect();
        older.sort_unstable();
        let mut newer: Vec<(u64, u64)> = (0..5000).map(|i| (i / 4, (i + 1) % 2)).collect();
        newer.sort_unstable();
        for picked in [false, true] {
            let mut runs = vec![run_of(&older, 0), run_of(&newer, 1 << 32)];
            let mut expected: Vec<_> = (0..older.len())
                .map(|i| runs[0].records.order(i))
                .chain(
                    (0..newer.len())
                        .filter(|i| !picked || i % 3 != 0)
                        .map(|i| runs[1].records.order(i)),
                )
                .collect();
            expected.sort_unstable();
            if picked {
                runs[1].rows = Rows::Picked((0..newer.len() as u32).filter(|i| i % 3 != 0).collect());
            }
            let mut merged = Records::default();
            merge_one(&runs, &mut merged);
            let got: Vec<_> = (0..merged.len()).map(|i| merged.order(i)).collect();
            let first_wrong = got
                .iter()
                .zip(&expected)
                .position(|(got, expected)| got != expected);
            assert_eq!(
                (got.len(), first_wrong),
                (expected.len(), None),
                "picked: {picked}"
            );
            for i in 0..merged.len() {
                assert_eq!(merged.value(i), &merged.keys[i].to_le_bytes());
            }
        }
    }

    #[test]
    fn runs_of_one_key_are_not_split() {
        let rows = vec![(9u64, 1u64); 40_000];
        let runs = vec![run_of(&rows, 0), run_of(&rows, 1 << 32)];
        assert!(split(&whole(&runs)).is_none());
        let mut merged = Records::default();
        merge_into(&runs, &mut merged);
        assert_eq!(merged.len(), 80_000);
        assert!((0..merged.len()).map(|i| merged.order(i)).is_sorted());
    }
}
