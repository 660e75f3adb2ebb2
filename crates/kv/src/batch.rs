//! Write batches: several writes applied, logged and recovered together,
//! all or none.

use spillway_core::{hash64, DecodeError, Hash64};

use crate::record::{self, Kind, RecordRef};

/// Writes to apply at once. Keys are hashed as they are added, outside
/// the store's locks.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WriteBatch {
    /// Records without their hashes ([`record::encode_body`]), in order.
    data: Vec<u8>,
    hashes: Vec<Hash64>,
    /// Where each record starts in `data`: a root buffer takes the
    /// records as they are, in one copy, and needs no decoding to find
    /// them.
    starts: Vec<u32>,
    /// PUT, DELETE and MERGE records in the batch.
    kind_counts: [u64; 3],
    /// Bytes of keys and values.
    user_bytes: u64,
    /// The longest key and the longest value: what a store checks against
    /// its limits without going through the records.
    longest: (usize, usize),
}

impl WriteBatch {
    /// An empty batch.
    pub fn new() -> Self {
        Self::default()
    }

    fn push(&mut self, kind: Kind, key: &[u8], value: &[u8]) {
        self.starts.push(self.start_of_next());
        record::encode_body(kind, key, value, &mut self.data);
        self.hashes.push(hash64(key));
        self.count(kind, key, value);
    }

    /// Counts a record added to the batch.
    fn count(&mut self, kind: Kind, key: &[u8], value: &[u8]) {
        self.kind_counts[kind as usize - 1] += 1;
        self.user_bytes += (key.len() + value.len()) as u64;
        self.longest = (self.longest.0.max(key.len()), self.longest.1.max(value.len()));
    }

    /// Sets `key` to `value`.
    pub fn put(&mut self, key: &[u8], value: &[u8]) -> &mut Self {
        self.push(Kind::Put, key, value);
        self
    }

    /// Removes `key`.
    pub fn delete(&mut self, key: &[u8]) -> &mut Self {
        self.push(Kind::Delete, key, b"");
        self
    }

    /// Folds `operand` into `key`'s value with the store's merge operator.
    pub fn merge(&mut self, key: &[u8], operand: &[u8]) -> &mut Self {
        self.push(Kind::Merge, key, operand);
        self
    }

    /// Writes in the batch.
    pub fn len(&self) -> usize {
        self.hashes.len()
    }

    /// Whether the batch holds no write.
    pub fn is_empty(&self) -> bool {
        self.hashes.is_empty()
    }

    /// Bytes of the batch's records.
    pub fn data_bytes(&self) -> usize {
        self.data.len()
    }

    /// PUT, DELETE and MERGE records in the batch.
    pub fn kind_counts(&self) -> [u64; 3] {
        self.kind_counts
    }

    /// Bytes of keys and values in the batch.
    pub fn user_bytes(&self) -> u64 {
        self.user_bytes
    }

    /// The lengths of the longest key and the longest value in the batch.
    pub fn longest(&self) -> (usize, usize) {
        self.longest
    }

    /// Where the next record will start in the data. Root buffers address
    /// their records with 32 bits; a batch past 4 GiB gets no true starts,
    /// but [`Store::write`](crate::Store::write) refuses any batch over half
    /// a root buffer before its starts are used.
    fn start_of_next(&self) -> u32 {
        u32::try_from(self.data.len()).unwrap_or(u32::MAX)
    }

    /// Empties the batch, keeping its memory.
    pub fn clear(&mut self) {
        self.data.clear();
        self.hashes.clear();
        self.starts.clear();
        self.kind_counts = [0; 3];
        self.user_bytes = 0;
        self.longest = (0, 0);
    }

    /// The writes, in order.
    pub fn iter(&self) -> BatchIter<'_> {
        BatchIter {
            data: &self.data,
            hashes: &self.hashes,
            at: 0,
            index: 0,
        }
    }

    /// The keys' hashes, in order.
    pub(crate) fn hashes(&self) -> &[Hash64] {
        &self.hashes
    }

    /// The records' stored form (what the log holds).
    pub(crate) fn data(&self) -> &[u8] {
        &self.data
    }

    /// Where each record starts in [`data`](Self::data), in order.
    pub(crate) fn starts(&self) -> &[u32] {
        &self.starts
    }

    /// A batch of `count` records read back from their stored form, hashes
    /// computed again.
    pub(crate) fn decode(data: &[u8], count: usize) -> Result<WriteBatch, DecodeError> {
        if u32::try_from(data.len()).is_err() {
            return Err(DecodeError::new(format!("a batch of {} bytes", data.len())));
        }
        let mut batch = WriteBatch {
            data: data.to_vec(),
            hashes: Vec::with_capacity(count.min(data.len())),
            starts: Vec::with_capacity(count.min(data.len())),
            ..WriteBatch::default()
        };
        let mut at = 0;
        while at < data.len() {
            let ((kind, key, value), used) = record::decode_body(&data[at..])?;
            batch.starts.push(at as u32);
            batch.hashes.push(hash64(key));
            batch.count(kind, key, value);
            at += used;
        }
        if batch.hashes.len() != count {
            return Err(DecodeError::new(format!(
                "batch holds {} records, its header says {count}",
                batch.hashes.len()
            )));
        }
        Ok(batch)
    }
}

/// The writes of a [`WriteBatch`], in order.
#[derive(Debug)]
pub struct BatchIter<'a> {
    data: &'a [u8],
    hashes: &'a [Hash64],
    at: usize,
    index: usize,
}

impl<'a> Iterator for BatchIter<'a> {
    type Item = RecordRef<'a>;

    fn next(&mut self) -> Option<RecordRef<'a>> {
        let hash = *self.hashes.get(self.index)?;
        let ((kind, key, value), used) =
            record::decode_body(&self.data[self.at..]).expect("a batch holds the records it was given");
        self.at += used;
        self.index += 1;
        Some(RecordRef {
            hash,
            kind,
            key,
            value,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_keeps_its_writes_in_order_and_decodes_back() {
        let mut batch = WriteBatch::new();
        batch.put(b"a", b"1").delete(b"b").merge(b"c", b"+2");
        let writes: Vec<(Kind, Vec<u8>, Vec<u8>)> = batch
            .iter()
            .map(|record| (record.kind, record.key.to_vec(), record.value.to_vec()))
            .collect();
        assert_eq!(
            writes,
            vec![
                (Kind::Put, b"a".to_vec(), b"1".to_vec()),
                (Kind::Delete, b"b".to_vec(), Vec::new()),
                (Kind::Merge, b"c".to_vec(), b"+2".to_vec()),
            ]
        );
        assert_eq!(batch.iter().next().unwrap().hash, hash64(b"a"));
        assert_eq!((batch.kind_counts(), batch.user_bytes()), ([1, 1, 1], 6));
        assert_eq!(WriteBatch::decode(batch.data(), 3).unwrap(), batch);
        assert!(WriteBatch::decode(batch.data(), 2).is_err());
        assert!(WriteBatch::decode(&batch.data()[..batch.data().len() - 1], 3).is_err());
        batch.clear();
        assert!(batch.is_empty());
    }
}
