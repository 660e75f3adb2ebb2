//! The decoders of the stream index's files, over byte images: for the fuzz
//! targets (`crates/stream/fuzz`) and for tools that check a file alone.
//! Each returns what it decoded or an error, never panics, and allocates
//! only what the bytes really hold.

use std::path::Path;

use spillway_core::Result;

use crate::segment::{self, SegmentMeta};

/// Decodes a whole segment file's bytes (`path` names it in errors),
/// checking every leaf's checksum, order and summary, as `verify` does.
pub fn check_segment(path: &Path, bytes: &[u8]) -> Result<SegmentMeta> {
    segment::check_bytes(path, bytes)
}

/// Rewrites every checksum of a segment's bytes to match their contents
/// (as far as each parses), so that a fuzzer's mutations reach the
/// decoder's structural checks instead of stopping at a checksum.
pub fn reseal_segment(bytes: &mut [u8]) {
    segment::reseal(bytes)
}
