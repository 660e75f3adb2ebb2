//! What the indexes hold: a key, a timestamp and where the record is.

/// One record's place in an index. The index never holds values (as in
/// the seed): `location` says where the record lies in its buffer or
/// segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Entry {
    /// The record's key, order-preserving encoded (see [`crate::key`]).
    pub key: u64,
    /// The record's timestamp.
    pub time: u64,
    /// Where the record is: its position in the buffer or segment.
    pub location: u64,
}

/// What the trees index: an entry ordered by its key first, then by
/// whatever else it holds (so that sorting a leaf's entries puts them in
/// key order).
pub trait Indexed: Copy + Ord + std::fmt::Debug + Send + Sync {
    /// The key the tree routes the entry by.
    fn key(&self) -> u64;
}

impl Indexed for Entry {
    #[inline]
    fn key(&self) -> u64 {
        self.key
    }
}

/// An entry of `key` at `location` and time 0, for tests.
#[cfg(test)]
pub(crate) fn entry(key: u64, location: u64) -> Entry {
    Entry {
        key,
        time: 0,
        location,
    }
}

/// A xorshift64 generator seeded with `state` (not 0), for tests.
#[cfg(test)]
pub(crate) fn xorshift(mut state: u64) -> impl FnMut() -> u64 {
    move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    }
}
