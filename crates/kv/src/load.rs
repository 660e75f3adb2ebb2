//! Loading a store in bulk: operations in `spillway gen kv`'s text format
//! (hexadecimal keys and values) parsed into writes, and a [`Loader`] that
//! writes them in batches, stopping between batches when interrupted.
//!
//! ```text
//! PUT<TAB>hex key<TAB>hex value
//! MERGE<TAB>hex key<TAB>hex value
//! DELETE<TAB>hex key
//! GET<TAB>hex key          (skipped: a load writes)
//! ```

use spillway_core::{ensure, Error, Interrupt, Result};

use crate::batch::WriteBatch;
use crate::record::Kind;
use crate::store::Store;

/// A write read from a line of operations.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Operation {
    /// What it does.
    pub kind: Kind,
    /// The key.
    pub key: Vec<u8>,
    /// The value (empty for a delete).
    pub value: Vec<u8>,
}

impl Operation {
    /// The write of one line of the text format: `None` for a blank line
    /// or a GET, an `InvalidArgument` error for a line that is neither
    /// an operation nor hexadecimal where it must be.
    pub fn parse(line: &str) -> Result<Option<Operation>> {
        let fields: Vec<&str> = line.trim_end_matches('\r').split('\t').collect();
        let (kind, key, value) = match fields.as_slice() {
            [""] => return Ok(None),
            ["PUT", key, value] => (Some(Kind::Put), *key, *value),
            ["MERGE", key, value] => (Some(Kind::Merge), *key, *value),
            ["DELETE", key] => (Some(Kind::Delete), *key, ""),
            ["GET", key] => (None, *key, ""),
            _ => return Err(Self::malformed()),
        };
        let (Some(key), Some(value)) = (hex_decode(key), hex_decode(value)) else {
            return Err(Self::malformed());
        };
        Ok(kind.map(|kind| Operation { kind, key, value }))
    }

    fn malformed() -> Error {
        Error::InvalidArgument(
            "expected PUT/MERGE<TAB>hex key<TAB>hex value or DELETE/GET<TAB>hex key".into(),
        )
    }
}

/// The bytes `text` spells in hexadecimal (two digits a byte, either
/// case), or `None` if it spells none.
pub fn hex_decode(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|at| u8::from_str_radix(text.get(at..at + 2)?, 16).ok())
        .collect()
}

/// Writes operations to a store in batches of a given length, each
/// logged (and synced) once. In merge mode (an aggregate merge operator)
/// every put and merge is a MERGE of the value read as a number where it
/// reads as one ([`AggregateMerge::operand_of_bytes`](crate::AggregateMerge::operand_of_bytes)).
#[derive(Debug)]
pub struct Loader<'a> {
    store: &'a Store,
    batch: WriteBatch,
    batch_len: usize,
    written: u64,
}

impl<'a> Loader<'a> {
    /// A loader of `store` writing `batch_len` operations at a time.
    pub fn new(store: &'a Store, batch_len: usize) -> Result<Loader<'a>> {
        ensure!(
            batch_len >= 1,
            InvalidArgument,
            "batch must be at least 1 operation, got 0"
        );
        Ok(Loader {
            store,
            batch: WriteBatch::new(),
            batch_len,
            written: 0,
        })
    }

    /// Adds one operation, writing the batch once it is full (then `true`).
    /// A batch is written unless `interrupt` was raised: then nothing of
    /// it reached the log, and the error is `Interrupted`.
    pub fn push(&mut self, kind: Kind, key: &[u8], value: &[u8], interrupt: &Interrupt) -> Result<bool> {
        match (kind, self.store.aggregate()) {
            (Kind::Delete, _) => {
                self.batch.delete(key);
            }
            (Kind::Put | Kind::Merge, Some(merge)) => {
                self.batch.merge(key, &merge.operand_of_bytes(value)?);
            }
            (Kind::Put, None) => {
                self.batch.put(key, value);
            }
            (Kind::Merge, None) => {
                self.batch.merge(key, value);
            }
        }
        if self.batch.len() < self.batch_len {
            return Ok(false);
        }
        self.write(interrupt)?;
        Ok(true)
    }

    /// Writes what the last batch holds; the operations written in all.
    pub fn finish(&mut self, interrupt: &Interrupt) -> Result<u64> {
        self.write(interrupt)?;
        Ok(self.written)
    }

    /// The store it writes to.
    pub fn store(&self) -> &'a Store {
        self.store
    }

    /// Operations written so far (a batch not yet written not counted).
    pub fn written(&self) -> u64 {
        self.written
    }

    fn write(&mut self, interrupt: &Interrupt) -> Result<()> {
        self.store.write_interruptible(&self.batch, interrupt)?;
        self.written += self.batch.len() as u64;
        self.batch.clear();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{AggregateMerge, MergeOperator, Options};
    use spillway_core::ErrorKind;
    use std::sync::Arc;

    #[test]
    fn lines_parse_into_writes_and_gets_are_skipped() {
        let put = Operation::parse("PUT\t6b31\t7631\r").unwrap().unwrap();
        assert_eq!(
            (put.kind, &put.key[..], &put.value[..]),
            (Kind::Put, &b"k1"[..], &b"v1"[..])
        );
        let delete = Operation::parse("DELETE\t6B").unwrap().unwrap();
        assert_eq!((delete.kind, &delete.key[..]), (Kind::Delete, &b"k"[..]));
        assert_eq!(
            Operation::parse("MERGE\t00\t").unwrap().unwrap().kind,
            Kind::Merge
        );
        assert_eq!(Operation::parse("GET\t6b").unwrap(), None);
        assert_eq!(Operation::parse("").unwrap(), None);
        for bad in [
            "PUT\t6b",
            "PUT\t6g\t00",
            "DELETE\t6b3",
            "UPSERT\t6b\t00",
            "PUT 6b 00",
        ] {
            let error = Operation::parse(bad).unwrap_err();
            assert_eq!(error.kind(), ErrorKind::InvalidArgument, "{bad}");
            assert!(error.to_string().contains("hex key"), "{error}");
        }
        assert_eq!(hex_decode("00ff7F"), Some(vec![0, 255, 127]));
        assert_eq!(hex_decode("é0"), None);
    }

    #[test]
    fn a_loader_writes_full_batches_and_the_rest_at_the_end() {
        let dir = tempfile::tempdir().unwrap();
        let options = Options {
            merge_operator: Some(Arc::new(AggregateMerge::new("sum").unwrap()) as Arc<dyn MergeOperator>),
            sync: crate::SyncMode::None,
            ..Options::default()
        };
        let store = Store::open(dir.path(), options).unwrap();
        assert!(Loader::new(&store, 0).is_err());
        let interrupt = Interrupt::new();
        let mut loader = Loader::new(&store, 2).unwrap();
        assert!(!loader.push(Kind::Put, b"a", b" 2", &interrupt).unwrap());
        assert!(loader.push(Kind::Merge, b"a", b"3", &interrupt).unwrap());
        assert!(!loader.push(Kind::Merge, b"b", b"1.5", &interrupt).unwrap());
        assert_eq!(loader.written(), 2);
        assert_eq!(loader.finish(&interrupt).unwrap(), 3);
        let sum = store.aggregate().unwrap();
        let total = |key: &[u8]| sum.finalize(&store.get(key).unwrap().unwrap()).unwrap();
        assert_eq!(total(b"a"), spillway_agg::Output::Int(5));
        assert_eq!(total(b"b"), spillway_agg::Output::Float(1.5));
        let stopped = Interrupt::new();
        stopped.raise();
        let mut loader = Loader::new(&store, 1).unwrap();
        let error = loader.push(Kind::Delete, b"a", b"", &stopped).unwrap_err();
        assert_eq!(error.kind(), ErrorKind::Interrupted);
        assert_eq!(loader.written(), 0);
        store.close().unwrap();
    }
}
