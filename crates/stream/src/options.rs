//! What a [`StreamIndex`](crate::StreamIndex) is opened with: the buffer's
//! size and index, the segments' shape, durability, the cache and tiers.

use spillway_core::{ensure, Result};

/// How each buffer is indexed.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum TemplatePolicy {
    /// No template: every buffer grows an ordinary B+ tree with splits
    /// (the seed's baseline, "rebuilt per buffer").
    None,
    /// The seed: the first buffer's grown tree becomes the template of
    /// every later buffer, never changed.
    Fixed,
    /// Beyond the seed: when a flushed buffer had more than `threshold`
    /// of its leaves overflowed, or of its entries in overflow nodes (keys
    /// drifting past the template's edge pile up in one leaf), the next
    /// buffer gets a template rebuilt from that buffer's keys
    /// (equal-count leaves at the target fill); within a buffer, the
    /// leaves on course to overflow are cut again. The first buffer starts
    /// from a template of one leaf, cut as soon as it holds enough keys,
    /// instead of growing a B+ tree.
    Rebuild {
        /// Share of overflowed leaves or overflow entries, in 0..=1, above
        /// which to rebuild.
        threshold: f64,
    },
}

/// What a [`StreamIndex`](crate::StreamIndex) is opened with.
#[derive(Debug, Clone)]
pub struct Options {
    /// Bytes of records (values plus a fixed cost per record) a buffer
    /// holds before it is flushed as a segment.
    pub buffer_bytes: usize,
    /// Entries per leaf, in the buffer's tree and in segments.
    pub leaf_capacity: usize,
    /// Children per internal node.
    pub fan_out: usize,
    /// How buffers are indexed.
    pub template: TemplatePolicy,
    /// Leaf fill a rebuilt template aims at, in (0, 1].
    pub fill: f64,
    /// The longest value accepted (capped at half of `buffer_bytes`).
    pub max_value_bytes: usize,
    /// Refuse writes whose time is before the latest time written.
    pub ordered_time: bool,
    /// Sync the log before a write returns (else a crash of the machine,
    /// not of the process, may lose acknowledged writes).
    pub sync: bool,
    /// Bytes of decoded segments kept in memory (0: read leaves from the
    /// file on every query).
    pub cache_bytes: usize,
    /// Merge adjacent segments held in the cache into tiers in the
    /// background, so that a range query merges a few sources rather than
    /// one per flushed buffer (see the crate's DESIGN.md).
    pub tiers: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            buffer_bytes: 64 << 20,
            leaf_capacity: 64,
            fan_out: 64,
            template: TemplatePolicy::Rebuild { threshold: 0.05 },
            fill: 0.7,
            max_value_bytes: 1 << 20,
            ordered_time: false,
            sync: true,
            cache_bytes: 1 << 30,
            tiers: true,
        }
    }
}

impl Options {
    pub(crate) fn check(&self) -> Result<()> {
        ensure!(
            self.buffer_bytes >= 4096,
            InvalidArgument,
            "buffer_bytes must be at least 4096, got {}",
            self.buffer_bytes
        );
        ensure!(
            (2..=1 << 16).contains(&self.leaf_capacity),
            InvalidArgument,
            "leaf_capacity must be in 2..=65536, got {}",
            self.leaf_capacity
        );
        ensure!(
            (3..=1 << 16).contains(&self.fan_out),
            InvalidArgument,
            "fan_out must be in 3..=65536, got {}",
            self.fan_out
        );
        ensure!(
            self.fill > 0.0 && self.fill <= 1.0,
            InvalidArgument,
            "fill must be in (0, 1], got {}",
            self.fill
        );
        if let TemplatePolicy::Rebuild { threshold } = self.template {
            ensure!(
                (0.0..=1.0).contains(&threshold),
                InvalidArgument,
                "the template rebuild threshold must be in 0..=1, got {threshold}"
            );
        }
        Ok(())
    }

    /// The longest value accepted: `max_value_bytes`, but never more than
    /// half a buffer (so a buffer always holds two) nor what a log frame
    /// can say.
    pub fn value_limit(&self) -> usize {
        self.max_value_bytes
            .min(self.buffer_bytes / 2)
            .min(u32::MAX as usize)
    }
}
