//! The store's options and their defaults.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use spillway_core::{ensure, Error, Limits, Result};

use crate::bloom::FilterBits;
use crate::merge::MergeOperator;
use crate::root::ROOT_BYTES_MAX;

/// When the write-ahead log is made durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SyncMode {
    /// Never by a write: the log reaches the page cache, so a crash of the
    /// process loses nothing, a crash of the machine may lose the last
    /// writes (never part of a batch, never an older write but a newer).
    None,
    /// A background sync every interval: a crash of the machine loses at
    /// most the writes of the last interval.
    Periodic(Duration),
    /// Before every write returns. Writers that wait together share one
    /// sync (group commit).
    Always,
}

impl FromStr for SyncMode {
    type Err = Error;

    /// `always`, `none`, or a period in seconds (`0.1`): a periodic sync.
    fn from_str(text: &str) -> Result<SyncMode> {
        match text {
            "always" => Ok(SyncMode::Always),
            "none" => Ok(SyncMode::None),
            _ => text
                .parse::<f64>()
                .ok()
                .and_then(|seconds| Duration::try_from_secs_f64(seconds).ok())
                .filter(|period| !period.is_zero())
                .map(SyncMode::Periodic)
                .ok_or_else(|| {
                    Error::InvalidArgument(format!(
                        "sync must be 'always', 'none' or a period in seconds above zero, not {text:?}"
                    ))
                }),
        }
    }
}

/// How a store is shaped and how it behaves.
#[derive(Clone)]
pub struct Options {
    /// Bytes the in-memory root buffer holds before it spills (B of the
    /// seed for the root). Two root buffers exist at once while one
    /// spills.
    pub root_bytes: usize,
    /// Bytes of lists a non-root node holds before it spills (internal)
    /// or splits (leaf).
    pub node_bytes: u64,
    /// Children a node has at most before half of them move to a new
    /// sibling.
    pub fan_out: usize,
    /// Bytes of a list block (a power of two, at least 512): the unit of a
    /// GET's read and of the first-hash index.
    pub block_bytes: u32,
    /// Bloom filter bits per key a list gets at least (0: no filters,
    /// every list is read).
    pub bloom_bits_per_key: u32,
    /// Memory per key, in bits, that a list's filter, first-hash index and
    /// sketch take together: the filter gets what the others leave, but
    /// at least `bloom_bits_per_key` (0: filters of exactly that). The
    /// default of 16 bits (2 bytes) gives filters of 15 bits per key for
    /// records of 16 bytes, 14 for 64 and 11 for 256; every bit cuts a
    /// GET's false-positive reads by about a third.
    pub index_bits_per_key: u32,
    /// Fast splits a leaf's lineage makes before a slow split (0: slow
    /// splits only).
    pub fast_splits_per_slow_split: u32,
    /// Spill or slow-split a node whose estimated share of distinct keys
    /// falls below this (0 disables), bounding the filter memory and the
    /// disk that repeated keys cost. The default 3/4 keeps a leaf's old
    /// versions under a third of its live records: a store that fits the
    /// page cache better reads the device less per GET.
    pub unique_ratio_min: f64,
    /// Lists over one hash a node holds at most before it is spilled
    /// (internal) or slowly split (leaf), however few bytes they hold (0
    /// disables). A GET tests one filter per list on its path whose hash
    /// range holds its key's hash, so this bounds its
    /// false-positive reads (about 1% of it per level at 10 bits per
    /// key). It matters for small records, whose root spills bring each
    /// child lists far smaller than `node_bytes / fan_out` (a root
    /// buffer holds its records' bytes plus 23-33 bytes of index each).
    pub lists_max: usize,
    /// False-positive block reads a GET may expect from one node's lists
    /// (the sum of the rates of the filters it tests, at the hash that
    /// meets the most) before the node is spilled
    /// (internal) or slowly split (leaf), however few lists it has (0
    /// disables). With the default 0.15 it binds for large records, whose
    /// filters get fewer bits of the index budget: about 24 lists at
    /// 256-byte records (55 at 16+100), where `lists_max` allows 64. Lower
    /// bounds rewrite more: work that waits while roots spill, and then
    /// competes with reads.
    pub false_positives_max: f64,
    /// Threads a root spill or a slow split works on (0: every core):
    /// a root spill's children and a leaf's halves are written at once.
    /// A writer waits for each sync with its core idle, and the writes
    /// stall while a slow split holds up the next root spill.
    pub spill_threads: usize,
    /// When the log is synced.
    pub sync: SyncMode,
    /// The merge operator, for MERGE writes.
    pub merge_operator: Option<Arc<dyn MergeOperator>>,
    /// Largest key and value, and list files kept open at once
    /// (`open_files_max`).
    pub limits: Limits,
}

impl fmt::Debug for Options {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Options")
            .field("root_bytes", &self.root_bytes)
            .field("node_bytes", &self.node_bytes)
            .field("fan_out", &self.fan_out)
            .field("block_bytes", &self.block_bytes)
            .field("bloom_bits_per_key", &self.bloom_bits_per_key)
            .field("index_bits_per_key", &self.index_bits_per_key)
            .field("fast_splits_per_slow_split", &self.fast_splits_per_slow_split)
            .field("unique_ratio_min", &self.unique_ratio_min)
            .field("lists_max", &self.lists_max)
            .field("false_positives_max", &self.false_positives_max)
            .field("spill_threads", &self.spill_threads)
            .field("sync", &self.sync)
            .field(
                "merge_operator",
                &self.merge_operator.as_ref().map(|merge| merge.name()),
            )
            .field("limits", &self.limits)
            .finish()
    }
}

impl Default for Options {
    /// Sized for a machine of a few cores and tens of GB: a 64 MiB root
    /// (two exist while one spills), nodes four roots large, 64 children.
    /// A leaf then takes about 64 lists before it splits, so a GET tests
    /// about 64 filters per level and reads a block of about 1.6 lists
    /// per level (1% false positives), and a record is written about twice
    /// per level. The seed's 600 MB nodes and fan-out 256 favour writes
    /// further at the cost of memory and reads.
    fn default() -> Self {
        Options {
            root_bytes: 64 << 20,
            node_bytes: 256 << 20,
            fan_out: 64,
            block_bytes: 4096,
            bloom_bits_per_key: 10,
            index_bits_per_key: 16,
            fast_splits_per_slow_split: 8,
            unique_ratio_min: 0.75,
            lists_max: 64,
            false_positives_max: 0.15,
            spill_threads: 0,
            sync: SyncMode::Always,
            merge_operator: None,
            limits: Limits::default().with_value_bytes_max(8 << 20),
        }
    }
}

impl Options {
    /// How many bits each new list's filter gets.
    pub fn filter_bits(&self) -> FilterBits {
        FilterBits {
            least_per_key: self.bloom_bits_per_key,
            index_per_key: self.index_bits_per_key,
        }
    }

    /// The default limits, lowered where need be so that the largest
    /// record fits four times in a root buffer of `root_bytes` and in a
    /// node of `node_bytes` (as [`check`](Self::check) requires): for
    /// front ends that let users size the tree without sizing records.
    pub fn default_limits(root_bytes: usize, node_bytes: u64) -> Limits {
        let defaults = Options::default().limits;
        let room = (root_bytes as u64).min(node_bytes) as usize / 4;
        let key_bytes = defaults.key_bytes_max.min(room / 8).max(1);
        let value_bytes = defaults
            .value_bytes_max
            .min(room.saturating_sub(key_bytes))
            .max(1);
        defaults
            .with_key_bytes_max(key_bytes)
            .with_value_bytes_max(value_bytes)
    }

    /// Checks the options against each other.
    pub fn check(&self) -> Result<()> {
        ensure!(
            self.root_bytes >= 4 << 10 && self.root_bytes <= ROOT_BYTES_MAX,
            InvalidArgument,
            "root_bytes must be between 4 KiB and {ROOT_BYTES_MAX}, got {}",
            self.root_bytes
        );
        ensure!(
            self.node_bytes >= self.root_bytes as u64,
            InvalidArgument,
            "node_bytes ({}) must be at least root_bytes ({})",
            self.node_bytes,
            self.root_bytes
        );
        ensure!(
            (2..=1 << 16).contains(&self.fan_out),
            InvalidArgument,
            "fan_out must be between 2 and 65536, got {}",
            self.fan_out
        );
        ensure!(
            self.block_bytes.is_power_of_two() && (512..=1 << 20).contains(&self.block_bytes),
            InvalidArgument,
            "block_bytes must be a power of two between 512 and 1 MiB, got {}",
            self.block_bytes
        );
        ensure!(
            self.bloom_bits_per_key <= 64,
            InvalidArgument,
            "bloom_bits_per_key must be at most 64, got {}",
            self.bloom_bits_per_key
        );
        ensure!(
            self.index_bits_per_key <= 64,
            InvalidArgument,
            "index_bits_per_key must be at most 64, got {}",
            self.index_bits_per_key
        );
        ensure!(
            (0.0..=1.0).contains(&self.unique_ratio_min),
            InvalidArgument,
            "unique_ratio_min must be between 0 and 1, got {}",
            self.unique_ratio_min
        );
        ensure!(
            self.lists_max == 0 || self.lists_max >= 2,
            InvalidArgument,
            "lists_max must be 0 (no limit) or at least 2, got {}",
            self.lists_max
        );
        ensure!(
            self.false_positives_max.is_finite() && self.false_positives_max >= 0.0,
            InvalidArgument,
            "false_positives_max must be 0 (no limit) or above, got {}",
            self.false_positives_max
        );
        if let SyncMode::Periodic(interval) = self.sync {
            ensure!(
                !interval.is_zero(),
                InvalidArgument,
                "sync: a periodic sync needs a period above zero"
            );
        }
        self.limits.validate()?;
        let record_max = self.limits.key_bytes_max + self.limits.value_bytes_max;
        ensure!(
            record_max as u64 <= self.node_bytes / 4 && record_max <= self.root_bytes / 4,
            InvalidArgument,
            "the largest record ({record_max} bytes of key and value) must fit four times in a root buffer ({}) and a node ({})",
            self.root_bytes,
            self.node_bytes
        );
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sync_modes_parse_from_their_names_and_periods() {
        assert_eq!("always".parse::<SyncMode>().unwrap(), SyncMode::Always);
        assert_eq!("none".parse::<SyncMode>().unwrap(), SyncMode::None);
        assert_eq!(
            "0.25".parse::<SyncMode>().unwrap(),
            SyncMode::Periodic(Duration::from_millis(250))
        );
        for bad in ["sometimes", "0", "-1", "NaN", "inf", ""] {
            let error = bad.parse::<SyncMode>().unwrap_err();
            assert!(error.to_string().contains("sync must be"), "{bad}: {error}");
        }
    }

    #[test]
    fn default_limits_fit_any_tree_the_options_allow() {
        let defaults = Options::default();
        assert_eq!(
            Options::default_limits(defaults.root_bytes, defaults.node_bytes),
            defaults.limits
        );
        for (root_bytes, node_bytes) in [(4 << 10, 4 << 10), (1 << 20, 2 << 20), (64 << 10, 1 << 30)] {
            let options = Options {
                root_bytes,
                node_bytes,
                limits: Options::default_limits(root_bytes, node_bytes),
                ..Options::default()
            };
            options.check().unwrap();
            assert!(options.limits.value_bytes_max >= root_bytes / 8, "{options:?}");
        }
        let error = Options {
            root_bytes: 4 << 10,
            node_bytes: 4 << 10,
            ..Options::default()
        }
        .check()
        .unwrap_err();
        assert!(error.to_string().contains("largest record"), "{error}");
    }
}
