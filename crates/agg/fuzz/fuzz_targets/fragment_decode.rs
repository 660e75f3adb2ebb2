//! The CBT's fragment decoder on arbitrary bytes: an error or records that
//! round-trip, never a panic, an overflow or an unbounded allocation.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| spillway_agg::format::check_fragment(data));
