//! Bytes eight at a time: line ends in input blocks and word boundaries
//! in lines, the two scans every text job makes over every input byte, and
//! short byte strings loaded as words.
//!
//! Each step loads 8 bytes as a little-endian word and flags the bytes
//! that match with the classic bit trick (subtract, and-not, mask): a byte
//! `b` is flagged if `b < n` (`(x - n·0x01..) & !x & 0x80..`); the lowest
//! flagged byte is always a true match (a borrow only runs upward from a
//! matching byte), so its position is the first match.

const ONES: u64 = 0x0101_0101_0101_0101;
const HIGHS: u64 = 0x8080_8080_8080_8080;

/// Flags (high bit) the bytes of `word` below `limit` (at most 128); the
/// lowest flag marks the first such byte.
#[inline(always)]
fn below(word: u64, limit: u8) -> u64 {
    word.wrapping_sub(ONES * u64::from(limit)) & !word & HIGHS
}

/// Bytes 0..8 of `bytes` from `at` as a little-endian word.
#[inline(always)]
fn word_at(bytes: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"))
}

/// The bytes of `chunk` (at most 8) as a little-endian word, zero padded,
/// built by loads that may overlap (never a loop over its bytes, nor a
/// copy of a variable length, which would be a call to memcpy).
#[inline(always)]
pub(crate) fn word_le(chunk: &[u8]) -> u64 {
    let len = chunk.len();
    let u32_at = |at: usize| u64::from(u32::from_le_bytes(chunk[at..at + 4].try_into().expect("4 bytes")));
    match len {
        8 => u64::from_le_bytes(chunk.try_into().expect("8 bytes")),
        4..=7 => u32_at(0) | u32_at(len - 4) << (8 * (len - 4)),
        1..=3 => {
            let byte = |at: usize| u64::from(chunk[at]) << (8 * at);
            byte(0) | byte(len / 2) | byte(len - 1)
        }
        0 => 0,
        _ => panic!("{len} bytes are more than a word"),
    }
}

/// The first `needle` in `haystack`.
pub(crate) fn find_byte(needle: u8, haystack: &[u8]) -> Option<usize> {
    let pattern = ONES * u64::from(needle);
    let mut at = 0;
    while at + 8 <= haystack.len() {
        // A byte equal to the needle is zero after the xor: below 1.
        let flags = below(word_at(haystack, at) ^ pattern, 1);
        if flags != 0 {
            return Some(at + (flags.trailing_zeros() / 8) as usize);
        }
        at += 8;
    }
    haystack[at..]
        .iter()
        .position(|&byte| byte == needle)
        .map(|found| at + found)
}

/// The first ASCII whitespace byte (space, tab, line feed, form feed,
/// carriage return: `u8::is_ascii_whitespace`) in `bytes`: every one is
/// below 0x21, so words of 8 bytes with no byte below 0x21 are skipped
/// whole, and a flagged byte is checked (other control bytes are not
/// whitespace).
pub(crate) fn find_whitespace(bytes: &[u8]) -> Option<usize> {
    let mut at = 0;
    while at + 8 <= bytes.len() {
        let mut flags = below(word_at(bytes, at), 0x21);
        while flags != 0 {
            let found = at + (flags.trailing_zeros() / 8) as usize;
            if bytes[found].is_ascii_whitespace() {
                return Some(found);
            }
            // A control byte that is not whitespace: look past it.
            flags &= flags - 1;
            // Flags above a false one may be borrows from it; check each.
        }
        at += 8;
    }
    bytes[at..]
        .iter()
        .position(u8::is_ascii_whitespace)
        .map(|found| at + found)
}

/// The words of `line`: runs of bytes between ASCII whitespace.
pub(crate) fn words(line: &[u8]) -> Words<'_> {
    Words { rest: line }
}

/// Iterator of [`words`].
#[derive(Debug, Clone)]
pub(crate) struct Words<'a> {
    rest: &'a [u8],
}

impl<'a> Iterator for Words<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        let start = self.rest.iter().position(|byte| !byte.is_ascii_whitespace())?;
        let rest = &self.rest[start..];
        let end = find_whitespace(rest).unwrap_or(rest.len());
        self.rest = &rest[end..];
        Some(&rest[..end])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::lcg;

    #[test]
    fn short_strings_load_as_zero_padded_little_endian_words() {
        let bytes = [0x11u8, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88];
        for len in 0..=8 {
            let mut padded = [0u8; 8];
            padded[..len].copy_from_slice(&bytes[..len]);
            assert_eq!(word_le(&bytes[..len]), u64::from_le_bytes(padded), "{len} bytes");
        }
    }

    #[test]
    fn the_word_scans_agree_with_byte_by_byte_ones() {
        let mut state = 3;
        // Letters, every whitespace byte, other control bytes, high bytes.
        let alphabet: Vec<u8> = b"ab \t\n\x0b\x0c\r\x00\x1f\x20\x21\x7f\x80\xa0\xff".to_vec();
        for length in 0..200 {
            for _ in 0..20 {
                let bytes: Vec<u8> = (0..length)
                    .map(|_| alphabet[(lcg(&mut state) % alphabet.len() as u64) as usize])
                    .collect();
                for needle in [b'\n', 0u8, 0xff, b'a'] {
                    assert_eq!(
                        find_byte(needle, &bytes),
                        bytes.iter().position(|&b| b == needle),
                        "{bytes:?}"
                    );
                }
                assert_eq!(
                    find_whitespace(&bytes),
                    bytes.iter().position(u8::is_ascii_whitespace),
                    "{bytes:?}"
                );
                let expected: Vec<&[u8]> = bytes
                    .split(|byte| byte.is_ascii_whitespace())
                    .filter(|word| !word.is_empty())
                    .collect();
                assert_eq!(words(&bytes).collect::<Vec<_>>(), expected, "{bytes:?}");
            }
        }
    }
}
