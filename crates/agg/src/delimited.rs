//! Delimited text records (CSV-like lines) read into an [`Aggregator`]:
//! the key and value columns picked out of each line, the value read as
//! what it looks like ([`parse_value`]), with errors that name the line
//! and the column; or read into the typed engine
//! ([`aggregate_delimited_columns`]) as columns, a batch of lines at a
//! time: several key columns as byte strings, several value columns as
//! integers or floats.

use std::io::BufRead;
use std::str::FromStr;

use spillway_core::{bail, Error, Interrupt, Result};

use crate::admission::KEY_BYTES_MAX;
use crate::aggregator::Aggregator;
use crate::typed::{Keys, NumberType, TypedHashAggregator, Values};
use crate::value::Value;

/// Records between two checks for Ctrl-C: a check is an atomic load, this
/// many records take about a millisecond.
pub const INTERRUPT_CHECK_RECORDS: u64 = 4096;

/// How a field becomes a value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ValueType {
    /// An integer if it looks like one, else a float if it parses as one,
    /// else text.
    #[default]
    Auto,
    /// An integer (64-bit).
    Int,
    /// A finite float.
    Float,
    /// The field's bytes.
    Text,
}

impl FromStr for ValueType {
    type Err = Error;

    fn from_str(text: &str) -> Result<Self> {
        match text {
            "auto" => Ok(ValueType::Auto),
            "int" => Ok(ValueType::Int),
            "float" => Ok(ValueType::Float),
            "text" => Ok(ValueType::Text),
            other => bail!(
                InvalidArgument,
                "value type must be auto, int, float or text, not '{other}'"
            ),
        }
    }
}

/// A column separator: one byte, or `\t` written out.
pub fn parse_delimiter(text: &str) -> Result<u8> {
    match text {
        "\\t" | "\t" => Ok(b'\t'),
        _ if text.len() == 1 => Ok(text.as_bytes()[0]),
        _ => bail!(
            InvalidArgument,
            "delimiter must be one byte (or \\t), not '{text}'"
        ),
    }
}

/// Where the key and the value are in each line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DelimitedOptions {
    /// The column separator.
    pub delimiter: u8,
    /// Column of the key, counting from 1.
    pub key_column: usize,
    /// Column of the value, counting from 1; `None` counts records (each
    /// value is 1).
    pub value_column: Option<usize>,
    /// Whether the first line is a header, skipped.
    pub header: bool,
    /// How values are read.
    pub value_type: ValueType,
}

impl Default for DelimitedOptions {
    fn default() -> Self {
        DelimitedOptions {
            delimiter: b',',
            key_column: 1,
            value_column: None,
            header: false,
            value_type: ValueType::Auto,
        }
    }
}

/// The records of a delimited file: its lines, numbered from 1, their ends
/// (`\n`, `\r\n`) cut, the header and empty lines skipped; the interrupt
/// is checked every [`INTERRUPT_CHECK_RECORDS`] lines.
struct Records<'a, R> {
    reader: R,
    source: &'a str,
    header: bool,
    line: Vec<u8>,
    number: u64,
}

impl<'a, R: BufRead> Records<'a, R> {
    fn new(reader: R, source: &'a str, header: bool) -> Self {
        Records {
            reader,
            source,
            header,
            line: Vec::with_capacity(256),
            number: 0,
        }
    }

    /// The next record and its line's number, or `None` at the end.
    fn next(&mut self, interrupt: &Interrupt) -> Result<Option<(u64, &[u8])>> {
        loop {
            self.line.clear();
            let read = self
                .reader
                .read_until(b'\n', &mut self.line)
                .map_err(|error| Error::io(format!("reading {}", self.source), error))?;
            if read == 0 {
                return Ok(None);
            }
            self.number += 1;
            if self.number.is_multiple_of(INTERRUPT_CHECK_RECORDS) {
                interrupt.check()?;
            }
            let text = self.line.strip_suffix(b"\n").unwrap_or(&self.line);
            let length = text.strip_suffix(b"\r").unwrap_or(text).len();
            if length > 0 && !(self.number == 1 && self.header) {
                return Ok(Some((self.number, &self.line[..length])));
            }
        }
    }
}

/// Aggregates every line of `reader` (named `source` in errors); returns
/// the number of records. Empty lines are skipped; a line without the key
/// or value column, or a value the type refuses, is an error naming
/// `source`, the line and the column. `interrupt` is checked every
/// [`INTERRUPT_CHECK_RECORDS`] lines.
pub fn aggregate_delimited(
    aggregator: &mut Aggregator,
    reader: impl BufRead,
    source: &str,
    options: &DelimitedOptions,
    interrupt: &Interrupt,
) -> Result<u64> {
    if options.key_column == 0 || options.value_column == Some(0) {
        bail!(InvalidArgument, "columns count from 1");
    }
    let delimiter = options.delimiter;
    let key_column = options.key_column - 1;
    let value_column = options.value_column.map(|column| column - 1);
    let last_column = key_column.max(value_column.unwrap_or(0));
    let mut lines = Records::new(reader, source, options.header);
    let mut records = 0u64;
    while let Some((number, text)) = lines.next(interrupt)? {
        // One pass over the line picks out both columns.
        let wanted = [Some(key_column), value_column];
        let mut fields: [Option<&[u8]>; 2] = [None, None];
        for (index, field) in text
            .split(|&byte| byte == delimiter)
            .enumerate()
            .take(last_column + 1)
        {
            for (slot, column) in fields.iter_mut().zip(wanted) {
                if column == Some(index) {
                    *slot = Some(field);
                }
            }
        }
        let missing = |column: usize| {
            Error::InvalidArgument(format!(
                "{source} line {number}: no column {} (the line has {})",
                column + 1,
                text.split(|&byte| byte == delimiter).count()
            ))
        };
        let key = fields[0].ok_or_else(|| missing(key_column))?;
        let value = match value_column {
            Some(column) => parse_value(fields[1].ok_or_else(|| missing(column))?, options.value_type)
                .map_err(|error| {
                    error.context(format_args!("{source} line {number}, column {}", column + 1))
                })?,
            None => Value::Int(1),
        };
        // A refused value is about the value's column (a key too long, the
        // key's; counting, there is no value).
        aggregator.insert(key, value).map_err(|error| {
            error.context(format_args!(
                "{source} line {number}, column {}",
                value_column.unwrap_or(key_column) + 1
            ))
        })?;
        records += 1;
    }
    Ok(records)
}

/// Where the keys and values are in each line, for the typed engine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ColumnsOptions {
    /// The column separator.
    pub delimiter: u8,
    /// Columns of the keys, counting from 1: a group per distinct
    /// combination.
    pub key_columns: Vec<usize>,
    /// Columns of the values, counting from 1, one per value column of the
    /// aggregator (read as its number types); none counts records (each
    /// value is 1, and the aggregator takes one integer column).
    pub value_columns: Vec<usize>,
    /// Whether the first line is a header, skipped.
    pub header: bool,
}

/// Lines gathered before they go to the typed engine as one batch: large
/// enough that its threads pay off, small enough to stay in cache.
pub const COLUMNS_BATCH_LINES: usize = 1 << 16;

/// A value column being gathered.
enum NumberColumn {
    Int(Vec<i64>),
    Float(Vec<f64>),
}

impl NumberColumn {
    fn values(&self) -> Values<'_> {
        match self {
            NumberColumn::Int(values) => Values::Int(values),
            NumberColumn::Float(values) => Values::Float(values),
        }
    }

    fn clear(&mut self) {
        match self {
            NumberColumn::Int(values) => values.clear(),
            NumberColumn::Float(values) => values.clear(),
        }
    }

    /// How its fields are parsed.
    fn value_type(&self) -> ValueType {
        match self {
            NumberColumn::Int(_) => ValueType::Int,
            NumberColumn::Float(_) => ValueType::Float,
        }
    }

    /// Appends a value parsed for it (by [`value_type`](Self::value_type)).
    fn push(&mut self, value: Number) {
        match (self, value) {
            (NumberColumn::Int(values), Number::Int(value)) => values.push(value),
            (NumberColumn::Float(values), Number::Float(value)) => values.push(value),
            (_, value) => unreachable!("{value:?} parsed for a column of another type"),
        }
    }
}

/// Aggregates every line of `reader` (named `source` in errors) into the
/// typed `aggregator`, [`COLUMNS_BATCH_LINES`] lines at a time; returns the
/// number of records. Keys are the fields' bytes; values are parsed as the
/// aggregator's number types ([`parse_value`]'s rules). Empty lines are
/// skipped; a missing column or a value that does not parse is an error
/// naming `source`, the line and the column, and nothing of its batch is
/// inserted. `interrupt` is checked every [`INTERRUPT_CHECK_RECORDS`]
/// lines.
pub fn aggregate_delimited_columns(
    aggregator: &mut TypedHashAggregator,
    reader: impl BufRead,
    source: &str,
    options: &ColumnsOptions,
    interrupt: &Interrupt,
) -> Result<u64> {
    let columns = options.key_columns.iter().chain(&options.value_columns);
    if options.key_columns.is_empty() || columns.clone().any(|&column| column == 0) {
        bail!(
            InvalidArgument,
            "give at least one key column; columns count from 1"
        );
    }
    let last_column = columns.max().copied().unwrap_or(1) - 1;
    let counting = options.value_columns.is_empty();
    let mut keys: Vec<(Vec<u64>, Vec<u8>)> = vec![(vec![0], Vec::new()); options.key_columns.len()];
    let mut values: Vec<NumberColumn> = aggregator
        .number_types()
        .iter()
        .map(|number_type| match number_type {
            NumberType::Int => NumberColumn::Int(Vec::new()),
            NumberType::Float => NumberColumn::Float(Vec::new()),
        })
        .collect();
    if values.len() != options.value_columns.len().max(1) {
        bail!(
            InvalidArgument,
            "{} value columns for an aggregator of {}",
            options.value_columns.len(),
            values.len()
        );
    }
    let mut lines = Records::new(reader, source, options.header);
    let (mut fields, mut line_values) = (Vec::new(), Vec::new());
    let (mut records, mut first_line, mut last_line) = (0u64, 0u64, 0u64);
    loop {
        let record = lines.next(interrupt)?;
        let pending = keys[0].0.len() - 1;
        if pending > 0 && (record.is_none() || pending == COLUMNS_BATCH_LINES) {
            let key_columns: Vec<Keys<'_>> = keys
                .iter()
                .map(|(offsets, data)| Keys::Bytes { offsets, data })
                .collect();
            let value_columns: Vec<Values<'_>> = values.iter().map(NumberColumn::values).collect();
            aggregator
                .insert_columns(&key_columns, &value_columns)
                .map_err(|error| error.context(format_args!("{source} lines {first_line} to {last_line}")))?;
            records += pending as u64;
            for (offsets, data) in &mut keys {
                offsets.truncate(1);
                data.clear();
            }
            values.iter_mut().for_each(NumberColumn::clear);
        }
        let Some((number, text)) = record else {
            return Ok(records);
        };
        if keys[0].0.len() == 1 {
            first_line = number;
        }
        last_line = number;
        // The line's fields up to the last one wanted, as ranges.
        fields.clear();
        let mut start = 0;
        for field in text
            .split(|&byte| byte == options.delimiter)
            .take(last_column + 1)
        {
            fields.push(start..start + field.len());
            start += field.len() + 1;
        }
        let field = |column: usize| {
            fields
                .get(column - 1)
                .map(|range| &text[range.clone()])
                .ok_or_else(|| {
                    Error::InvalidArgument(format!(
                        "{source} line {number}: no column {column} (the line has {})",
                        text.split(|&byte| byte == options.delimiter).count()
                    ))
                })
        };
        // Every field is checked before any of the line is gathered, so a
        // refused line leaves the batch's columns of one length.
        for &column in &options.key_columns {
            let key = field(column)?;
            if key.len() > KEY_BYTES_MAX {
                bail!(
                    InvalidArgument,
                    "{source} line {number}, column {column}: a key of {} bytes is longer than the {KEY_BYTES_MAX} bytes allowed",
                    key.len()
                );
            }
        }
        line_values.clear();
        for (&column, values) in options.value_columns.iter().zip(&values) {
            let value = parse_value(field(column)?, values.value_type())
                .map_err(|error| error.context(format_args!("{source} line {number}, column {column}")))?;
            line_values.push(match value {
                Value::Int(value) => Number::Int(value),
                Value::Float(value) => Number::Float(value),
                Value::Bytes(_) => unreachable!("an int or float column parses numbers"),
            });
        }
        if counting {
            line_values.push(Number::Int(1));
        }
        for (&column, (offsets, data)) in options.key_columns.iter().zip(&mut keys) {
            data.extend_from_slice(field(column)?);
            offsets.push(data.len() as u64);
        }
        for (values, &value) in values.iter_mut().zip(&line_values) {
            values.push(value);
        }
    }
}

/// A value of a line, parsed for its column before any of the line is
/// gathered.
#[derive(Debug, Clone, Copy)]
enum Number {
    Int(i64),
    Float(f64),
}

/// A field as a value. Numbers are what they look like, with two rules
/// that hold in auto mode too, so that no number silently becomes
/// something else: an integer must fit 64 bits (one that does not is an
/// error, not a float), and a float must be finite (`NaN`, `inf`, `1e999`
/// are errors, not text). See docs/aggregate.md.
pub fn parse_value(field: &[u8], value_type: ValueType) -> Result<Value<'_>> {
    if value_type == ValueType::Text {
        return Ok(Value::Bytes(field));
    }
    let shown = || String::from_utf8_lossy(field);
    let text = std::str::from_utf8(field).ok().map(str::trim);
    let integer = text.filter(|text| value_type != ValueType::Float && looks_like_integer(text));
    if let Some(text) = integer {
        return match text.parse::<i64>() {
            Ok(value) => Ok(Value::Int(value)),
            Err(_) => bail!(
                InvalidArgument,
                "'{}' is an integer outside the 64-bit range ({} to {}); sums of 64-bit integers are exact, but each value must fit 64 bits",
                shown(),
                i64::MIN,
                i64::MAX
            ),
        };
    }
    let float = text.and_then(|text| text.parse::<f64>().ok());
    match (float, value_type) {
        (Some(value), ValueType::Float | ValueType::Auto) if value.is_finite() => Ok(Value::Float(value)),
        (Some(_), ValueType::Float | ValueType::Auto) => bail!(
            InvalidArgument,
            "'{}' is not a finite number; NaN and infinities are refused (floats must be finite)",
            shown()
        ),
        (_, ValueType::Int) => bail!(InvalidArgument, "'{}' is not an integer", shown()),
        (None, ValueType::Float) => bail!(InvalidArgument, "'{}' is not a number", shown()),
        _ => Ok(Value::Bytes(field)),
    }
}

/// An optional sign and one or more ASCII digits.
fn looks_like_integer(text: &str) -> bool {
    let digits = text.strip_prefix(['-', '+']).unwrap_or(text);
    !digits.is_empty() && digits.bytes().all(|byte| byte.is_ascii_digit())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{AggregatorOptions, Output};

    #[test]
    fn numbers_are_what_they_look_like_within_range() {
        assert_eq!(parse_value(b" -12 ", ValueType::Auto).unwrap(), Value::Int(-12));
        assert_eq!(parse_value(b"+7", ValueType::Auto).unwrap(), Value::Int(7));
        assert_eq!(parse_value(b"2.5", ValueType::Auto).unwrap(), Value::Float(2.5));
        assert_eq!(parse_value(b"7", ValueType::Float).unwrap(), Value::Float(7.0));
        assert_eq!(
            parse_value(b"99999999999999999999", ValueType::Float).unwrap(),
            Value::Float(1e20)
        );
        assert_eq!(
            parse_value(b"0x10", ValueType::Auto).unwrap(),
            Value::Bytes(b"0x10")
        );
        assert_eq!(parse_value(b"-", ValueType::Auto).unwrap(), Value::Bytes(b"-"));
        for field in [&b"NaN"[..], b"nan", b"inf", b"-Infinity", b"1e400"] {
            let error = parse_value(field, ValueType::Auto).unwrap_err();
            assert!(error.to_string().contains("is not a finite number"), "{error}");
        }
        let error = parse_value(b"9223372036854775808", ValueType::Auto).unwrap_err();
        assert!(error.to_string().contains("outside the 64-bit range"), "{error}");
        let error = parse_value(b"1.5", ValueType::Int).unwrap_err();
        assert!(error.to_string().contains("'1.5' is not an integer"), "{error}");
    }

    #[test]
    fn lines_give_their_columns_and_errors_name_where() {
        let mut aggregator = Aggregator::new("sum", AggregatorOptions::default()).unwrap();
        let options = DelimitedOptions {
            key_column: 2,
            value_column: Some(1),
            header: true,
            ..DelimitedOptions::default()
        };
        let text = &b"value,key\n3,a\r\n\n4,a\n5,b\n"[..];
        let records =
            aggregate_delimited(&mut aggregator, text, "t.csv", &options, &Interrupt::new()).unwrap();
        assert_eq!(records, 3);
        aggregator.finalize().unwrap();
        assert_eq!(aggregator.get(b"a").unwrap(), Some(Output::Int(7)));
        let mut aggregator = Aggregator::new("sum", AggregatorOptions::default()).unwrap();
        let error = aggregate_delimited(
            &mut aggregator,
            &b"1,a\nx\n"[..],
            "t.csv",
            &options,
            &Interrupt::new(),
        )
        .unwrap_err();
        assert_eq!(
            error.to_string(),
            "invalid argument: t.csv line 2: no column 2 (the line has 1)"
        );
        assert_eq!(parse_delimiter("\\t").unwrap(), b'\t');
        assert!(parse_delimiter("ab").is_err());
        assert_eq!("int".parse::<ValueType>().unwrap(), ValueType::Int);
    }

    #[test]
    fn columns_are_read_in_batches_and_a_bad_line_is_named() {
        use crate::typed::{KeyType, NumberType, TypedHashAggregator};
        let lines = COLUMNS_BATCH_LINES + 5_000;
        let mut text = String::from("a,b,v\n");
        for index in 0..lines {
            text.push_str(&format!("k{},{},{}\n\n", index % 3, index % 2, index % 10));
        }
        let options = ColumnsOptions {
            delimiter: b',',
            key_columns: vec![1, 2],
            value_columns: vec![],
            header: true,
        };
        let mut counts =
            TypedHashAggregator::with_columns("count", &[KeyType::Bytes; 2], &[NumberType::Int], 1, u64::MAX)
                .unwrap();
        let records =
            aggregate_delimited_columns(&mut counts, text.as_bytes(), "t.csv", &options, &Interrupt::new())
                .unwrap();
        assert_eq!(records, lines as u64);
        assert_eq!(counts.groups(), 6);
        let results = counts.results().unwrap();
        let total: i64 = (0..6)
            .map(|group| match results.columns[0].get(group) {
                Output::Int(count) => count,
                other => panic!("a count of {other:?}"),
            })
            .sum();
        assert_eq!(
            total, lines as i64,
            "every line counted once, empty lines skipped"
        );
        let options = ColumnsOptions {
            value_columns: vec![3],
            ..options
        };
        let mut sums =
            TypedHashAggregator::with_columns("sum", &[KeyType::Bytes; 2], &[NumberType::Float], 2, u64::MAX)
                .unwrap();
        let bad = format!("{text}k1,0,seven\n");
        let error =
            aggregate_delimited_columns(&mut sums, bad.as_bytes(), "t.csv", &options, &Interrupt::new())
                .unwrap_err();
        let line = 2 * lines + 2;
        assert!(
            error
                .to_string()
                .contains(&format!("t.csv line {line}, column 3: 'seven' is not a number")),
            "{error}"
        );
        // The full batch before it went in; the bad line's batch did not.
        assert_eq!(sums.stats().inserts, COLUMNS_BATCH_LINES as u64);
    }
}
