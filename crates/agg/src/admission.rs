//! The door values pass on their way into an engine, and errors that name
//! what was refused.
//!
//! A value that a function refuses on its own (a string given to `sum`, a
//! NaN) is refused by `init` at the insert, in every engine. A value that is
//! wrong only next to another one is harder: `min` can compare numbers
//! with numbers and byte strings with byte strings, but the CBT meets a
//! key's values only when it merges them, long after the insert, and a
//! merge that fails part-way through an emptying loses records. So
//! [`Admission`] holds each engine to one class of values for the
//! functions that order them (min, max, top_k): the class of the first
//! value it accepted. The rule is per aggregator, not per key, because
//! that is what the CBT can check at the insert without a lookup: one
//! comparison per value, as a column's type is checked.

use std::fmt::Write as _;

use spillway_core::{Error, ErrorKind, Interrupt, Result};

use crate::function::{AggregateFunction, Takes};
use crate::value::{Comparable, Value};

/// The longest key any engine accepts: the hash aggregator's slots store key
/// lengths in 32 bits, the CBT's root buffer its offsets, and a key this
/// large is a mistake.
pub const KEY_BYTES_MAX: usize = 1 << 20;

/// The longest part of a key that an error message shows.
const KEY_TEXT_BYTES_MAX: usize = 64;

/// A key as error messages show it: quoted text when it is printable
/// UTF-8, else `0x` and its bytes in hex; cut at 64 bytes.
pub fn key_text(key: &[u8]) -> String {
    let shown = &key[..key.len().min(KEY_TEXT_BYTES_MAX)];
    let cut = if shown.len() < key.len() { "..." } else { "" };
    match std::str::from_utf8(shown) {
        Ok(text) if !text.chars().any(char::is_control) => format!("{text:?}{cut}"),
        _ => {
            let mut hex = String::with_capacity(2 + 2 * shown.len());
            hex.push_str("0x");
            for byte in shown {
                let _ = write!(hex, "{byte:02x}");
            }
            hex.push_str(cut);
            hex
        }
    }
}

/// `error` with `prefix` in front of its message; corruption errors,
/// which name their file, are left as they are.
fn with_prefix(error: Error, prefix: &str) -> Error {
    match error.kind() {
        ErrorKind::Corruption => error,
        _ => error.context(prefix),
    }
}

/// A value refused for `key` (or a result that failed for it): the
/// error names the key. Only argument errors are about the key; others
/// (a memory budget, an interrupt) pass as they are.
pub(crate) fn naming_key(error: Error, key: &[u8]) -> Error {
    match error {
        Error::InvalidArgument(_) => with_prefix(error, &format!("key {}", key_text(key))),
        other => other,
    }
}

/// An insert of a batch that failed at `position` (counted from 0): the
/// error names the position and the key, and says what was inserted.
pub(crate) fn at_position(error: Error, position: usize, key: &[u8], inserted: bool) -> Error {
    let prefix = if inserted {
        format!(
            "at position {position} of the batch (counted from 0), key {}; the {position} pairs before it \
             were inserted, it and those after it were not",
            key_text(key)
        )
    } else {
        format!(
            "at position {position} of the batch (counted from 0), key {}; nothing in the batch was inserted",
            key_text(key)
        )
    };
    with_prefix(error, &prefix)
}

/// Pairs of a batch between two checks of its interrupt: a check is an
/// atomic load, and this many inserts take about a millisecond.
pub(crate) const INTERRUPT_CHECK_PAIRS: usize = 4096;

/// The first value an engine accepted, for functions that order values.
#[derive(Debug, Clone)]
struct First {
    class: Comparable,
    kind: &'static str,
    key: String,
}

/// One engine's door: see the module docs.
///
/// # Cost
/// One predictable branch per value for functions that do not order
/// values, one comparison of a class for those that do; nothing is
/// allocated after the first value.
#[derive(Debug, Clone)]
pub struct Admission {
    takes: Takes,
    orders_values: bool,
    first: Option<First>,
}

impl Admission {
    /// The door of an engine computing `function`.
    pub fn new(function: &dyn AggregateFunction) -> Self {
        Admission {
            takes: function.takes(),
            orders_values: function.orders_values(),
            first: None,
        }
    }

    /// The class every value must have, once one was accepted (only for
    /// functions that order values).
    pub fn class(&self) -> Option<Comparable> {
        self.first.as_ref().map(|first| first.class)
    }

    /// Fails if `value` is not of the class of the values accepted so far.
    /// What else the function refuses (a float that is not finite, which
    /// every built-in refuses; a string given to `sum`), it refuses when
    /// the insert makes the value's state: checking here too would cost
    /// every insert twice.
    #[inline]
    pub fn check(&self, function: &dyn AggregateFunction, value: Value<'_>) -> Result<()> {
        match &self.first {
            Some(first) if first.class != value.comparable() => Err(refusal(function, value, first)),
            _ => Ok(()),
        }
    }

    /// Whether the function takes `value`, by its [`Takes`] rule alone;
    /// `false` means "ask it", which the caller then does.
    #[inline]
    fn takes(&self, value: Value<'_>) -> bool {
        match value {
            Value::Float(value) if !value.is_finite() => false,
            Value::Bytes(_) if self.takes == Takes::Numbers => false,
            _ => self.takes != Takes::Checked,
        }
    }

    /// Records that `value` was accepted for `key`: the first one fixes the
    /// class of every later value.
    #[inline]
    pub fn accepted(&mut self, key: &[u8], value: Value<'_>) {
        if self.orders_values && self.first.is_none() {
            self.first = Some(first_of(key, value));
        }
    }

    /// Checks a batch as inserting it in order would, inserting nothing:
    /// each key's length, each value on its own
    /// ([`AggregateFunction::check_value`]) and each value's class. The
    /// error names the first refused pair's position and key. Checks
    /// `interrupt` every few thousand pairs.
    pub fn check_batch<'a>(
        &self,
        function: &dyn AggregateFunction,
        pairs: impl IntoIterator<Item = (&'a [u8], Value<'a>)>,
        interrupt: &Interrupt,
    ) -> Result<()> {
        let mut first = self.first.clone();
        for (position, (key, value)) in pairs.into_iter().enumerate() {
            if position.is_multiple_of(INTERRUPT_CHECK_PAIRS) {
                interrupt.check()?;
            }
            // The function is asked only where its rule cannot answer: a
            // call per value costs as much as the rest of the check.
            let checked = check_key(key)
                .and_then(|()| match self.takes(value) {
                    true => Ok(()),
                    false => value
                        .check_named(|| function.name())
                        .and_then(|()| function.check_value(value)),
                })
                .and_then(|()| match &first {
                    Some(first) if first.class != value.comparable() => Err(refusal(function, value, first)),
                    _ => Ok(()),
                });
            if let Err(error) = checked {
                return Err(at_position(error, position, key, false));
            }
            if self.orders_values && first.is_none() {
                first = Some(first_of(key, value));
            }
        }
        Ok(())
    }
}

/// Fails for a key longer than [`KEY_BYTES_MAX`].
pub(crate) fn check_key(key: &[u8]) -> Result<()> {
    if key.len() > KEY_BYTES_MAX {
        return Err(Error::InvalidArgument(format!(
            "a key of {} bytes is longer than the {KEY_BYTES_MAX} bytes allowed",
            key.len()
        )));
    }
    Ok(())
}

fn first_of(key: &[u8], value: Value<'_>) -> First {
    First {
        class: value.comparable(),
        kind: value.kind_name(),
        key: key_text(key),
    }
}

fn refusal(function: &dyn AggregateFunction, value: Value<'_>, first: &First) -> Error {
    let name = function.name();
    Error::InvalidArgument(format!(
        "{name} cannot take {} here: it compares values with each other, and this aggregator's values \
         are {} (the first was {} for key {}); give it numbers only or byte strings only",
        value.kind_name(),
        first.class.name(),
        first.kind,
        first.key
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::function::function;

    #[test]
    fn keys_show_as_text_or_hex_and_long_ones_are_cut() {
        assert_eq!(key_text(b"apples"), "\"apples\"");
        assert_eq!(key_text(b"a\"b"), "\"a\\\"b\"");
        assert_eq!(key_text(&[0x80, 0, 5]), "0x800005");
        assert_eq!(key_text(b"tab\there"), "0x7461620968657265");
        let long = vec![b'k'; 100];
        assert_eq!(key_text(&long), format!("\"{}\"...", "k".repeat(64)));
    }

    #[test]
    fn functions_that_order_values_keep_to_the_first_class() {
        let min = function("min").unwrap();
        let mut door = Admission::new(&*min);
        door.check(&*min, Value::Bytes(b"x")).unwrap();
        door.accepted(b"a", Value::Int(3));
        door.check(&*min, Value::Float(2.5)).unwrap();
        let error = door.check(&*min, Value::Bytes(b"x")).unwrap_err();
        assert!(
            error.to_string().contains(
                "min cannot take a byte string here: it compares values with each other, and this \
                 aggregator's values are numbers (the first was an integer for key \"a\")"
            ),
            "{error}"
        );
        // Functions that do not order values take any mix.
        let first = function("first").unwrap();
        let mut door = Admission::new(&*first);
        door.accepted(b"a", Value::Int(3));
        door.check(&*first, Value::Bytes(b"x")).unwrap();
        assert_eq!(door.class(), None);
    }

    #[test]
    fn every_built_in_takes_what_its_rule_says() {
        let values = [
            Value::Int(-3),
            Value::Float(2.5),
            Value::Float(f64::NAN),
            Value::Float(f64::NEG_INFINITY),
            Value::Bytes(b"x"),
        ];
        let specs = crate::FUNCTION_NAMES
            .iter()
            .map(|name| name.replace("(K)", "(3)").replace("(P)", "(8)"))
            .chain(["sum+count".to_string(), "first+mean".to_string()]);
        for spec in specs {
            let function = function(&spec).unwrap();
            let door = Admission::new(&*function);
            assert_ne!(door.takes, Takes::Checked, "{spec}: a built-in has a rule");
            for value in values {
                let by_function = value.check(&spec).is_ok() && function.check_value(value).is_ok();
                assert_eq!(door.takes(value), by_function, "{spec} and {value:?}");
            }
        }
    }

    #[test]
    fn a_batch_is_checked_whole_and_its_error_names_the_position() {
        let top = function("top_k(2)+count").unwrap();
        let door = Admission::new(&*top);
        let pairs = [
            (&b"a"[..], Value::Bytes(b"x")),
            (b"b", Value::Bytes(b"y")),
            (b"c", Value::Int(1)),
        ];
        let error = door.check_batch(&*top, pairs, &Interrupt::new()).unwrap_err();
        let message = error.to_string();
        assert!(
            message.contains(
                "at position 2 of the batch (counted from 0), key \"c\"; nothing in the batch was inserted"
            ),
            "{message}"
        );
        assert!(
            message.contains("values are byte strings (the first was a byte string for key \"a\")"),
            "{message}"
        );
        assert_eq!(door.class(), None, "checking records nothing");
        let sum = function("sum").unwrap();
        let door = Admission::new(&*sum);
        let error = door
            .check_batch(
                &*sum,
                [(&b"a"[..], Value::Int(1)), (b"b", Value::Float(f64::NAN))],
                &Interrupt::new(),
            )
            .unwrap_err();
        assert!(
            error.to_string().contains("position 1") && error.to_string().contains("NaN"),
            "{error}"
        );
        let long = vec![0; KEY_BYTES_MAX + 1];
        let error = door
            .check_batch(&*sum, [(&long[..], Value::Int(1))], &Interrupt::new())
            .unwrap_err();
        assert!(error.to_string().contains("longer than"), "{error}");
    }
}
