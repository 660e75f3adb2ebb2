//! The decoders of the aggregator's byte formats, over byte images: for the
//! fuzz targets (`crates/agg/fuzz`). Each takes any bytes and never panics
//! on bad ones; a panic is a bug the fuzzer found.

/// Decodes `data` as a CBT fragment with its header in front (codec byte,
/// record count and decoded length, u32 LE each). Decoding must give an
/// error or records in hash order that encode back to a fragment decoding
/// to the same records; anything else panics.
pub fn check_fragment(data: &[u8]) {
    crate::cbt::check_fragment(data)
}
