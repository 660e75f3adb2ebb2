//! Order-preserving encodings of keys into `u64`.
//!
//! The index orders keys as unsigned 64-bit integers. Each encoding here
//! maps its domain into `u64` so that `a < b` exactly when
//! `encode(a) < encode(b)`, which makes key ranges of the original domain
//! key ranges of the index. (The seed hashed strings, which loses ranges.)

use spillway_core::{ensure, Result};

/// An `i64` as a `u64` in the same order: the sign bit flipped.
pub fn encode_i64(value: i64) -> u64 {
    (value as u64) ^ (1 << 63)
}

/// The inverse of [`encode_i64`].
pub fn decode_i64(key: u64) -> i64 {
    (key ^ (1 << 63)) as i64
}

/// An `f64` as a `u64` in numeric order: positive numbers get the sign bit
/// set, negative ones have every bit flipped. `-0.0` and `0.0` are made
/// equal. NaN has no place in an order and is refused.
pub fn encode_f64(value: f64) -> Result<u64> {
    ensure!(
        !value.is_nan(),
        InvalidArgument,
        "a NaN key has no order; keys must be numbers"
    );
    let bits = if value == 0.0 { 0 } else { value.to_bits() };
    Ok(if bits >> 63 == 0 { bits | (1 << 63) } else { !bits })
}

/// The inverse of [`encode_f64`] (zero comes back as `0.0`).
pub fn decode_f64(key: u64) -> f64 {
    f64::from_bits(if key >> 63 == 1 { key & !(1 << 63) } else { !key })
}

/// A 2-D point as its Z-order (Morton) code: the bits of `x` and `y`
/// interleaved, `x` in the even positions. Points close in both
/// coordinates mostly get close codes, so a rectangle is covered by a few
/// code ranges.
pub fn encode_point(x: u32, y: u32) -> u64 {
    spread(x) | (spread(y) << 1)
}

/// The inverse of [`encode_point`].
pub fn decode_point(key: u64) -> (u32, u32) {
    (gather(key), gather(key >> 1))
}

/// The bits of `value` moved to the even positions of a `u64`.
fn spread(value: u32) -> u64 {
    let mut bits = u64::from(value);
    bits = (bits | (bits << 16)) & 0x0000_FFFF_0000_FFFF;
    bits = (bits | (bits << 8)) & 0x00FF_00FF_00FF_00FF;
    bits = (bits | (bits << 4)) & 0x0F0F_0F0F_0F0F_0F0F;
    bits = (bits | (bits << 2)) & 0x3333_3333_3333_3333;
    (bits | (bits << 1)) & 0x5555_5555_5555_5555
}

/// The even bits of `key`, packed.
fn gather(key: u64) -> u32 {
    let mut bits = key & 0x5555_5555_5555_5555;
    bits = (bits | (bits >> 1)) & 0x3333_3333_3333_3333;
    bits = (bits | (bits >> 2)) & 0x0F0F_0F0F_0F0F_0F0F;
    bits = (bits | (bits >> 4)) & 0x00FF_00FF_00FF_00FF;
    bits = (bits | (bits >> 8)) & 0x0000_FFFF_0000_FFFF;
    ((bits | (bits >> 16)) & 0x0000_0000_FFFF_FFFF) as u32
}

/// The first 8 bytes of a string, big-endian, zero-padded: strings in byte
/// order map to keys in the same (non-strict) order. Strings sharing their
/// first 8 bytes share a key, so a query on a prefix key returns a superset
/// that the caller filters by the full string.
pub fn encode_prefix(bytes: &[u8]) -> u64 {
    let mut prefix = [0u8; 8];
    let take = bytes.len().min(8);
    prefix[..take].copy_from_slice(&bytes[..take]);
    u64::from_be_bytes(prefix)
}

/// The `[low, high]` key range of every string that starts with `prefix`
/// (up to its first 8 bytes).
pub fn prefix_range(prefix: &[u8]) -> (u64, u64) {
    let take = prefix.len().min(8);
    let low = encode_prefix(&prefix[..take]);
    let free_bits = 8 * (8 - take) as u32;
    let high = if free_bits == 64 {
        u64::MAX
    } else {
        low | ((1u64 << free_bits) - 1)
    };
    (low, high)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_keep_their_order_and_come_back() {
        let values = [i64::MIN, -1_000_000, -1, 0, 1, 42, i64::MAX];
        for pair in values.windows(2) {
            assert!(encode_i64(pair[0]) < encode_i64(pair[1]), "{pair:?}");
        }
        for value in values {
            assert_eq!(decode_i64(encode_i64(value)), value);
        }
    }

    #[test]
    fn floats_keep_their_order_and_nan_is_refused() {
        let values = [
            f64::NEG_INFINITY,
            -1e300,
            -2.5,
            -f64::MIN_POSITIVE,
            0.0,
            1e-300,
            2.5,
            1e300,
            f64::INFINITY,
        ];
        for pair in values.windows(2) {
            assert!(
                encode_f64(pair[0]).unwrap() < encode_f64(pair[1]).unwrap(),
                "{pair:?}"
            );
        }
        for value in values {
            assert_eq!(decode_f64(encode_f64(value).unwrap()), value);
        }
        assert_eq!(encode_f64(-0.0).unwrap(), encode_f64(0.0).unwrap());
        let error = encode_f64(f64::NAN).unwrap_err();
        assert!(error.to_string().contains("NaN"), "{error}");
    }

    #[test]
    fn points_interleave_and_come_back() {
        assert_eq!(encode_point(0b11, 0), 0b0101);
        assert_eq!(encode_point(0, 0b11), 0b1010);
        for (x, y) in [
            (0, 0),
            (1, 2),
            (u32::MAX, 0),
            (12345, 67890),
            (u32::MAX, u32::MAX),
        ] {
            assert_eq!(decode_point(encode_point(x, y)), (x, y));
        }
        // Within an aligned square, codes are contiguous.
        let codes: Vec<u64> = (0..4)
            .flat_map(|x| (0..4).map(move |y| encode_point(x, y)))
            .collect();
        assert_eq!(codes.iter().max(), Some(&15));
    }

    #[test]
    fn string_prefixes_keep_byte_order_and_cover_their_extensions() {
        let words: [&[u8]; 6] = [b"", b"a", b"ab", b"abc", b"b", b"zzzzzzzzzz"];
        for pair in words.windows(2) {
            assert!(encode_prefix(pair[0]) <= encode_prefix(pair[1]), "{pair:?}");
        }
        let (low, high) = prefix_range(b"ab");
        for word in [&b"ab"[..], b"abc", b"ab\xff\xff\xff\xff\xff\xff\xff"] {
            let key = encode_prefix(word);
            assert!(low <= key && key <= high, "{word:?}");
        }
        assert!(encode_prefix(b"ac") > high && encode_prefix(b"aa") < low);
        assert_eq!(prefix_range(b""), (0, u64::MAX));
    }
}
