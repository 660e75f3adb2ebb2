//! What a query selects from each source, and the k-way merge that puts
//! the selections into one key order.
//!
//! A range query reads every segment whose ranges overlap it and the
//! buffers: about one source per flushed buffer, each sorted by (key,
//! time, seq), their keys finely interleaved. A few sources (a query over
//! tiers meets a few large ones and small recent segments) are merged two
//! at a time, smallest first; more of them at once by a loser tree (one
//! comparison per level, log2(k) per record, against k for a linear look
//! at the heads). The records are copied column by column into a result
//! sized beforehand, so the hot loop allocates nothing. A large merge is
//! cut at a key and its halves merged on two threads.

use std::cell::RefCell;
use std::ops::Range;
use std::sync::{Arc, OnceLock};

use crate::records::Records;

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

    /// The row of the `at`-th selected record.
    #[inline]
    fn row(&self, at: usize) -> usize {
        match &self.rows {
            Rows::Span(span) => span.start + at,
            Rows::Picked(rows) => rows[at] as usize,
        }
    }

    /// Calls `visit` with every selected row, in order.
    pub fn for_each_row(&self, mut visit: impl FnMut(usize)) {
        match &self.rows {
            Rows::Span(span) => span.clone().for_each(visit),
            Rows::Picked(rows) => rows.iter().for_each(|&row| visit(row as usize)),
        }
    }

    /// Appends the `at`-th selected records to `merged`.
    fn copy_into(&self, at: Range<usize>, merged: &mut Records) {
        let records = &*self.records;
        match &self.rows {
            Rows::Span(span) => merged.extend_from(records, span.start + at.start..span.start + at.end),
            Rows::Picked(rows) => rows[at]
                .iter()
                .for_each(|&row| merged.push_from(records, row as usize)),
        }
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
/// `merged` is cleared first; its allocations are reused, which spares a
/// caller that runs query after query the page faults of fresh memory.
///
/// A large merge is cut in two at a key and the halves merged on two
/// threads (a range query is answered by one caller thread, and on a
/// machine of few cores the others are idle while it waits).
pub(crate) fn merge_into(runs: &[Run], merged: &mut Records) {
    let total: usize = runs.iter().map(Run::len).sum();
    let sources = runs.iter().filter(|run| run.len() > 0).count();
    if total >= PARALLEL_MIN_RECORDS && sources >= 2 && parallelism() >= 2 {
        if let Some((low, high)) = split(runs) {
            UPPER.with_borrow_mut(|upper| {
                std::thread::scope(|scope| {
                    scope.spawn(|| merge_one(&high, upper));
                    merge_one(&low, merged);
                });
                merged.append(upper);
                if upper.keys.capacity() > KEPT_UPPER_RECORDS {
                    *upper = Records::default();
                }
            });
            return;
        }
    }
    merge_one(runs, merged);
}

/// Records below which a merge stays on one thread: starting a thread
/// costs tens of microseconds.
const PARALLEL_MIN_RECORDS: usize = 1 << 15;

thread_local! {
    /// The upper half of this thread's last parallel merge, kept for the
    /// next (fresh memory costs a page fault per page).
    static UPPER: RefCell<Records> = RefCell::default();
}

/// The most records [`UPPER`] keeps room for between merges.
const KEPT_UPPER_RECORDS: usize = 1 << 18;

/// The threads this process may run at once (asked once: the answer
/// comes from files under /proc and /sys).
fn parallelism() -> usize {
    static THREADS: OnceLock<usize> = OnceLock::new();
    *THREADS.get_or_init(|| std::thread::available_parallelism().map_or(1, usize::from))
}

/// `runs` cut at a key near the middle of the largest: the records below
/// it and those from it on, each as runs in the same order. `None` when
/// one side would be empty (every key the same).
fn split(runs: &[Run]) -> Option<(Vec<Run>, Vec<Run>)> {
    let largest = runs.iter().max_by_key(|run| run.len())?;
    let pivot = largest.records.keys[largest.row(largest.len() / 2)];
    let mut low = Vec::with_capacity(runs.len());
    let mut high = Vec::with_capacity(runs.len());
    for run in runs {
        let keys = &run.records.keys;
        let (below, from) = match &run.rows {
            Rows::Span(span) => {
                let cut = span.start + keys[span.clone()].partition_point(|&key| key < pivot);
                (Rows::Span(span.start..cut), Rows::Span(cut..span.end))
            }
            Rows::Picked(rows) => {
                let cut = rows.partition_point(|&row| keys[row as usize] < pivot);
                (
                    Rows::Picked(rows[..cut].to_vec()),
                    Rows::Picked(rows[cut..].to_vec()),
                )
            }
        };
        low.push(Run {
            records: run.records.clone(),
            rows: below,
        });
        high.push(Run {
            records: run.records.clone(),
            rows: from,
        });
    }
    let empty = |side: &[Run]| side.iter().all(|run| run.len() == 0);
    (!empty(&low) && !empty(&high)).then_some((low, high))
}

/// [`merge_into`] on the calling thread, in passes over plain columns.
/// Each run's selection becomes a span of records (picked rows are
/// gathered first). The spans are then merged two at a time, always the
/// adjacent pair with the fewest records (see [`cascade`]): each merge
/// writes keys, times and each record's run, and the last one writes the
/// keys and times of the result. The sequence numbers and the values are
/// then gathered, each record from its run's next row. A lone run is
/// copied whole.
pub(crate) fn merge_one(runs: &[Run], merged: &mut Records) {
    let total: usize = runs.iter().map(Run::len).sum();
    let value_bytes: usize = runs.iter().map(Run::value_bytes).sum();
    merged.clear();
    merged.reserve(total, value_bytes);
    let nonempty: Vec<&Run> = runs.iter().filter(|run| run.len() > 0).collect();
    if let [run] = nonempty[..] {
        run.copy_into(0..run.len(), merged);
    }
    if nonempty.len() < 2 {
        return;
    }
    let gathered: Vec<Option<Records>> = nonempty
        .iter()
        .map(|run| match &run.rows {
            Rows::Span(_) => None,
            Rows::Picked(_) => {
                let mut records = Records::with_capacity(run.len(), run.value_bytes());
                run.copy_into(0..run.len(), &mut records);
                Some(records)
            }
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
    let parts: Vec<Part<'_>> = spans
        .iter()
        .enumerate()
        .map(|(run, (records, span))| Part::Run {
            keys: &records.keys[span.clone()],
            times: &records.times[span.clone()],
            run: run as u32,
        })
        .collect();
    let sources = if spans.len() <= CASCADE_MAX_RUNS {
        let mut order = Merged {
            keys: std::mem::take(&mut merged.keys),
            times: std::mem::take(&mut merged.times),
            runs: Vec::with_capacity(total),
        };
        cascade(parts, &mut order);
        (merged.keys, merged.times) = (order.keys, order.times);
        order.runs
    } else {
        let columns: Vec<(&[u64], &[u64])> = parts
            .iter()
            .map(|part| match part {
                Part::Run { keys, times, .. } => (*keys, *times),
                Part::Merged(_) => unreachable!("the parts are runs"),
            })
            .collect();
        let mut sources = Vec::with_capacity(total);
        merge_heads(&columns, total, |run| sources.push(run as u32));
        gather(&sources, &spans, |records| &records.keys, &mut merged.keys);
        gather(&sources, &spans, |records| &records.times, &mut merged.times);
        sources
    };
    debug_assert!(merged.keys.is_sorted(), "the merge keeps key order");
    gather(&sources, &spans, |records| &records.seqs, &mut merged.seqs);
    gather_values(&sources, &spans, merged);
}

/// Runs up to which [`merge_one`] merges pairs in a [`cascade`] rather
/// than all at once with [`merge_heads`]. Measured on 10^5 records: three
/// runs of 80%, 10% and 10% took 2.0 ms in a cascade and 3.3 ms with the
/// loser tree, two even runs 1.4 and 2.0 ms, but ten even runs 7.1 and
/// 4.1 ms (each merge of a cascade is a pass over its records, and the
/// passes add up).
const CASCADE_MAX_RUNS: usize = 4;

/// Appends to `out` one column of the merged records: the `column` of
/// each record of `sources` (its run's next one).
#[inline]
fn gather<'a>(
    sources: &[u32],
    spans: &[(&'a Records, Range<usize>)],
    column: impl Fn(&'a Records) -> &'a Vec<u64>,
    out: &mut Vec<u64>,
) {
    let mut next: Vec<(&[u64], usize)> = spans
        .iter()
        .map(|(records, span)| (&column(records)[..], span.start))
        .collect();
    out.extend(sources.iter().map(|&run| {
        let (values, at) = &mut next[run as usize];
        *at += 1;
        values[*at - 1]
    }));
}

/// Appends the values of the merged records to `merged`, each record's
/// from its run's next row. Values of one width in every span (numbers,
/// most often) are copied as fixed-size words, with their ends computed
/// rather than read.
fn gather_values(sources: &[u32], spans: &[(&Records, Range<usize>)], merged: &mut Records) {
    let widths: Vec<Option<usize>> = spans
        .iter()
        .map(|(records, span)| fixed_width(records, span.clone()))
        .collect();
    match widths[..] {
        [Some(width), ..] if widths.iter().all(|&other| other == Some(width)) => match width {
            8 => gather_fixed::<8>(sources, spans, merged),
            4 => gather_fixed::<4>(sources, spans, merged),
            16 => gather_fixed::<16>(sources, spans, merged),
            _ => gather_each(sources, spans, merged),
        },
        _ => gather_each(sources, spans, merged),
    }
}

/// The width of every value of records `span`, if they have one.
fn fixed_width(records: &Records, span: Range<usize>) -> Option<usize> {
    let width = records.value(span.start).len() as u64;
    let ends = &records.value_ends[span];
    ends.windows(2)
        .all(|pair| pair[1] - pair[0] == width)
        .then_some(width as usize)
}

fn gather_fixed<const WIDTH: usize>(
    sources: &[u32],
    spans: &[(&Records, Range<usize>)],
    merged: &mut Records,
) {
    let base = merged.values.len();
    merged.values.resize(base + sources.len() * WIDTH, 0);
    let mut next: Vec<(&[u8], usize)> = spans
        .iter()
        .map(|(records, span)| (&records.values[..], records.value_start(span.start)))
        .collect();
    for (out, &run) in merged.values[base..].chunks_exact_mut(WIDTH).zip(sources) {
        let (values, at) = &mut next[run as usize];
        out.copy_from_slice(&values[*at..*at + WIDTH]);
        *at += WIDTH;
    }
    merged
        .value_ends
        .extend((1..=sources.len()).map(|i| (base + i * WIDTH) as u64));
}

fn gather_each(sources: &[u32], spans: &[(&Records, Range<usize>)], merged: &mut Records) {
    let mut next: Vec<usize> = spans.iter().map(|(_, span)| span.start).collect();
    for &run in sources {
        let run = run as usize;
        merged.push_value(spans[run].0.value(next[run]));
        next[run] += 1;
    }
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

/// Sorted keys and times and each record's run: what merging parts of
/// the cascade makes.
#[derive(Debug, Default)]
struct Merged {
    keys: Vec<u64>,
    times: Vec<u64>,
    runs: Vec<u32>,
}

/// A part of the cascade: one run's span, read in place, or adjacent runs
/// merged.
#[derive(Debug)]
enum Part<'a> {
    Run {
        keys: &'a [u64],
        times: &'a [u64],
        run: u32,
    },
    Merged(Merged),
}

impl Part<'_> {
    fn len(&self) -> usize {
        match self {
            Part::Run { keys, .. } => keys.len(),
            Part::Merged(merged) => merged.keys.len(),
        }
    }
}

/// Merges `parts` (in run order, at least two) into `out` (empty, its
/// allocations reused), two adjacent parts at a time, always the pair
/// with the fewest records. Each merge is a two-way merge, branch-free;
/// merging the smallest first keeps the records merged again and again
/// few: the sources of a range query are a few large tiers and small
/// recent segments, and the small ones are merged among themselves before
/// they meet a large one. Adjacent parts only, so that among equal keys
/// and times the older part's records, the lower run numbers, come first.
fn cascade(mut parts: Vec<Part<'_>>, out: &mut Merged) {
    assert!(parts.len() >= 2, "a cascade merges at least two parts");
    while parts.len() > 2 {
        let at = (0..parts.len() - 1)
            .min_by_key(|&at| parts[at].len() + parts[at + 1].len())
            .expect("at least two parts");
        let newer = parts.remove(at + 1);
        let mut pair = Merged::default();
        merge_pair(&parts[at], &newer, &mut pair);
        parts[at] = Part::Merged(pair);
    }
    merge_pair(&parts[0], &parts[1], out);
}

/// Where a part's records come from: one run, or a run per record.
trait Origin {
    fn run(&self, at: usize) -> u32;
    /// Fills `out` with the runs of the records from `at` on.
    fn fill_runs(&self, at: usize, out: &mut [u32]);
}

impl Origin for u32 {
    #[inline]
    fn run(&self, _: usize) -> u32 {
        *self
    }

    fn fill_runs(&self, _: usize, out: &mut [u32]) {
        out.fill(*self);
    }
}

impl Origin for &[u32] {
    #[inline]
    fn run(&self, at: usize) -> u32 {
        self[at]
    }

    fn fill_runs(&self, at: usize, out: &mut [u32]) {
        out.copy_from_slice(&self[at..at + out.len()]);
    }
}

/// Appends `older` and `newer` merged to `out` (`older`'s records first
/// among equal keys and times).
fn merge_pair(older: &Part<'_>, newer: &Part<'_>, out: &mut Merged) {
    match (older, newer) {
        (
            Part::Run { keys, times, run },
            Part::Run {
                keys: k,
                times: t,
                run: r,
            },
        ) => merge_two((keys, times, *run), (k, t, *r), out),
        (Part::Run { keys, times, run }, Part::Merged(m)) => {
            merge_two((keys, times, *run), (&m.keys, &m.times, &m.runs[..]), out)
        }
        (Part::Merged(m), Part::Run { keys, times, run }) => {
            merge_two((&m.keys, &m.times, &m.runs[..]), (keys, times, *run), out)
        }
        (Part::Merged(m), Part::Merged(n)) => merge_two(
            (&m.keys, &m.times, &m.runs[..]),
            (&n.keys, &n.times, &n.runs[..]),
            out,
        ),
    }
}

/// The two-way merge of [`merge_pair`]. Which side goes next is a coin
/// toss among interleaved keys, so it is computed, not branched on.
fn merge_two<A: Origin, B: Origin>(older: (&[u64], &[u64], A), newer: (&[u64], &[u64], B), out: &mut Merged) {
    let ((older_keys, older_times, older_runs), (newer_keys, newer_times, newer_runs)) = (older, newer);
    let start = out.keys.len();
    let total = older_keys.len() + newer_keys.len();
    // Written through slices, not pushed: a push reads and writes its
    // vector's length in memory each time.
    out.keys.resize(start + total, 0);
    out.times.resize(start + total, 0);
    out.runs.resize(start + total, 0);
    let (keys, times, runs) = (
        &mut out.keys[start..],
        &mut out.times[start..],
        &mut out.runs[start..],
    );
    let (mut i, mut j) = (0, 0);
    while i < older_keys.len() && j < newer_keys.len() {
        let (a, b) = (older_keys[i], newer_keys[j]);
        let (ta, tb) = (older_times[i], newer_times[j]);
        let newer_first = (b < a) | ((b == a) & (tb < ta));
        keys[i + j] = if newer_first { b } else { a };
        times[i + j] = if newer_first { tb } else { ta };
        runs[i + j] = if newer_first {
            newer_runs.run(j)
        } else {
            older_runs.run(i)
        };
        j += usize::from(newer_first);
        i += usize::from(!newer_first);
    }
    let rest = i + j;
    if i < older_keys.len() {
        keys[rest..].copy_from_slice(&older_keys[i..]);
        times[rest..].copy_from_slice(&older_times[i..]);
        older_runs.fill_runs(i, &mut runs[rest..]);
    } else {
        keys[rest..].copy_from_slice(&newer_keys[j..]);
        times[rest..].copy_from_slice(&newer_times[j..]);
        newer_runs.fill_runs(j, &mut runs[rest..]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn records(rows: &[(u64, u64, u64)]) -> Arc<Records> {
        let mut records = Records::default();
        for &(key, time, seq) in rows {
            records.push(key, time, seq, &seq.to_le_bytes()[..(seq % 9) as usize]);
        }
        Arc::new(records)
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
        let mut merged = Records::default();
        for runs_count in [13usize, 0, 1, 2, 3, 4, 5, 8] {
            let mut seq = 0;
            let mut runs = Vec::new();
            let mut expected = Vec::new();
            for _ in 0..runs_count {
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
                let picked: Vec<u32> = (0..len as u32).filter(|row| row % 3 != 1).collect();
                expected.extend(picked.iter().map(|&row| with_seqs[row as usize]));
                runs.push(Run {
                    records: records(&with_seqs),
                    rows: Rows::Picked(picked),
                });
            }
            expected.sort_unstable();
            // One result reused: each merge starts it afresh.
            merge_into(&runs, &mut merged);
            let got: Vec<(u64, u64, u64)> = (0..merged.len()).map(|i| merged.order(i)).collect();
            assert_eq!(got, expected, "{runs_count} runs");
        }
    }
}
#[cfg(test)]
mod large {
    use super::*;

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
        let mut runs = Vec::new();
        let mut expected = Vec::new();
        for number in 0..5u64 {
            // Few distinct keys: equal keys straddle the cut of the split.
            let mut rows: Vec<(u64, u64)> = (0..20_000).map(|_| (next() % 500, next() % 3)).collect();
            rows.sort_unstable();
            let run = run_of(&rows, number << 32);
            expected.extend((0..run.len()).map(|i| run.records.order(i)));
            runs.push(run);
        }
        // A picked run too.
        let picked: Vec<u32> = (0..20_000).filter(|row| row % 2 == 0).collect();
        let last = &runs[4];
        let mut picked_expected: Vec<_> = picked
            .iter()
            .map(|&row| last.records.order(row as usize))
            .collect();
        expected.retain(|&(_, _, seq)| seq >> 32 != 4);
        expected.append(&mut picked_expected);
        runs[4].rows = Rows::Picked(picked);
        expected.sort_unstable();
        assert!(split(&runs).is_some());
        let mut merged = Records::default();
        merge_into(&runs, &mut merged);
        let got: Vec<_> = (0..merged.len()).map(|i| merged.order(i)).collect();
        assert_eq!(got, expected);
        for i in 0..merged.len() {
            assert_eq!(merged.value(i), &merged.keys[i].to_le_bytes());
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
        assert!(split(&runs).is_none());
        let mut merged = Records::default();
        merge_into(&runs, &mut merged);
        assert_eq!(merged.len(), 80_000);
        assert!((0..merged.len()).map(|i| merged.order(i)).is_sorted());
    }
}
