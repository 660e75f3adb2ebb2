//! Unsigned integers as decimal text, without the formatting machinery:
//! generators and jobs write one or more numbers per record, and `format!`
//! (or `write!`) costs more than the rest of such a record's work.

/// `value`'s decimal digits, written into the end of `digits`.
#[inline]
pub fn decimal_digits(mut value: u64, digits: &mut [u8; 20]) -> &[u8] {
    let mut start = digits.len();
    loop {
        start -= 1;
        digits[start] = b'0' + (value % 10) as u8;
        value /= 10;
        if value == 0 {
            return &digits[start..];
        }
    }
}

/// Appends `value`'s decimal digits to `buffer`.
#[inline]
pub fn push_decimal(buffer: &mut Vec<u8>, value: u64) {
    buffer.extend_from_slice(decimal_digits(value, &mut [0; 20]));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digits_are_those_of_display() {
        let mut buffer = Vec::new();
        for value in [0, 7, 10, 99, 1_600_000_000_000, u64::MAX] {
            assert_eq!(decimal_digits(value, &mut [0; 20]), value.to_string().as_bytes());
            buffer.clear();
            push_decimal(&mut buffer, value);
            assert_eq!(buffer, value.to_string().as_bytes());
        }
    }
}
