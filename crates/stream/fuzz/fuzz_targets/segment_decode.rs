//! The segment decoder on arbitrary bytes, as they are and with their
//! checksums rewritten (so mutations reach the structural checks): an
//! error or a decoded segment, never a panic or an unbounded allocation.
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;
use spillway_stream::format;

fuzz_target!(|data: &[u8]| {
    let path = Path::new("fuzz.seg");
    let _ = format::check_segment(path, data);
    let mut resealed = data.to_vec();
    format::reseal_segment(&mut resealed);
    let _ = format::check_segment(path, &resealed);
});
