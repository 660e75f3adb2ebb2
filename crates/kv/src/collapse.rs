//! Collapsing (seed 001 §3.1): several records of one key become one, the
//! newest PUT or DELETE winning and MERGE operands folded into what they
//! follow. Spills, splits, scans and GETs all fold through [`Folded`]; the
//! k-way [`Interleaver`] feeds it the records of several sorted sources.

use std::sync::Arc;

use spillway_core::{Error, Hash64, Result};

use crate::merge::MergeOperator;
use crate::record::{Kind, RecordRef};

/// One key's records folded, oldest to newest.
#[derive(Debug, Default)]
pub struct Folded {
    kind: Option<Kind>,
    value: Vec<u8>,
}

impl Folded {
    /// Starts over with `record`, the oldest of its key.
    pub fn start(&mut self, kind: Kind, value: &[u8]) {
        self.kind = Some(kind);
        self.value.clear();
        self.value.extend_from_slice(value);
    }

    /// Empties it (`kind` `None`), keeping its memory.
    pub fn clear(&mut self) {
        self.kind = None;
    }

    /// Folds in `kind`/`value`, newer than everything folded so far.
    ///
    /// | folded | newer PUT/DELETE | newer MERGE m |
    /// |---|---|---|
    /// | PUT v | the newer | PUT v ∘ m |
    /// | DELETE | the newer | PUT m |
    /// | MERGE o | the newer | MERGE o ∘ m |
    pub fn apply(
        &mut self,
        key: &[u8],
        kind: Kind,
        value: &[u8],
        merge: Option<&dyn MergeOperator>,
    ) -> Result<()> {
        match (self.kind, kind) {
            (None, _) | (_, Kind::Put | Kind::Delete) | (Some(Kind::Delete), Kind::Merge) => {
                let kind = if kind == Kind::Merge && self.kind.is_some() {
                    Kind::Put
                } else {
                    kind
                };
                self.start(kind, value);
            }
            (Some(Kind::Put | Kind::Merge), Kind::Merge) => {
                let Some(merge) = merge else {
                    return Err(Error::Internal(
                        "a MERGE record in a store without a merge operator".into(),
                    ));
                };
                merge.merge(key, &mut self.value, value)?;
            }
        }
        Ok(())
    }

    /// The folded kind (`None` before the first record).
    pub fn kind(&self) -> Option<Kind> {
        self.kind
    }

    /// The folded value.
    pub fn value(&self) -> &[u8] {
        &self.value
    }

    /// The value a GET answers: `None` for a tombstone.
    pub fn into_answer(self) -> Option<Vec<u8>> {
        match self.kind {
            Some(Kind::Put | Kind::Merge) => Some(self.value),
            Some(Kind::Delete) | None => None,
        }
    }
}

/// Records sorted by (hash, key), at most one per key: a list, or a sorted
/// run of a root buffer.
pub trait Source: Send {
    /// The current record; `None` when the source is exhausted.
    fn record(&self) -> Option<RecordRef<'_>>;

    /// Moves to the next record.
    fn advance(&mut self) -> Result<()>;

    /// Records the source folded into others itself so far (a root's
    /// versions of one key), for the count of records read.
    fn collapsed(&self) -> u64 {
        0
    }
}

/// Interleaves sources into one sequence in (hash, key) order, collapsing each
/// key's records. Sources are given oldest first; among records of one
/// key the older source's comes first.
pub struct Interleaver {
    sources: Vec<Box<dyn Source>>,
    /// A binary min-heap of sources by (hash, key, index): each source's
    /// index with the hash of its current record. Hashes rarely tie, so
    /// most comparisons read this array alone, without asking the
    /// sources (a call through `dyn` each) for their records.
    heap: Vec<(Hash64, usize)>,
    merge: Option<Arc<dyn MergeOperator>>,
    hash: Hash64,
    key: Vec<u8>,
    folded: Folded,
    records_in: u64,
    /// Whether the heap top's current record was the last answer: its
    /// source moves on at the next call.
    top_taken: bool,
}

impl std::fmt::Debug for Interleaver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Interleaver")
            .field("sources", &self.sources.len())
            .field("records_in", &self.records_in)
            .finish()
    }
}

impl Interleaver {
    /// An interleaver over `sources` (oldest first), each positioned by its first
    /// `advance` here.
    pub fn new(mut sources: Vec<Box<dyn Source>>, merge: Option<Arc<dyn MergeOperator>>) -> Result<Self> {
        for source in &mut sources {
            source.advance()?;
        }
        let heap = sources
            .iter()
            .enumerate()
            .filter_map(|(index, source)| Some((source.record()?.hash, index)))
            .collect();
        let mut interleaver = Interleaver {
            heap,
            sources,
            merge,
            hash: 0,
            key: Vec::new(),
            folded: Folded::default(),
            records_in: 0,
            top_taken: false,
        };
        for i in (0..interleaver.heap.len() / 2).rev() {
            interleaver.sift_down(i);
        }
        Ok(interleaver)
    }

    /// Whether heap entry `a` comes before heap entry `b`.
    #[inline]
    fn less(&self, (a_hash, a): (Hash64, usize), (b_hash, b): (Hash64, usize)) -> bool {
        if a_hash != b_hash {
            return a_hash < b_hash;
        }
        let key = |index: usize| {
            self.sources[index]
                .record()
                .expect("sources in the heap have a record")
                .key
        };
        (key(a), a) < (key(b), b)
    }

    fn sift_down(&mut self, mut i: usize) {
        loop {
            let left = 2 * i + 1;
            if left >= self.heap.len() {
                return;
            }
            let right = left + 1;
            let child = if right < self.heap.len() && self.less(self.heap[right], self.heap[left]) {
                right
            } else {
                left
            };
            if !self.less(self.heap[child], self.heap[i]) {
                return;
            }
            self.heap.swap(i, child);
            i = child;
        }
    }

    /// Advances the source on top of the heap and restores the heap.
    fn advance_top(&mut self) -> Result<()> {
        let top = self.heap[0].1;
        self.sources[top].advance()?;
        match self.sources[top].record() {
            Some(record) => self.heap[0].0 = record.hash,
            None => {
                let last = self.heap.pop().expect("the heap is not empty");
                if self.heap.is_empty() {
                    return Ok(());
                }
                self.heap[0] = last;
            }
        }
        self.sift_down(0);
        Ok(())
    }

    /// The next key's collapsed record, `None` when every source is done.
    ///
    /// A key held by one source alone (no other source's current record
    /// shares its hash: only the heap top's children can) is answered
    /// with that source's record itself, and its source moves on at the
    /// next call; only keys in several sources are copied and folded.
    pub fn next_record(&mut self) -> Result<Option<RecordRef<'_>>> {
        if std::mem::take(&mut self.top_taken) {
            self.advance_top()?;
        }
        let Some(&(hash, top)) = self.heap.first() else {
            return Ok(None);
        };
        debug_assert!(self.records_in == 0 || self.hash <= hash, "sources out of order");
        self.hash = hash;
        self.records_in += 1;
        let shared = self.heap[1..self.heap.len().min(3)]
            .iter()
            .any(|&(other, _)| other == hash);
        if !shared {
            self.top_taken = true;
            return Ok(self.sources[top].record());
        }
        let record = self.sources[top]
            .record()
            .expect("sources in the heap have a record");
        self.key.clear();
        self.key.extend_from_slice(record.key);
        self.folded.start(record.kind, record.value);
        self.advance_top()?;
        while let Some(&(hash, top)) = self.heap.first() {
            if hash != self.hash {
                break;
            }
            let record = self.sources[top]
                .record()
                .expect("sources in the heap have a record");
            if record.key != self.key.as_slice() {
                break;
            }
            self.folded
                .apply(&self.key, record.kind, record.value, self.merge.as_deref())?;
            self.records_in += 1;
            self.advance_top()?;
        }
        Ok(Some(RecordRef {
            hash: self.hash,
            kind: self.folded.kind().expect("a record was folded"),
            key: &self.key,
            value: self.folded.value(),
        }))
    }

    /// Records read from the sources so far (versions a source folded
    /// itself included).
    pub fn records_in(&self) -> u64 {
        self.records_in + self.sources.iter().map(|source| source.collapsed()).sum::<u64>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::merge::AggregateMerge;
    use spillway_agg::Value;

    /// A source over owned records, for tests.
    pub(crate) struct VecSource {
        records: Vec<(Hash64, Kind, Vec<u8>, Vec<u8>)>,
        at: Option<usize>,
    }

    impl VecSource {
        pub(crate) fn new(records: Vec<(Hash64, Kind, Vec<u8>, Vec<u8>)>) -> Self {
            VecSource { records, at: None }
        }
    }

    impl Source for VecSource {
        fn record(&self) -> Option<RecordRef<'_>> {
            let (hash, kind, key, value) = self.records.get(self.at?)?;
            Some(RecordRef {
                hash: *hash,
                kind: *kind,
                key,
                value,
            })
        }

        fn advance(&mut self) -> Result<()> {
            self.at = Some(self.at.map_or(0, |at| at + 1));
            Ok(())
        }
    }

    fn put(hash: Hash64, key: &str, value: &str) -> (Hash64, Kind, Vec<u8>, Vec<u8>) {
        (hash, Kind::Put, key.into(), value.into())
    }

    #[test]
    fn newer_sources_win_and_colliding_keys_stay_apart() {
        let older = VecSource::new(vec![put(1, "a", "1"), put(5, "x", "old"), put(5, "y", "y1")]);
        let newer = VecSource::new(vec![
            put(5, "x", "new"),
            (5, Kind::Delete, b"y".to_vec(), Vec::new()),
            put(9, "z", "9"),
        ]);
        let mut interleaver = Interleaver::new(vec![Box::new(older), Box::new(newer)], None).unwrap();
        let mut out = Vec::new();
        while let Some(record) = interleaver.next_record().unwrap() {
            out.push((
                record.hash,
                record.kind,
                record.key.to_vec(),
                record.value.to_vec(),
            ));
        }
        assert_eq!(
            out,
            vec![
                put(1, "a", "1"),
                put(5, "x", "new"),
                (5, Kind::Delete, b"y".to_vec(), Vec::new()),
                put(9, "z", "9"),
            ]
        );
        assert_eq!(interleaver.records_in(), 6);
    }

    #[test]
    fn merges_fold_into_what_they_follow() {
        let sum = AggregateMerge::new("sum").unwrap();
        let operand = |n| sum.operand(Value::Int(n)).unwrap();
        let mut folded = Folded::default();
        folded.start(Kind::Merge, &operand(1));
        folded.apply(b"k", Kind::Merge, &operand(2), Some(&sum)).unwrap();
        assert_eq!(folded.kind(), Some(Kind::Merge));
        folded.apply(b"k", Kind::Delete, b"", Some(&sum)).unwrap();
        folded.apply(b"k", Kind::Merge, &operand(10), Some(&sum)).unwrap();
        assert_eq!(
            folded.kind(),
            Some(Kind::Put),
            "a merge after a delete starts from nothing"
        );
        folded.apply(b"k", Kind::Merge, &operand(5), Some(&sum)).unwrap();
        let answer = folded.into_answer().unwrap();
        assert_eq!(sum.finalize(&answer).unwrap(), spillway_agg::Output::Int(15));

        let mut folded = Folded::default();
        folded.start(Kind::Put, b"v");
        let error = folded.apply(b"k", Kind::Merge, b"m", None).unwrap_err();
        assert_eq!(error.kind(), spillway_core::ErrorKind::Internal);
    }
}
