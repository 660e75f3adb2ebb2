//! A job's output: one file per partition, in text or in the binary
//! key/value format that jobs read back ([`InputFormat::KeyValue`]).
//!
//! Partition `p` is written to `part-PPPPP.partial` in the output
//! directory, synced, and renamed to `part-PPPPP.tsv` (text) or
//! `part-PPPPP.kv` (binary) once whole, so a file with its final name is
//! always complete. With range partitioning the files in name order hold
//! the keys in order.
//!
//! [`InputFormat::KeyValue`]: crate::InputFormat::KeyValue

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use spillway_agg::Output;
use spillway_core::decimal::push_decimal;
use spillway_core::{bail, Fs, FsFile, Result};

use crate::chunk;
use crate::job::Job;
use crate::record::PairBuf;

/// Bytes an output writer gathers before each write.
const WRITE_BYTES: usize = 1 << 20;

/// How output records are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OutputFormat {
    /// Lines of text, as the job writes them ([`Job::write_text`]: key, tab,
    /// value by default).
    Text,
    /// Checksummed chunks of framed key/value records.
    Binary,
}

impl OutputFormat {
    /// The format named `name` (`text` or `kv`).
    pub fn parse(name: &str) -> Result<Self> {
        Ok(match name {
            "text" => OutputFormat::Text,
            "kv" | "binary" => OutputFormat::Binary,
            _ => bail!(InvalidArgument, "unknown output format '{name}'; use text or kv"),
        })
    }

    fn extension(self) -> &'static str {
        match self {
            OutputFormat::Text => "tsv",
            OutputFormat::Binary => "kv",
        }
    }
}

/// The final name of partition `partition`'s output in `dir`.
pub fn output_path(dir: &Path, partition: usize, format: OutputFormat) -> PathBuf {
    dir.join(format!("part-{partition:05}.{}", format.extension()))
}

/// Writes one partition's output records, in large writes, to its
/// `.partial` file; [`finish`](Self::finish) syncs and renames it.
#[derive(Debug)]
pub struct PartitionWriter {
    fs: Arc<dyn Fs>,
    file: Box<dyn FsFile>,
    partial: PathBuf,
    path: PathBuf,
    format: OutputFormat,
    partition: u32,
    pending: Vec<u8>,
    records: PairBuf,
    records_written: u64,
    bytes_written: u64,
}

impl PartitionWriter {
    /// Starts partition `partition`'s output in `dir`.
    pub fn create(fs: Arc<dyn Fs>, dir: &Path, partition: usize, format: OutputFormat) -> Result<Self> {
        let path = output_path(dir, partition, format);
        let partial = dir.join(format!("part-{partition:05}.partial"));
        let file = fs.create_or_truncate(&partial)?;
        Ok(PartitionWriter {
            fs,
            file,
            partial,
            path,
            format,
            partition: partition as u32,
            pending: Vec::with_capacity(WRITE_BYTES + 4096),
            records: PairBuf::default(),
            records_written: 0,
            bytes_written: 0,
        })
    }

    /// Writes one record.
    pub fn write(&mut self, job: &dyn Job, key: &[u8], value: &[u8]) -> Result<()> {
        self.records_written += 1;
        match self.format {
            OutputFormat::Text => {
                job.write_text(key, value, &mut self.pending);
                if self.pending.len() >= WRITE_BYTES {
                    self.write_pending()?;
                }
            }
            OutputFormat::Binary => {
                self.records.push(key, value);
                if self.records.len() >= WRITE_BYTES {
                    self.cut_chunk();
                    self.write_pending()?;
                }
            }
        }
        Ok(())
    }

    /// Records written so far.
    pub fn records_written(&self) -> u64 {
        self.records_written
    }

    /// Writes every record of `records`.
    pub fn write_all(&mut self, job: &dyn Job, records: &PairBuf) -> Result<()> {
        for pair in records.pairs() {
            let pair = pair.expect("a buffer built in memory is well framed");
            self.write(job, pair.key, pair.value)?;
        }
        Ok(())
    }

    fn cut_chunk(&mut self) {
        if !self.records.is_empty() {
            chunk::encode(
                self.partition,
                self.records.records(),
                None,
                self.records.as_bytes(),
                &mut self.pending,
            );
            self.records.clear();
        }
    }

    fn write_pending(&mut self) -> Result<()> {
        if !self.pending.is_empty() {
            self.file.write_at(&self.pending, self.bytes_written)?;
            self.bytes_written += self.pending.len() as u64;
            self.pending.clear();
        }
        Ok(())
    }

    /// Gives up the output (its partition turned out to be lost): removes
    /// the partial file.
    pub fn abandon(self) -> Result<()> {
        drop(self.file);
        self.fs.remove_file(&self.partial)
    }

    /// Writes what is left, syncs the file if `sync`, and gives it its
    /// final name; returns the records and bytes written.
    pub fn finish(mut self, sync: bool) -> Result<(u64, u64)> {
        self.cut_chunk();
        self.write_pending()?;
        if sync {
            self.file.sync_data()?;
        }
        self.fs.rename(&self.partial, &self.path)?;
        Ok((self.records_written, self.bytes_written))
    }
}

/// Writes an aggregate's result as text: integers and floats in decimal,
/// byte strings as they are, lists joined by commas, null as nothing.
pub fn write_output(output: &Output, out: &mut Vec<u8>) {
    use std::io::Write;
    match output {
        Output::Null => {}
        Output::Int(value) if *value >= 0 => push_decimal(out, value.unsigned_abs()),
        Output::Int(value) => write!(out, "{value}").expect("writing to memory"),
        Output::Int128(value) => write!(out, "{value}").expect("writing to memory"),
        Output::Float(value) => write!(out, "{value}").expect("writing to memory"),
        Output::Bytes(bytes) => out.extend_from_slice(bytes),
        Output::List(items) => {
            for (index, item) in items.iter().enumerate() {
                if index > 0 {
                    out.push(b',');
                }
                write_output(item, out);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_are_written_as_display_writes_them() {
        let mut out = Vec::new();
        for value in [0, -1, 42, i64::MIN, i64::MAX] {
            out.clear();
            write_output(&Output::Int(value), &mut out);
            assert_eq!(out, value.to_string().as_bytes());
        }
    }
}
