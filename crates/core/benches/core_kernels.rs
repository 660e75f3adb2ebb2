//! Micro-benchmark of core's hot kernels: the CRC-32C of blocks, varints
//! and the key hash:
//! `cargo bench -p spillway-core --bench core_kernels -- [MEBIBYTES] [VALUES]`.
//! Prints MB/s for the checksums and ns per value for varints and hashes.

use std::hint::black_box;
use std::time::Instant;

use spillway_core::{block_crc, crc32c, hash64, varint};

fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn main() {
    let arguments: Vec<String> = std::env::args()
        .skip(1)
        .filter(|argument| !argument.starts_with('-'))
        .collect();
    let mebibytes: usize = arguments
        .first()
        .map_or(2048, |value| value.parse().expect("MEBIBYTES"));
    let values: usize = arguments
        .get(1)
        .map_or(10_000_000, |value| value.parse().expect("VALUES"));
    if cfg!(debug_assertions) {
        eprintln!("WARNING: debug build; run with cargo bench (release) for real numbers");
    }
    let mut state = 42;
    let data: Vec<u8> = (0..1 << 20).map(|_| splitmix64(&mut state) as u8).collect();
    let total = (mebibytes << 20) as f64;

    for block in [4096, 64 << 10] {
        let started = Instant::now();
        let mut crc = 0u32;
        for round in 0..mebibytes {
            for (index, chunk) in data.chunks(block).enumerate() {
                crc ^= block_crc(round as u64, index as u64, chunk);
            }
        }
        black_box(crc);
        let seconds = started.elapsed().as_secs_f64();
        println!(
            "block_crc, {block}-byte blocks: {mebibytes} MiB in {seconds:.3} s, {:.0} MB/s",
            total / seconds / 1e6
        );
    }
    let started = Instant::now();
    let mut crc = 0u32;
    for _ in 0..mebibytes {
        crc ^= crc32c(&data);
    }
    black_box(crc);
    let seconds = started.elapsed().as_secs_f64();
    println!(
        "crc32c, 1 MiB buffers: {mebibytes} MiB in {seconds:.3} s, {:.0} MB/s",
        total / seconds / 1e6
    );

    // Varints of mixed sizes: record lengths (1 byte), offsets (3-5 bytes)
    // and hashes (9-10 bytes), as the file formats hold them.
    let numbers: Vec<u64> = (0..values)
        .map(|index| {
            let random = splitmix64(&mut state);
            match index % 4 {
                0 | 1 => random & 0x7F,
                2 => random & 0xFFFF_FFFF,
                _ => random,
            }
        })
        .collect();
    let mut encoded = Vec::with_capacity(values * 10);
    let started = Instant::now();
    for &number in &numbers {
        varint::encode_u64(number, &mut encoded);
    }
    let seconds = started.elapsed().as_secs_f64();
    println!(
        "varint encode_u64: {values} values ({:.2} bytes each) in {seconds:.3} s, {:.2} ns/value",
        encoded.len() as f64 / values as f64,
        seconds * 1e9 / values as f64
    );
    let started = Instant::now();
    let mut rest = &encoded[..];
    let mut sum = 0u64;
    while !rest.is_empty() {
        let (number, used) = varint::decode_u64(rest).expect("decode");
        sum = sum.wrapping_add(number);
        rest = &rest[used..];
    }
    let seconds = started.elapsed().as_secs_f64();
    assert_eq!(sum, numbers.iter().fold(0u64, |sum, &n| sum.wrapping_add(n)));
    println!(
        "varint decode_u64: {values} values in {seconds:.3} s, {:.2} ns/value",
        seconds * 1e9 / values as f64
    );

    let keys: Vec<[u8; 16]> = (0..values.min(1 << 22))
        .map(|_| {
            let mut key = [0u8; 16];
            key[..8].copy_from_slice(&splitmix64(&mut state).to_le_bytes());
            key[8..].copy_from_slice(&splitmix64(&mut state).to_le_bytes());
            key
        })
        .collect();
    let started = Instant::now();
    let mut folded = 0u64;
    for key in &keys {
        folded ^= hash64(key);
    }
    black_box(folded);
    let seconds = started.elapsed().as_secs_f64();
    println!(
        "hash64, 16-byte keys: {} keys in {seconds:.3} s, {:.2} ns/key",
        keys.len(),
        seconds * 1e9 / keys.len() as f64
    );
}
