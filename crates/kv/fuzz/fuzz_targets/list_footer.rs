//! A list file opened as a store opens it (footer, filter, index and
//! sketch, no block) on arbitrary bytes, as they are and resealed.
#![no_main]

use libfuzzer_sys::fuzz_target;
use spillway_kv::format::{open_list, reseal_list};

fuzz_target!(|data: &[u8]| {
    let _ = open_list(7, data);
    let mut resealed = data.to_vec();
    reseal_list(7, &mut resealed);
    let _ = open_list(7, &resealed);
});
