//! Records from outside the program (a CSV file, a generator) written in
//! batches, each record named by where it came from ("data.csv line 7")
//! when it is refused.
//!
//! Every record before a refused one is written, and the error says how
//! many: an ingest cut short by bad input can be resumed after the bad
//! record instead of started again.

use std::io::BufRead;

use spillway_core::{Error, Interrupt, Result};

use crate::batch::{Op, NOT_FINITE};
use crate::index::StreamIndex;

/// Records kept until their batch is written, in flat columns, with the
/// number of each (its line or its position) for errors.
#[derive(Debug)]
pub struct IngestBatch {
    keys: Vec<u64>,
    times: Vec<u64>,
    value_ends: Vec<usize>,
    values: Vec<u8>,
    numbers: Vec<u64>,
    /// What a record's number counts, as errors say it: "line", "record".
    unit: &'static str,
    /// Where the records come from, as errors say it: a file's path.
    source: String,
}

impl IngestBatch {
    /// An empty batch of records from `source`, numbered in `unit`s.
    pub fn new(source: impl Into<String>, unit: &'static str) -> Self {
        IngestBatch {
            keys: Vec::new(),
            times: Vec::new(),
            value_ends: Vec::new(),
            values: Vec::new(),
            numbers: Vec::new(),
            unit,
            source: source.into(),
        }
    }

    /// Records kept.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// Whether none is kept.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// Keeps record `number` of the source.
    pub fn push(&mut self, key: u64, time: u64, value: &[u8], number: u64) {
        self.keys.push(key);
        self.times.push(time);
        self.values.extend_from_slice(value);
        self.value_ends.push(self.values.len());
        self.numbers.push(number);
    }

    fn record(&self, i: usize) -> (u64, u64, &[u8]) {
        let start = if i == 0 { 0 } else { self.value_ends[i - 1] };
        (
            self.keys[i],
            self.times[i],
            &self.values[start..self.value_ends[i]],
        )
    }

    fn clear(&mut self) {
        self.keys.clear();
        self.times.clear();
        self.value_ends.clear();
        self.values.clear();
        self.numbers.clear();
    }

    /// Appends the records kept to `index`, checked first, and empties the
    /// batch. A record that fails the check stops the write after the
    /// records before it, and the error names it ("data.csv: line 7 (key
    /// 3, time 9) has ...").
    pub fn write(&mut self, index: &StreamIndex, interrupt: &Interrupt) -> Result<()> {
        if self.is_empty() {
            return Ok(());
        }
        interrupt.check()?;
        let checked = index.check_records(
            self.len(),
            |i| self.record(i),
            |i| format!("{} {}", self.unit, self.numbers[i]),
        );
        let (valid, failure) = match checked {
            Ok(()) => (self.len(), None),
            Err((at, error)) => (at, Some(error)),
        };
        if valid > 0 {
            let (first, last) = (self.numbers[0], self.numbers[valid - 1]);
            index
                .write_in_parts(Op::Append, valid, |i| self.record(i), interrupt)
                .map_err(|error| match first == last {
                    true => error.context(format!("{} {} {first}", self.source, self.unit)),
                    false => error.context(format!("{} {}s {first}-{last}", self.source, self.unit)),
                })?;
        }
        self.clear();
        match failure {
            Some(error) => Err(error.context(&self.source)),
            None => Ok(()),
        }
    }
}

/// Appends the records of a CSV file, a `key,time,value` line each (see
/// [`parse_csv_line`]; with `header` the first line is skipped, and empty
/// lines are), in batches of `batch_records`. `source` names the file in
/// errors; `progress` is told the bytes read after each batch. Returns the
/// records written. At a bad line, the records before it are written and
/// the error names the line and says how many were.
pub fn ingest_csv(
    index: &StreamIndex,
    mut input: impl BufRead,
    source: &str,
    header: bool,
    batch_records: usize,
    interrupt: &Interrupt,
    mut progress: impl FnMut(u64),
) -> Result<u64> {
    if batch_records == 0 {
        return Err(Error::InvalidArgument(
            "a batch must hold at least 1 record".into(),
        ));
    }
    let mut batch = IngestBatch::new(source, "line");
    let mut line = Vec::with_capacity(256);
    let mut value = Vec::with_capacity(256);
    let (mut number, mut records, mut read) = (0u64, 0u64, 0u64);
    loop {
        line.clear();
        let len = input
            .read_until(b'\n', &mut line)
            .map_err(|error| Error::io(format!("reading {source}"), error))?;
        if len == 0 {
            break;
        }
        number += 1;
        read += len as u64;
        if number == 1 && header {
            continue;
        }
        let text = line.strip_suffix(b"\n").unwrap_or(&line);
        let text = text.strip_suffix(b"\r").unwrap_or(text);
        if text.is_empty() {
            continue;
        }
        match parse_csv_line(text, &mut value) {
            Ok((key, time)) => batch.push(key, time, &value, number),
            Err(error) => {
                let before = records + batch.len() as u64;
                batch.write(index, interrupt)?;
                return Err(error.context(format!(
                    "{source} line {number} (the {before} records before it were written)"
                )));
            }
        }
        if batch.len() >= batch_records {
            records += batch.len() as u64;
            batch.write(index, interrupt)?;
            progress(read);
        }
    }
    records += batch.len() as u64;
    batch.write(index, interrupt)?;
    progress(read);
    Ok(records)
}

/// Parses a CSV line `key,time,value` into the key and time, and the value
/// into `value`: a finite number as 8 little-endian bytes of an f64,
/// anything else (or a quoted field, `""` standing for one quote) as its
/// bytes. A number that is not finite is refused (quoted, it is text).
pub fn parse_csv_line(line: &[u8], value: &mut Vec<u8>) -> Result<(u64, u64)> {
    let mut fields = line.splitn(3, |&byte| byte == b',');
    let (Some(key), Some(time), Some(field)) = (fields.next(), fields.next(), fields.next()) else {
        return Err(Error::InvalidArgument(format!(
            "expected key,time,value, got '{}'",
            String::from_utf8_lossy(line)
        )));
    };
    let integer = |field: &[u8], what: &str| -> Result<u64> {
        std::str::from_utf8(field)
            .ok()
            .and_then(|text| text.trim().parse::<u64>().ok())
            .ok_or_else(|| {
                Error::InvalidArgument(format!(
                    "the {what} '{}' is not an unsigned 64-bit integer",
                    String::from_utf8_lossy(field)
                ))
            })
    };
    let key = integer(key, "key")?;
    let time = integer(time, "time")?;
    value.clear();
    if field.len() >= 2 && field.starts_with(b"\"") && field.ends_with(b"\"") {
        let inner = &field[1..field.len() - 1];
        let mut at = 0;
        while at < inner.len() {
            value.push(inner[at]);
            at += if inner[at] == b'"' && inner.get(at + 1) == Some(&b'"') {
                2
            } else {
                1
            };
        }
        return Ok((key, time));
    }
    let number = std::str::from_utf8(field)
        .ok()
        .and_then(|text| text.trim().parse::<f64>().ok());
    match number {
        Some(number) if !number.is_finite() => Err(Error::InvalidArgument(format!(
            "the value '{}' reads as {number}, which the index refuses: {NOT_FINITE} \
             (quote it, \"{}\", to store it as text)",
            String::from_utf8_lossy(field),
            String::from_utf8_lossy(field)
        ))),
        Some(number) => {
            value.extend_from_slice(&number.to_le_bytes());
            Ok((key, time))
        }
        None => {
            value.extend_from_slice(field);
            Ok((key, time))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_values_are_numbers_or_text() {
        let mut value = Vec::new();
        assert_eq!(parse_csv_line(b"7,12,2.5", &mut value).unwrap(), (7, 12));
        assert_eq!(value, 2.5f64.to_le_bytes());
        parse_csv_line(b"7,12,hello, world", &mut value).unwrap();
        assert_eq!(value, b"hello, world");
        parse_csv_line(b"7,12,\"2.5\"", &mut value).unwrap();
        assert_eq!(value, b"2.5");
        parse_csv_line(b"7,12,\"say \"\"hi\"\"\"", &mut value).unwrap();
        assert_eq!(value, b"say \"hi\"");
        for not_finite in ["inf", "NaN", "-infinity", " nan "] {
            let error = parse_csv_line(format!("7,12,{not_finite}").as_bytes(), &mut value).unwrap_err();
            let text = error.to_string();
            assert!(
                text.contains(&format!("'{not_finite}'")) && text.contains("must be finite"),
                "{text}"
            );
        }
        parse_csv_line(b"7,12,\"NaN\"", &mut value).unwrap();
        assert_eq!(value, b"NaN");
        parse_csv_line(b"7,12,", &mut value).unwrap();
        assert!(value.is_empty());
        let error = parse_csv_line(b"-1,12,3", &mut value).unwrap_err();
        assert!(error.to_string().contains("key '-1' is not"), "{error}");
        let error = parse_csv_line(b"1,12", &mut value).unwrap_err();
        assert!(error.to_string().contains("expected key,time,value"), "{error}");
    }
}
