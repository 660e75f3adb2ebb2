//! The write-ahead log's decoder on arbitrary bytes, as they are and with
//! their frame checksums rewritten: an error or the batches, never a
//! panic or an unbounded allocation.
#![no_main]

use libfuzzer_sys::fuzz_target;
use spillway_core::log::reseal_frames;
use spillway_kv::format::check_log;

fuzz_target!(|data: &[u8]| {
    let _ = check_log(7, data);
    let mut resealed = data.to_vec();
    reseal_frames(7, &mut resealed);
    let _ = check_log(7, &resealed);
});
