//! The values aggregate functions take, keep and return.
//!
//! Three kinds: 64-bit integers, 64-bit floats and byte strings. Floats
//! must be finite wherever a value enters an aggregate ([`Value::check`]):
//! NaN has no place in an order (min, max, top-k, sets) and a sum that
//! becomes NaN hides the bad record; an infinity makes a sum depend on the
//! order of its terms (`inf + -inf` is NaN) and is almost always the trace
//! of a division by zero upstream.
//!
//! Functions that order values (min, max, top-k) compare numbers with
//! numbers, integers with floats exactly by value, and byte strings with
//! byte strings; a number and a byte string are not comparable
//! ([`Comparable`]).

use std::cmp::Ordering;

use spillway_core::varint;
use spillway_core::{bail, DecodeError, Result};

/// One value fed to an aggregate, borrowed from the caller.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Value<'a> {
    /// A signed 64-bit integer.
    Int(i64),
    /// A 64-bit float (never NaN once accepted).
    Float(f64),
    /// A byte string (text is UTF-8 bytes).
    Bytes(&'a [u8]),
}

/// A value kept inside a state: an owned [`Value`].
#[derive(Debug, Clone, PartialEq)]
pub enum Scalar {
    /// A signed 64-bit integer.
    Int(i64),
    /// A 64-bit float, never NaN.
    Float(f64),
    /// A byte string.
    Bytes(Vec<u8>),
}

/// The result of finalizing a state.
#[derive(Debug, Clone, PartialEq)]
pub enum Output {
    /// No result: the sample variance of a single value.
    Null,
    /// An integer result (count, integer sum, integer min...).
    Int(i64),
    /// An integer result outside the 64-bit range: only a sum of integers
    /// gives one, since sums are exact (see [`Sum`](crate::function::Sum)).
    /// Results that fit 64 bits are always [`Output::Int`].
    Int128(i128),
    /// A float result (mean, variance, float sum...).
    Float(f64),
    /// A byte-string result (min of strings, first of strings...).
    Bytes(Vec<u8>),
    /// A list result (top-k, collect list, collect set).
    List(Vec<Output>),
}

/// What a value can be compared with by the functions that order values
/// (min, max, top-k): numbers with numbers, byte strings with byte
/// strings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Comparable {
    /// Integers and floats, compared exactly by value.
    Numbers,
    /// Byte strings, compared lexicographically.
    ByteStrings,
}

impl Comparable {
    /// The class's name, for error messages.
    pub fn name(self) -> &'static str {
        match self {
            Comparable::Numbers => "numbers",
            Comparable::ByteStrings => "byte strings",
        }
    }
}

const TAG_INT: u8 = 0;
const TAG_FLOAT: u8 = 1;
const TAG_BYTES: u8 = 2;

impl Value<'_> {
    /// The kind's name, for error messages.
    pub fn kind_name(&self) -> &'static str {
        match self {
            Value::Int(_) => "an integer",
            Value::Float(_) => "a float",
            Value::Bytes(_) => "a byte string",
        }
    }

    /// What the value can be compared with (see [`Comparable`]).
    pub fn comparable(&self) -> Comparable {
        match self {
            Value::Int(_) | Value::Float(_) => Comparable::Numbers,
            Value::Bytes(_) => Comparable::ByteStrings,
        }
    }

    /// Fails unless the value may enter an aggregate: floats must be
    /// finite (see the module docs). `function` names the refuser.
    pub fn check(&self, function: &str) -> Result<()> {
        match *self {
            Value::Float(value) if !value.is_finite() => {
                let what = if value.is_nan() {
                    "NaN"
                } else if value > 0.0 {
                    "inf"
                } else {
                    "-inf"
                };
                bail!(
                    InvalidArgument,
                    "{function}: {what} is not a value that can be aggregated; floats must be finite"
                )
            }
            _ => Ok(()),
        }
    }

    /// [`check`](Self::check), naming the function only on failure (a
    /// name is a `String`, and checks run once per value).
    pub(crate) fn check_named(&self, function: impl FnOnce() -> String) -> Result<()> {
        match *self {
            Value::Float(value) if !value.is_finite() => self.check(&function()),
            _ => Ok(()),
        }
    }

    /// The value as a float, for the numeric moments; byte strings are
    /// refused with an error naming `function`.
    pub(crate) fn number(&self, function: &str) -> Result<f64> {
        match *self {
            Value::Int(value) => Ok(value as f64),
            Value::Float(value) => Ok(value),
            Value::Bytes(_) => bail!(
                InvalidArgument,
                "{function} takes numbers, not {}",
                self.kind_name()
            ),
        }
    }

    /// The owned copy of the value, refusing floats that are not finite
    /// (see the module docs).
    pub(crate) fn to_scalar(self, function: &str) -> Result<Scalar> {
        self.check(function)?;
        Ok(match self {
            Value::Int(value) => Scalar::Int(value),
            Value::Float(value) => Scalar::Float(value),
            Value::Bytes(bytes) => Scalar::Bytes(bytes.to_vec()),
        })
    }
}

impl Scalar {
    /// The kind's name, for error messages.
    pub fn kind_name(&self) -> &'static str {
        self.as_value().kind_name()
    }

    /// The scalar as a borrowed [`Value`].
    pub fn as_value(&self) -> Value<'_> {
        match self {
            Scalar::Int(value) => Value::Int(*value),
            Scalar::Float(value) => Value::Float(*value),
            Scalar::Bytes(bytes) => Value::Bytes(bytes),
        }
    }

    fn tag(&self) -> u8 {
        match self {
            Scalar::Int(_) => TAG_INT,
            Scalar::Float(_) => TAG_FLOAT,
            Scalar::Bytes(_) => TAG_BYTES,
        }
    }

    /// A total order over every scalar: by kind (integers, floats, byte
    /// strings), then by value. Used where any mix of kinds is fine (sets,
    /// tie-breaks), never where the user asked for "the smallest".
    pub fn total_cmp(&self, other: &Scalar) -> Ordering {
        match (self, other) {
            (Scalar::Int(a), Scalar::Int(b)) => a.cmp(b),
            (Scalar::Float(a), Scalar::Float(b)) => a.total_cmp(b),
            (Scalar::Bytes(a), Scalar::Bytes(b)) => a.cmp(b),
            _ => self.tag().cmp(&other.tag()),
        }
    }

    /// The order that min, max and top-k use: numbers by value (an
    /// integer and a float compared exactly; when equal, the integer
    /// first, so that the result does not depend on the merge order), byte
    /// strings lexicographically. A number and a byte string are not
    /// comparable: an error naming `function`.
    pub(crate) fn cmp_comparable(&self, other: &Scalar, function: &str) -> Result<Ordering> {
        Ok(match (self, other) {
            (Scalar::Int(a), Scalar::Float(b)) => cmp_int_float(*a, *b).then(Ordering::Less),
            (Scalar::Float(a), Scalar::Int(b)) => cmp_int_float(*b, *a).reverse().then(Ordering::Greater),
            (Scalar::Bytes(_), Scalar::Bytes(_))
            | (Scalar::Int(_), Scalar::Int(_))
            | (Scalar::Float(_), Scalar::Float(_)) => self.total_cmp(other),
            _ => bail!(
                InvalidArgument,
                "{function} cannot compare {} with {}; give it numbers or byte strings, not both",
                self.kind_name(),
                other.kind_name()
            ),
        })
    }

    /// Appends the scalar's encoding: a kind byte, then 8 little-endian bytes
    /// for numbers or a varint length and the bytes.
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.push(self.tag());
        match self {
            Scalar::Int(value) => out.extend_from_slice(&value.to_le_bytes()),
            Scalar::Float(value) => out.extend_from_slice(&value.to_le_bytes()),
            Scalar::Bytes(bytes) => {
                varint::encode_u64(bytes.len() as u64, out);
                out.extend_from_slice(bytes);
            }
        }
    }

    /// Decodes one scalar from the start of `input`; returns it and the
    /// bytes it took.
    pub fn decode(input: &[u8]) -> Result<(Scalar, usize), DecodeError> {
        let Some((&tag, rest)) = input.split_first() else {
            return Err(DecodeError::new("a value is missing"));
        };
        match tag {
            TAG_INT | TAG_FLOAT => {
                let bytes: [u8; 8] = rest
                    .get(..8)
                    .and_then(|bytes| bytes.try_into().ok())
                    .ok_or_else(|| DecodeError::new("a number is cut short"))?;
                let scalar = if tag == TAG_INT {
                    Scalar::Int(i64::from_le_bytes(bytes))
                } else {
                    Scalar::Float(f64::from_le_bytes(bytes))
                };
                Ok((scalar, 9))
            }
            TAG_BYTES => {
                let (len, used) = varint::decode_u64(rest)?;
                let bytes = usize::try_from(len)
                    .ok()
                    .and_then(|len| rest.get(used..used.checked_add(len)?))
                    .ok_or_else(|| DecodeError::new(format!("a byte string of {len} bytes is cut short")))?;
                Ok((Scalar::Bytes(bytes.to_vec()), 1 + used + bytes.len()))
            }
            other => Err(DecodeError::new(format!("unknown value kind {other}"))),
        }
    }
}

impl From<Scalar> for Output {
    fn from(scalar: Scalar) -> Output {
        match scalar {
            Scalar::Int(value) => Output::Int(value),
            Scalar::Float(value) => Output::Float(value),
            Scalar::Bytes(bytes) => Output::Bytes(bytes),
        }
    }
}

/// An integer against a float, exactly: converting either to the other's
/// type would round (integers past 2^53, floats with fractions). NaN,
/// which no accepted value is, orders as zero.
fn cmp_int_float(int: i64, float: f64) -> Ordering {
    // 2^63 is a float exactly; every float at or past it is beyond every
    // i64, and every float from -2^63 up to it truncates to an i64 exactly.
    const TWO_TO_63: f64 = 9_223_372_036_854_775_808.0;
    if float >= TWO_TO_63 {
        return Ordering::Less;
    }
    if float < -TWO_TO_63 {
        return Ordering::Greater;
    }
    let whole = float.trunc();
    int.cmp(&(whole as i64)).then_with(|| {
        // Equal whole parts: the float's fraction decides.
        let fraction = float - whole;
        if fraction > 0.0 {
            Ordering::Less
        } else if fraction < 0.0 {
            Ordering::Greater
        } else {
            Ordering::Equal
        }
    })
}

/// Reads a little-endian `u64` at the start of `input`.
pub(crate) fn read_u64(input: &[u8], what: &str) -> Result<u64, DecodeError> {
    input
        .get(..8)
        .and_then(|bytes| bytes.try_into().ok())
        .map(u64::from_le_bytes)
        .ok_or_else(|| DecodeError::new(format!("{what} is cut short")))
}

/// Reads a little-endian `f64` at the start of `input`.
pub(crate) fn read_f64(input: &[u8], what: &str) -> Result<f64, DecodeError> {
    read_u64(input, what).map(f64::from_bits)
}

/// Fails unless a state of `used` bytes is exactly all of `input`.
pub(crate) fn expect_end(input: &[u8], used: usize) -> Result<(), DecodeError> {
    match input.len().cmp(&used) {
        Ordering::Equal => Ok(()),
        Ordering::Less => Err(DecodeError::new(format!(
            "the state needs {used} bytes and has {}",
            input.len()
        ))),
        Ordering::Greater => Err(DecodeError::new(format!(
            "{} bytes follow the end of the state",
            input.len() - used
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scalars_round_trip_and_reject_damage() {
        let scalars = [
            Scalar::Int(-7),
            Scalar::Float(2.5),
            Scalar::Bytes(b"spill".to_vec()),
            Scalar::Bytes(Vec::new()),
        ];
        let mut encoded = Vec::new();
        for scalar in &scalars {
            scalar.encode(&mut encoded);
        }
        let mut at = 0;
        for scalar in &scalars {
            let (decoded, used) = Scalar::decode(&encoded[at..]).unwrap();
            assert_eq!(&decoded, scalar);
            at += used;
        }
        assert_eq!(at, encoded.len());
        assert!(Scalar::decode(&[TAG_INT, 1, 2]).is_err());
        assert!(Scalar::decode(&[TAG_BYTES, 5, b'a']).is_err());
        assert!(Scalar::decode(&[9]).is_err());
        assert!(Scalar::decode(&[]).is_err());
    }

    #[test]
    fn orders_within_and_across_kinds() {
        assert_eq!(Scalar::Int(1).total_cmp(&Scalar::Float(0.0)), Ordering::Less);
        assert_eq!(
            Scalar::Bytes(b"a".to_vec()).total_cmp(&Scalar::Bytes(b"b".to_vec())),
            Ordering::Less
        );
        let error = Scalar::Int(1)
            .cmp_comparable(&Scalar::Bytes(b"1".to_vec()), "max")
            .unwrap_err();
        assert!(
            error
                .to_string()
                .contains("max cannot compare an integer with a byte string"),
            "{error}"
        );
        for value in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
            let error = Value::Float(value).to_scalar("min").unwrap_err();
            assert!(error.to_string().contains("floats must be finite"), "{error}");
        }
    }

    #[test]
    fn integers_and_floats_compare_exactly() {
        let cmp = |a: Scalar, b: Scalar| a.cmp_comparable(&b, "min").unwrap();
        // 2^53 + 1 is not a float: a conversion would call these equal.
        let big = (1i64 << 53) + 1;
        assert_eq!(
            cmp(Scalar::Int(big), Scalar::Float((1i64 << 53) as f64)),
            Ordering::Greater
        );
        assert_eq!(
            cmp(Scalar::Float((1i64 << 53) as f64), Scalar::Int(big)),
            Ordering::Less
        );
        assert_eq!(cmp(Scalar::Int(i64::MAX), Scalar::Float(9.3e18)), Ordering::Less);
        assert_eq!(
            cmp(Scalar::Int(i64::MIN), Scalar::Float(-9.3e18)),
            Ordering::Greater
        );
        assert_eq!(
            cmp(Scalar::Int(i64::MIN), Scalar::Float(-9_223_372_036_854_775_808.0)),
            Ordering::Less
        );
        assert_eq!(cmp(Scalar::Int(2), Scalar::Float(2.5)), Ordering::Less);
        assert_eq!(cmp(Scalar::Int(-2), Scalar::Float(-2.5)), Ordering::Greater);
        assert_eq!(cmp(Scalar::Int(-3), Scalar::Float(-2.5)), Ordering::Less);
        // Equal values: the integer first, whichever is asked first.
        assert_eq!(cmp(Scalar::Int(0), Scalar::Float(-0.0)), Ordering::Less);
        assert_eq!(cmp(Scalar::Float(1.0), Scalar::Int(1)), Ordering::Greater);
    }
}
