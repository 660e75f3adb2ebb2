//! What a [`StreamIndex`](crate::StreamIndex) is opened with: the buffer's
//! size and index, the segments' shape, durability, the cache and tiers.

use std::str::FromStr;

use serde::Serialize;
use spillway_core::{ensure, Error, Result};

/// How each buffer is indexed. Named by its [`name`](Self::name) (and
/// parsed from it, `rebuild` with the default threshold); serialized as
/// that name and `rebuild_threshold` (null but for `rebuild`), as users
/// set it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(into = "TemplateSetting")]
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

/// The default share of overflowed leaves above which `rebuild` makes a
/// new template.
pub const REBUILD_THRESHOLD_DEFAULT: f64 = 0.05;

impl TemplatePolicy {
    /// The policy's name: `none`, `fixed` or `rebuild`.
    pub fn name(&self) -> &'static str {
        match self {
            TemplatePolicy::None => "none",
            TemplatePolicy::Fixed => "fixed",
            TemplatePolicy::Rebuild { .. } => "rebuild",
        }
    }

    /// `rebuild` with `threshold` when one is given; a threshold given
    /// with another policy is refused, since it would be silently ignored.
    pub fn with_threshold(self, threshold: Option<f64>) -> Result<TemplatePolicy> {
        match (self, threshold) {
            (policy, None) => Ok(policy),
            (TemplatePolicy::Rebuild { .. }, Some(threshold)) => Ok(TemplatePolicy::Rebuild { threshold }),
            (policy, Some(_)) => Err(Error::InvalidArgument(format!(
                "rebuild_threshold applies only to template 'rebuild', not '{}'",
                policy.name()
            ))),
        }
    }
}

impl FromStr for TemplatePolicy {
    type Err = Error;

    fn from_str(name: &str) -> Result<TemplatePolicy> {
        match name {
            "none" => Ok(TemplatePolicy::None),
            "fixed" => Ok(TemplatePolicy::Fixed),
            "rebuild" => Ok(TemplatePolicy::Rebuild {
                threshold: REBUILD_THRESHOLD_DEFAULT,
            }),
            other => Err(Error::InvalidArgument(format!(
                "template must be 'none', 'fixed' or 'rebuild', not '{other}'"
            ))),
        }
    }
}

/// A [`TemplatePolicy`] as users set it: two options.
#[derive(Serialize)]
struct TemplateSetting {
    template: &'static str,
    rebuild_threshold: Option<f64>,
}

impl From<TemplatePolicy> for TemplateSetting {
    fn from(policy: TemplatePolicy) -> Self {
        TemplateSetting {
            template: policy.name(),
            rebuild_threshold: match policy {
                TemplatePolicy::Rebuild { threshold } => Some(threshold),
                _ => None,
            },
        }
    }
}

/// What a [`StreamIndex`](crate::StreamIndex) is opened with; serialized
/// with the options users set (the template as two, see
/// [`TemplatePolicy`]).
#[derive(Debug, Clone, Serialize)]
pub struct Options {
    /// Bytes of records (values plus a fixed cost per record) a buffer
    /// holds before it is flushed as a segment.
    pub buffer_bytes: usize,
    /// Entries per leaf, in the buffer's tree and in segments.
    pub leaf_capacity: usize,
    /// Children per internal node.
    pub fan_out: usize,
    /// How buffers are indexed.
    #[serde(flatten)]
    pub template: TemplatePolicy,
    /// Leaf fill a rebuilt template aims at, in (0, 1].
    pub fill: f64,
    /// The longest value accepted (capped at half of `buffer_bytes`).
    pub value_bytes_max: usize,
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
            template: TemplatePolicy::Rebuild {
                threshold: REBUILD_THRESHOLD_DEFAULT,
            },
            fill: 0.7,
            value_bytes_max: 1 << 20,
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
                "rebuild_threshold must be in 0..=1, got {threshold}"
            );
        }
        Ok(())
    }

    /// The longest value accepted: `value_bytes_max`, but never more than
    /// half a buffer (so a buffer always holds two) nor what a log frame
    /// can say.
    pub fn value_limit(&self) -> usize {
        self.value_bytes_max
            .min(self.buffer_bytes / 2)
            .min(u32::MAX as usize)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn template_policies_by_name() {
        assert_eq!("fixed".parse::<TemplatePolicy>().unwrap(), TemplatePolicy::Fixed);
        let rebuild: TemplatePolicy = "rebuild".parse().unwrap();
        assert_eq!(
            rebuild.with_threshold(Some(0.2)).unwrap(),
            TemplatePolicy::Rebuild { threshold: 0.2 }
        );
        assert!(TemplatePolicy::None
            .with_threshold(Some(0.2))
            .unwrap_err()
            .to_string()
            .contains("rebuild_threshold"));
        assert!("grown"
            .parse::<TemplatePolicy>()
            .unwrap_err()
            .to_string()
            .contains("'grown'"));
    }
}
