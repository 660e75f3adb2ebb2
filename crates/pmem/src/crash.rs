//! Crash-state enumeration: from a trace (`persist::Tracing`) and the
//! image it started from, the post-crash images the x86 persistency model
//! allows, each handed to the caller's check (recovery and an oracle).
//!
//! The model (`notes/pmem.md`):
//! - aligned 8-byte stores are failure-atomic, nothing larger is, so a
//!   copy is a run of word stores;
//! - stores to one cache line persist in program order;
//! - a store is durable once its line was flushed and a fence followed.
//!
//! A crash image is the durable bytes plus, for every line with pending
//! stores, some prefix of them. The images possible between two fences are
//! a subset of those just before the later fence, so crashing just before
//! every fence covers them all; a crash just after every operation's end
//! checks that the operation is whole (durable) by then.
//!
//! Replaying also finds three kinds of waste or danger an operation can
//! have: a line still dirty (stores not flushed and fenced) at its end, a
//! flush of a line with nothing pending, and a store to a line flushed but
//! not yet fenced.

use spillway_core::{ensure, Result};

use crate::persist::{line_of, Event};

/// One store of at most 8 bytes inside one aligned word.
#[derive(Debug, Clone)]
struct WordStore {
    at: u64,
    bytes: Vec<u8>,
}

/// Where a crash happens: just before the trace's event `event` (a
/// fence), or just after it (the end of an operation).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CrashPoint {
    /// Index in the trace of the event the crash comes before.
    pub event: usize,
    /// Operations that had ended before the crash (their effects must all
    /// be present after recovery).
    pub completed: usize,
    /// The operation under way, if any (its effect may be present or not,
    /// but not half).
    pub in_flight: Option<&'static str>,
}

/// How many images to check at a crash point, and the sample's seed.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// At most this many images per crash point: all of them when there
    /// are no more, else the targeted ones and a seeded sample.
    pub images_per_point: usize,
    /// The sample's seed.
    pub seed: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            images_per_point: 4096,
            seed: 0x5eed,
        }
    }
}

/// What a replay covered and found.
#[derive(Debug, Default, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Report {
    /// Crash points visited.
    pub points: usize,
    /// Images checked over all points.
    pub images: usize,
    /// Crash points at which every possible image was checked.
    pub exhaustive_points: usize,
    /// (event index of an operation's end, line) for every line still
    /// dirty when its operation ended.
    pub dirty_at_end: Vec<(usize, u64)>,
    /// (event index, line) for every flush of a line with nothing pending.
    pub clean_flushes: Vec<(usize, u64)>,
    /// (event index, line) for every store to a line flushed since the
    /// last fence: the flush does not cover it, which is rarely meant.
    pub stores_to_flushed_lines: Vec<(usize, u64)>,
}

/// The replay's state: durable bytes, and per line its pending stores
/// (program order) and how many of them a flush since the last fence
/// covers.
struct Model {
    durable: Vec<u8>,
    /// Lines with pending stores: (line, stores, flushed prefix length).
    pending: Vec<(u64, Vec<WordStore>, usize)>,
}

impl Model {
    fn line(&mut self, line: u64) -> &mut (u64, Vec<WordStore>, usize) {
        match self.pending.iter().position(|(l, ..)| *l == line) {
            Some(at) => &mut self.pending[at],
            None => {
                self.pending.push((line, Vec::new(), 0));
                self.pending.last_mut().expect("just pushed")
            }
        }
    }

    /// Splits a store into word stores and queues them on their lines;
    /// returns the lines among them flushed since the last fence.
    fn store(&mut self, at: u64, bytes: &[u8]) -> Vec<u64> {
        let mut flushed_lines = Vec::new();
        let mut offset = 0usize;
        while offset < bytes.len() {
            let start = at + offset as u64;
            let word_end = (start / 8 + 1) * 8;
            let take = ((word_end - start) as usize).min(bytes.len() - offset);
            let store = WordStore {
                at: start,
                bytes: bytes[offset..offset + take].to_vec(),
            };
            let (line, stores, flushed) = self.line(line_of(start));
            if *flushed > 0 && flushed_lines.last() != Some(line) {
                flushed_lines.push(*line);
            }
            stores.push(store);
            offset += take;
        }
        flushed_lines
    }

    /// A flush: returns whether the line had anything pending.
    fn flush(&mut self, line: u64) -> bool {
        match self.pending.iter_mut().find(|(l, ..)| *l == line) {
            Some((_, stores, flushed)) => {
                *flushed = stores.len();
                true
            }
            None => false,
        }
    }

    /// A fence: the flushed prefix of every line becomes durable.
    fn fence(&mut self) {
        for (_, stores, flushed) in &mut self.pending {
            for store in stores.drain(..*flushed) {
                apply(&mut self.durable, &store);
            }
            *flushed = 0;
        }
        self.pending.retain(|(_, stores, _)| !stores.is_empty());
    }

    /// The image with `prefix[i]` of line i's pending stores applied.
    fn image(&self, prefix: &[usize]) -> Vec<u8> {
        let mut image = self.durable.clone();
        for ((_, stores, _), &n) in self.pending.iter().zip(prefix) {
            for store in &stores[..n] {
                apply(&mut image, store);
            }
        }
        image
    }
}

fn apply(image: &mut [u8], store: &WordStore) {
    let at = store.at as usize;
    image[at..at + store.bytes.len()].copy_from_slice(&store.bytes);
}

/// A small deterministic generator for the sample (xorshift64*).
struct Sample(u64);

impl Sample {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11) as usize % n
    }
}

/// The prefix choices to check at one crash point, for lines with
/// `counts[i]` pending stores: every combination when there are at most
/// `limit`, else the targeted ones (nothing new persisted; everything;
/// each line alone; all lines but one) and a seeded sample to `limit`.
fn choices(counts: &[usize], limit: usize, sample: &mut Sample) -> (Vec<Vec<usize>>, bool) {
    let total = counts
        .iter()
        .try_fold(1usize, |acc, &n| acc.checked_mul(n + 1).filter(|&t| t <= limit));
    if let Some(total) = total {
        let mut all = Vec::with_capacity(total);
        let mut prefix = vec![0; counts.len()];
        loop {
            all.push(prefix.clone());
            // The next combination, counting in mixed radix.
            let mut i = 0;
            loop {
                if i == counts.len() {
                    return (all, true);
                }
                if prefix[i] < counts[i] {
                    prefix[i] += 1;
                    break;
                }
                prefix[i] = 0;
                i += 1;
            }
        }
    }
    let none = vec![0; counts.len()];
    let mut picked = vec![none.clone(), counts.to_vec()];
    for i in 0..counts.len() {
        let mut alone = none.clone();
        alone[i] = counts[i];
        picked.push(alone);
        let mut but_one = counts.to_vec();
        but_one[i] = 0;
        picked.push(but_one);
    }
    while picked.len() < limit {
        picked.push(counts.iter().map(|&n| sample.below(n + 1)).collect());
    }
    picked.truncate(limit.max(2));
    (picked, false)
}

/// Replays `events` from `base` (the region's bytes when the trace began,
/// all durable) and calls `check` with every crash image chosen at every
/// crash point; stops at the first error `check` returns.
pub fn enumerate(
    base: &[u8],
    events: &[Event],
    limits: Limits,
    mut check: impl FnMut(&CrashPoint, &[u8]) -> Result<()>,
) -> Result<Report> {
    ensure!(
        limits.images_per_point >= 2,
        InvalidArgument,
        "a crash point needs at least 2 images (nothing persisted, everything), not {}",
        limits.images_per_point
    );
    let mut model = Model {
        durable: base.to_vec(),
        pending: Vec::new(),
    };
    let mut report = Report::default();
    let mut sample = Sample(limits.seed | 1);
    let mut completed = 0;
    let mut in_flight = None;
    let mut visit =
        |index: usize, completed: usize, in_flight, model: &Model, report: &mut Report| -> Result<()> {
            let point = CrashPoint {
                event: index,
                completed,
                in_flight,
            };
            let counts: Vec<usize> = model.pending.iter().map(|(_, stores, _)| stores.len()).collect();
            let (picked, exhaustive) = choices(&counts, limits.images_per_point, &mut sample);
            for prefix in &picked {
                check(&point, &model.image(prefix))?;
            }
            report.points += 1;
            report.images += picked.len();
            report.exhaustive_points += usize::from(exhaustive);
            Ok(())
        };
    for (index, event) in events.iter().enumerate() {
        match event {
            Event::Store { at, bytes } => {
                ensure!(
                    (*at as usize).saturating_add(bytes.len()) <= base.len(),
                    InvalidArgument,
                    "the trace stores bytes {at}..{} past the image's {} bytes",
                    at + bytes.len() as u64,
                    base.len()
                );
                for line in model.store(*at, bytes) {
                    report.stores_to_flushed_lines.push((index, line));
                }
            }
            Event::Flush { line } => {
                if !model.flush(*line) {
                    report.clean_flushes.push((index, *line));
                }
            }
            Event::Fence => {
                // Just before the fence: the widest set of images since the
                // last one.
                visit(index, completed, in_flight, &model, &mut report)?;
                model.fence();
            }
            Event::Begin { operation } => in_flight = Some(*operation),
            Event::End => {
                for (line, ..) in &model.pending {
                    report.dirty_at_end.push((index, *line));
                }
                completed += 1;
                in_flight = None;
                // Just after the end: the operation must be whole in every image.
                visit(index, completed, in_flight, &model, &mut report)?;
            }
        }
    }
    Ok(report)
}
