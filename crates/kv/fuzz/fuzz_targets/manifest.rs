//! The manifest's decoder on arbitrary bytes, as they are and with their
//! frame checksums rewritten.
#![no_main]

use libfuzzer_sys::fuzz_target;
use spillway_core::log::reseal_frames;
use spillway_kv::format::check_manifest;

fuzz_target!(|data: &[u8]| {
    let _ = check_manifest(7, data);
    let mut resealed = data.to_vec();
    reseal_frames(7, &mut resealed);
    let _ = check_manifest(7, &resealed);
});
