//! The values aggregate functions take, keep and return.
//!
//! Three kinds: 64-bit integers, 64-bit floats and byte strings. NaN is
//! refused wherever a value enters an aggregate: it has no place in an order
//! (min, max, top-k, sets) and would make "the same result in any order"
//! untestable for sums. Functions that order values (min, max, top-k) refuse
//! to compare values of different kinds rather than guess a conversion.

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
    /// A float result (mean, variance, float sum...).
    Float(f64),
    /// A byte-string result (min of strings, first of strings...).
    Bytes(Vec<u8>),
    /// A list result (top-k, collect list, collect set).
    List(Vec<Output>),
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

    /// The owned copy of the value, refusing NaN (see the module docs).
    pub(crate) fn to_scalar(self, function: &str) -> Result<Scalar> {
        Ok(match self {
            Value::Int(value) => Scalar::Int(value),
            Value::Float(value) if value.is_nan() => {
                bail!(
                    InvalidArgument,
                    "{function}: NaN is not a value that can be aggregated"
                )
            }
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

    /// The order of two values of the same kind; values of different kinds
    /// are an error naming `function`.
    pub(crate) fn cmp_same_kind(&self, other: &Scalar, function: &str) -> Result<Ordering> {
        if self.tag() != other.tag() {
            bail!(
                InvalidArgument,
                "{function} cannot compare {} with {}; give it values of one kind",
                self.kind_name(),
                other.kind_name()
            );
        }
        Ok(self.total_cmp(other))
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
            .cmp_same_kind(&Scalar::Float(1.0), "max")
            .unwrap_err();
        assert!(
            error
                .to_string()
                .contains("max cannot compare an integer with a float"),
            "{error}"
        );
        assert!(Value::Float(f64::NAN).to_scalar("min").is_err());
    }
}
