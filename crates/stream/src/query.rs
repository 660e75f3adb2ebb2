//! Queries of a [`StreamIndex`]: ranges, scans, gets and aggregates over a
//! snapshot of the segments (or their tiers) and the buffers, newest
//! write winning.

use std::ops::Range;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use spillway_core::Result;

use crate::index::StreamIndex;
use crate::merge::{self, Rows, Run};
use crate::records::{drop_shadowed, newest_shadow, sort_records, Aggregate, Bounds, Records, Shadow};
use crate::segment::Segment;

impl StreamIndex {
    /// The live records with keys and times within `bounds`, sorted by
    /// key, time and sequence number (each source's records are sorted;
    /// they are merged).
    pub fn range(&self, bounds: Bounds) -> Result<Records> {
        let mut records = Records::default();
        self.range_into(bounds, &mut records)?;
        Ok(records)
    }

    /// [`StreamIndex::range`] into `records` (cleared first), reusing its
    /// memory: for a caller that runs many queries, this spares the page
    /// faults of a fresh result each time.
    pub fn range_into(&self, bounds: Bounds, records: &mut Records) -> Result<()> {
        merge::merge_into(&self.select(bounds)?, records);
        Ok(())
    }

    /// Calls `visit(key, time, seq, value)` on every live record within
    /// `bounds`, one source after the other (each segment's records in key
    /// order, then the active buffer's), not in one key order: the
    /// cheapest way through a large result, with nothing copied from
    /// segments held in memory.
    pub fn scan(&self, bounds: Bounds, mut visit: impl FnMut(u64, u64, u64, &[u8])) -> Result<()> {
        for run in self.select(bounds)? {
            let records = &*run.records;
            run.for_each_row(|i| {
                visit(
                    records.keys[i],
                    records.times[i],
                    records.seqs[i],
                    records.value(i),
                )
            });
        }
        Ok(())
    }

    /// The live records within `bounds`, as one run per source: the
    /// segments oldest first, then the buffers (so in the order of their
    /// sequence numbers, as [`merge::merge_into`] needs).
    pub(crate) fn select(&self, bounds: Bounds) -> Result<Vec<Run>> {
        self.shared.poison.check()?;
        if bounds.is_empty() {
            return Ok(Vec::new());
        }
        let view = self.snapshot();
        view.check_damage(&bounds)?;
        // The shadows first: a record is live unless a newer one of them
        // has its key and time.
        let mut buffered = Vec::new();
        let mut shadows = Vec::new();
        for buffer in view.buffers() {
            let mut records = Records::default();
            buffer.collect(&bounds, &buffer.visible(), &mut records, &mut shadows);
            buffered.push(Arc::new(records));
        }
        let sources = view.sources();
        for segment in &sources {
            shadows_within(&segment.meta.shadows, &bounds, &mut shadows);
        }
        shadows.sort_unstable();
        let live = |key, time, seq| {
            shadows.is_empty() || newest_shadow(&shadows, key, time).is_none_or(|newest| newest <= seq)
        };
        let mut runs = Vec::with_capacity(sources.len() + buffered.len());
        for segment in sources {
            if !segment.may_match(&bounds) {
                continue;
            }
            let leaves = segment.meta.leaves_for(bounds.key_low, bounds.key_high);
            self.shared
                .counters
                .leaves_read
                .fetch_add(leaves.len() as u64, Ordering::Relaxed);
            let (records, range) = segment.leaves(leaves)?;
            // The leaves' records with keys in bounds: a span, found by
            // binary search.
            let keys = &records.keys[range.clone()];
            let span = range.start + keys.partition_point(|&key| key < bounds.key_low)
                ..range.start + keys.partition_point(|&key| key <= bounds.key_high);
            let rows = if segment.times_within(&bounds) && shadows.is_empty() {
                Rows::Span(span)
            } else {
                Rows::Picked(
                    span.filter(|&i| {
                        let (key, time, seq) = records.order(i);
                        bounds.contains(key, time) && live(key, time, seq)
                    })
                    .map(|i| i as u32)
                    .collect(),
                )
            };
            runs.push(Run { records, rows });
        }
        for records in buffered {
            let rows = if shadows.is_empty() {
                Rows::Span(0..records.len())
            } else {
                Rows::Picked(
                    (0..records.len())
                        .filter(|&i| {
                            let (key, time, seq) = records.order(i);
                            live(key, time, seq)
                        })
                        .map(|i| i as u32)
                        .collect(),
                )
            };
            runs.push(Run { records, rows });
        }
        Ok(runs)
    }

    /// All live records with `key`.
    pub fn get(&self, key: u64) -> Result<Records> {
        self.range(Bounds::keys(key, key))
    }

    /// Count, sum, min and max of the live records within `bounds`: from
    /// the summaries of the segment leaves that lie wholly inside it (and
    /// that no later update or delete touches), from the records
    /// elsewhere.
    pub fn aggregate(&self, bounds: Bounds) -> Result<Aggregate> {
        self.shared.poison.check()?;
        let mut total = Aggregate::default();
        if bounds.is_empty() {
            return Ok(total);
        }
        let view = self.snapshot();
        view.check_damage(&bounds)?;
        // Every update and delete in range, with the segment it is in
        // (the buffers' are read with their records below).
        let mut newer: Vec<(u64, usize)> = Vec::new();
        let sources = view.sources();
        for (number, segment) in sources.iter().enumerate() {
            let mut within = Vec::new();
            shadows_within(&segment.meta.shadows, &bounds, &mut within);
            newer.extend(within.iter().map(|shadow| (shadow.key, number)));
        }
        let mut rest = Records::default();
        let mut shadows = Vec::new();
        for buffer in view.buffers() {
            buffer.collect(&bounds, &buffer.visible(), &mut rest, &mut shadows);
        }
        // Newer than every segment.
        let buffer_number = sources.len();
        newer.extend(shadows.iter().map(|shadow| (shadow.key, buffer_number)));
        newer.sort_unstable();
        for (number, segment) in sources.into_iter().enumerate() {
            if !segment.may_match(&bounds) {
                continue;
            }
            let leaves = segment.meta.leaves_for(bounds.key_low, bounds.key_high);
            let mut to_read = leaves.start..leaves.start;
            for leaf_number in leaves.clone() {
                let leaf = &segment.meta.leaves[leaf_number];
                let touched = newer[newer.partition_point(|&(key, _)| key < leaf.first_key)..]
                    .iter()
                    .take_while(|&&(key, _)| key <= leaf.last_key)
                    .any(|&(_, by)| by > number);
                let whole = bounds.covers(leaf.first_key, leaf.last_key, leaf.time_min, leaf.time_max);
                if whole && !touched {
                    total.combine(&leaf.aggregate);
                    self.shared
                        .counters
                        .leaves_summarized
                        .fetch_add(1, Ordering::Relaxed);
                    self.read_into(segment, to_read.clone(), &bounds, &mut rest)?;
                    to_read = leaf_number + 1..leaf_number + 1;
                } else {
                    to_read.end = leaf_number + 1;
                }
            }
            self.read_into(segment, to_read, &bounds, &mut rest)?;
            shadows_within(&segment.meta.shadows, &bounds, &mut shadows);
        }
        shadows.sort_unstable();
        let rest = drop_shadowed(sort_records(rest), &shadows);
        for i in 0..rest.len() {
            total.add(rest.value(i));
        }
        Ok(total)
    }

    pub(crate) fn read_into(
        &self,
        segment: &Arc<Segment>,
        leaves: Range<usize>,
        bounds: &Bounds,
        out: &mut Records,
    ) -> Result<()> {
        if leaves.is_empty() {
            return Ok(());
        }
        self.shared
            .counters
            .leaves_read
            .fetch_add(leaves.len() as u64, Ordering::Relaxed);
        let (decoded, range) = segment.leaves(leaves)?;
        for i in range {
            if bounds.contains(decoded.keys[i], decoded.times[i]) {
                out.push_from(&decoded, i);
            }
        }
        Ok(())
    }
}

/// Appends the shadows within `bounds`.
pub(crate) fn shadows_within(shadows: &[Shadow], bounds: &Bounds, out: &mut Vec<Shadow>) {
    let start = shadows.partition_point(|shadow| shadow.key < bounds.key_low);
    out.extend(
        shadows[start..]
            .iter()
            .take_while(|shadow| shadow.key <= bounds.key_high)
            .filter(|shadow| bounds.contains(shadow.key, shadow.time)),
    );
}
