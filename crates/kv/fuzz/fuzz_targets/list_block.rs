//! A list file read whole (footer, sections, every block and record) on
//! arbitrary bytes, as they are and with every checksum rewritten, so
//! mutations reach the block and record decoders.
#![no_main]

use libfuzzer_sys::fuzz_target;
use spillway_kv::format::{check_list, reseal_list};

fuzz_target!(|data: &[u8]| {
    let _ = check_list(7, data);
    let mut resealed = data.to_vec();
    reseal_list(7, &mut resealed);
    let _ = check_list(7, &resealed);
});
