//! LEB128 variable-length integers and zig-zag signed integers.
//!
//! Lengths, counts and deltas in Spillway's formats are mostly small, so they
//! are stored as LEB128: seven value bits per byte, least significant group
//! first, the high bit set on every byte but the last. A `u64` takes 1 to 10
//! bytes, a `u32` 1 to 5. Signed values go through zig-zag first
//! (0, -1, 1, -2, ... map to 0, 1, 2, 3, ...) so small negative deltas stay
//! short.
//!
//! # Strict decoding
//! The decoder accepts exactly the encodings the encoder produces and nothing
//! else, so damaged bytes are caught as early as possible:
//! - truncated input (the last byte read still has its continuation bit set);
//! - more than 10 bytes (5 for a `u32`);
//! - bits beyond 64 (or 32) in the last byte;
//! - non-minimal encodings (a last byte of `0x00` after other bytes, such as
//!   `80 00` for zero): our encoder never writes them, so the bytes did not
//!   come from us.
//!
//! # Errors
//! A varint decoder does not know which file or offset its bytes came from,
//! so it returns a [`DecodeError`]; the caller, which does know, turns it
//! into [`Error::Corruption`] with [`DecodeError::at`]. There is deliberately
//! no `From<DecodeError> for Error`: every call site must say where the damage
//! is. Other location-free decoders in `core` (the [codecs](crate::codec))
//! use the same type.

use std::path::Path;

use crate::Error;

/// The most bytes a LEB128 `u64` takes: `ceil(64 / 7)`.
pub const U64_BYTES_MAX: usize = 10;

/// The most bytes a LEB128 `u32` takes: `ceil(32 / 7)`.
pub const U32_BYTES_MAX: usize = 5;

/// Damaged input found by a decoder that does not know where the input came
/// from; convert it with [`DecodeError::at`] once the file and offset are known.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{what}")]
pub struct DecodeError {
    what: String,
}

impl DecodeError {
    /// A decode error with a description of what is wrong with the input.
    pub fn new(what: impl Into<String>) -> Self {
        DecodeError { what: what.into() }
    }

    /// What is wrong with the input.
    pub fn what(&self) -> &str {
        &self.what
    }

    /// The [`Error::Corruption`] of the unit at `offset` in `file` that this
    /// input was read from.
    pub fn at(self, file: impl AsRef<Path>, offset: u64) -> Error {
        Error::corruption(file, offset, self.what)
    }
}

/// How many bytes the LEB128 encoding of `value` takes (1 to 10), so a writer
/// can check that a record fits before it encodes it.
pub fn encoded_len(value: u64) -> usize {
    // Number of significant bits, at least one so that zero takes one byte.
    let bits = (64 - value.leading_zeros()).max(1) as usize;
    bits.div_ceil(7)
}

/// Appends the LEB128 encoding of `value` to `output`.
#[inline]
pub fn encode_u64(value: u64, output: &mut Vec<u8>) {
    if value < 0x80 {
        output.push(value as u8);
        return;
    }
    let mut buffer = [0u8; U64_BYTES_MAX];
    let written = encode_u64_to_slice(value, &mut buffer);
    output.extend_from_slice(&buffer[..written]);
}

/// Appends the LEB128 encoding of `value` to `output`.
pub fn encode_u32(value: u32, output: &mut Vec<u8>) {
    encode_u64(u64::from(value), output);
}

/// Writes the LEB128 encoding of `value` at the start of `output` and returns
/// the number of bytes written, for writers that fill a preallocated block.
///
/// # Panics
/// If `output` is shorter than [`encoded_len`]`(value)`; a caller that
/// cannot guarantee the room checks `encoded_len` first.
pub fn encode_u64_to_slice(mut value: u64, output: &mut [u8]) -> usize {
    let needed = encoded_len(value);
    assert!(
        output.len() >= needed,
        "varint of {needed} bytes does not fit in {} bytes",
        output.len()
    );
    let mut written = 0;
    while value >= 0x80 {
        output[written] = (value as u8) | 0x80;
        value >>= 7;
        written += 1;
    }
    output[written] = value as u8;
    written + 1
}

/// Writes the LEB128 encoding of `value` at the start of `output` and returns
/// the number of bytes written.
///
/// # Panics
/// If `output` is shorter than [`encoded_len`]`(value)`.
pub fn encode_u32_to_slice(value: u32, output: &mut [u8]) -> usize {
    encode_u64_to_slice(u64::from(value), output)
}

/// Decodes a LEB128 `u64` from the start of `input` and returns it with the
/// number of bytes it took; the bytes after it are left for the caller.
pub fn decode_u64(input: &[u8]) -> Result<(u64, usize), DecodeError> {
    decode_bounded(input, 64)
}

/// Decodes a LEB128 `u32` from the start of `input` and returns it with the
/// number of bytes it took. A value above `u32::MAX` is an error, not a
/// truncation.
pub fn decode_u32(input: &[u8]) -> Result<(u32, usize), DecodeError> {
    let (value, consumed) = decode_bounded(input, 32)?;
    // decode_bounded rejects any bit beyond the 32nd.
    Ok((value as u32, consumed))
}

/// Maps a signed integer to an unsigned one so that values near zero, of
/// either sign, get short varints: 0, -1, 1, -2, 2 become 0, 1, 2, 3, 4.
pub fn zigzag_encode(value: i64) -> u64 {
    ((value << 1) ^ (value >> 63)) as u64
}

/// The inverse of [`zigzag_encode`].
pub fn zigzag_decode(value: u64) -> i64 {
    ((value >> 1) as i64) ^ -((value & 1) as i64)
}

/// Appends the zig-zag LEB128 encoding of `value` to `output`, for signed
/// deltas.
pub fn encode_i64(value: i64, output: &mut Vec<u8>) {
    encode_u64(zigzag_encode(value), output);
}

/// Decodes a zig-zag LEB128 `i64` from the start of `input` and returns it
/// with the number of bytes it took.
pub fn decode_i64(input: &[u8]) -> Result<(i64, usize), DecodeError> {
    let (value, consumed) = decode_u64(input)?;
    Ok((zigzag_decode(value), consumed))
}

/// Decodes a canonical LEB128 integer of at most `value_bits` bits (32 or 64).
#[inline]
fn decode_bounded(input: &[u8], value_bits: u32) -> Result<(u64, usize), DecodeError> {
    // Most varints in our formats (lengths, deltas, counts) take one byte.
    match input.first() {
        Some(&byte) if byte < 0x80 => Ok((u64::from(byte), 1)),
        _ => decode_long(input, value_bits),
    }
}

#[cold]
fn decode_long(input: &[u8], value_bits: u32) -> Result<(u64, usize), DecodeError> {
    let bytes_max = value_bits.div_ceil(7) as usize;
    let mut value = 0u64;
    for (index, &byte) in input.iter().take(bytes_max).enumerate() {
        let shift = 7 * index as u32;
        let group = u64::from(byte & 0x7f);
        if byte & 0x80 == 0 {
            // The last byte: its group must fit in the bits that are left,
            // and it must not be a redundant zero group.
            let bits_left = value_bits - shift;
            if bits_left < 7 && group >> bits_left != 0 {
                return Err(DecodeError::new(format!(
                    "varint overflows {value_bits} bits: last byte {byte:#04x} at position {index}"
                )));
            }
            if byte == 0 && index > 0 {
                return Err(DecodeError::new(format!(
                    "non-minimal varint: {} bytes ending in a zero byte",
                    index + 1
                )));
            }
            return Ok((value | (group << shift), index + 1));
        }
        value |= group << shift;
    }
    if input.len() >= bytes_max {
        Err(DecodeError::new(format!(
            "varint longer than {bytes_max} bytes (the most a {value_bits}-bit value takes)"
        )))
    } else {
        Err(DecodeError::new(format!(
            "truncated varint: input ends after {} bytes, all with the continuation bit set",
            input.len()
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorKind;

    fn encoded(value: u64) -> Vec<u8> {
        let mut output = Vec::new();
        encode_u64(value, &mut output);
        output
    }

    #[test]
    fn boundaries_encode_to_the_expected_bytes() {
        assert_eq!(encoded(0), [0x00]);
        assert_eq!(encoded(1), [0x01]);
        assert_eq!(encoded(127), [0x7f]);
        assert_eq!(encoded(128), [0x80, 0x01]);
        assert_eq!(encoded(300), [0xac, 0x02]);
        assert_eq!(encoded(16_383), [0xff, 0x7f]);
        assert_eq!(encoded(16_384), [0x80, 0x80, 0x01]);
        assert_eq!(encoded(1 << 32), [0x80, 0x80, 0x80, 0x80, 0x10]);
        assert_eq!(
            encoded(u64::MAX),
            [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01]
        );
        for value in [0, 127, 128, 16_383, 16_384, 1 << 32, u64::MAX] {
            let bytes = encoded(value);
            assert_eq!(bytes.len(), encoded_len(value), "{value}");
            assert_eq!(decode_u64(&bytes), Ok((value, bytes.len())), "{value}");
        }
    }

    #[test]
    fn encoded_len_matches_every_power_of_two_boundary() {
        for bits in 0..64 {
            let value = 1u64 << bits;
            for probe in [value - 1, value, value + 1] {
                assert_eq!(encoded_len(probe), encoded(probe).len(), "{probe}");
            }
        }
    }

    #[test]
    fn many_values_round_trip_back_to_back() {
        // A deterministic spread over all magnitudes (xorshift), plus the edges.
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut values = vec![0, 1, 127, 128, u64::from(u32::MAX), u64::MAX];
        for _ in 0..10_000 {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            values.push(state >> (state % 64));
        }
        let mut stream = Vec::new();
        for &value in &values {
            encode_u64(value, &mut stream);
        }
        let mut position = 0;
        for &value in &values {
            let (decoded, consumed) = decode_u64(&stream[position..]).unwrap();
            assert_eq!(decoded, value);
            position += consumed;
        }
        assert_eq!(position, stream.len());
    }

    #[test]
    fn slice_encoding_matches_vec_encoding() {
        let mut buffer = [0xaa; U64_BYTES_MAX];
        for value in [0, 200, 1 << 40, u64::MAX] {
            let written = encode_u64_to_slice(value, &mut buffer);
            assert_eq!(&buffer[..written], encoded(value).as_slice());
        }
        let written = encode_u32_to_slice(u32::MAX, &mut buffer);
        assert_eq!(&buffer[..written], [0xff, 0xff, 0xff, 0xff, 0x0f]);
    }

    #[test]
    #[should_panic(expected = "does not fit")]
    fn slice_encoding_panics_when_the_slice_is_too_short() {
        let mut buffer = [0u8; 1];
        encode_u64_to_slice(128, &mut buffer);
    }

    #[test]
    fn decoding_leaves_trailing_bytes_alone() {
        assert_eq!(decode_u64(&[0xac, 0x02, 0xff, 0xff]), Ok((300, 2)));
    }

    #[test]
    fn truncated_input_is_rejected() {
        for input in [&[][..], &[0x80], &[0xff, 0xff], &[0x80; 9]] {
            let error = decode_u64(input).unwrap_err();
            assert!(error.what().contains("truncated"), "{input:?}: {error}");
        }
        let full = encoded(u64::MAX);
        assert!(decode_u64(&full[..9]).is_err());
    }

    #[test]
    fn overlong_input_is_rejected() {
        // Eleven bytes with continuation bits: longer than any u64.
        let error = decode_u64(&[0x80; 11]).unwrap_err();
        assert!(error.what().contains("longer than 10"), "{error}");
        // Ten bytes whose last one carries bits beyond the 64th.
        let mut beyond = vec![0xff; 9];
        beyond.push(0x02);
        let error = decode_u64(&beyond).unwrap_err();
        assert!(error.what().contains("overflows 64"), "{error}");
        // Non-minimal encodings of zero and of 1.
        assert!(decode_u64(&[0x80, 0x00]).is_err());
        assert!(decode_u64(&[0x81, 0x80, 0x00]).is_err());
    }

    #[test]
    fn u32_rejects_values_beyond_32_bits() {
        let mut bytes = Vec::new();
        encode_u32(u32::MAX, &mut bytes);
        assert_eq!(decode_u32(&bytes), Ok((u32::MAX, 5)));
        assert!(decode_u32(&encoded(u64::from(u32::MAX) + 1)).is_err());
        assert!(decode_u32(&[0x80; 6])
            .unwrap_err()
            .what()
            .contains("longer than 5"));
    }

    #[test]
    fn zigzag_maps_small_magnitudes_to_small_codes() {
        let pairs = [(0, 0), (-1, 1), (1, 2), (-2, 3), (2, 4)];
        for (signed, unsigned) in pairs {
            assert_eq!(zigzag_encode(signed), unsigned);
            assert_eq!(zigzag_decode(unsigned), signed);
        }
        assert_eq!(zigzag_encode(i64::MAX), u64::MAX - 1);
        assert_eq!(zigzag_encode(i64::MIN), u64::MAX);
        for value in [i64::MIN, -1_000_000, -64, 63, 1 << 50, i64::MAX] {
            let mut bytes = Vec::new();
            encode_i64(value, &mut bytes);
            assert_eq!(decode_i64(&bytes), Ok((value, bytes.len())));
        }
        let mut bytes = Vec::new();
        encode_i64(-64, &mut bytes);
        assert_eq!(bytes.len(), 1);
    }

    #[test]
    fn decode_error_becomes_corruption_with_location() {
        let error = decode_u64(&[0x80]).unwrap_err().at("/data/000007.log", 512);
        assert_eq!(error.kind(), ErrorKind::Corruption);
        let message = error.to_string();
        assert!(
            message.contains("000007.log") && message.contains("512"),
            "{message}"
        );
    }
}
