//! A job's output: one file per partition, in text or in the binary
//! key/value format that jobs read back ([`InputFormat::KeyValue`]).
//!
//! Partition `p` is written to `part-PPPPP.partial` in the output
//! directory, synced, and renamed to `part-PPPPP.tsv` (text) or
//! `part-PPPPP.kv` (binary) once whole, so a file with its final name is
//! always complete. With range partitioning the files in name order hold
//! the keys in order.
//!
//! Each finished output is then recorded in the job's work directory as
//! `part-PPPPP.done` ([`Finished`]: its length and checksum), so that a job
//! resumed after a failure keeps only the outputs that still match what
//! was written and makes the others again (a text output carries no
//! checksum of its own).
//!
//! ```text
//! part-PPPPP.done = bytes u64 LE | block_crc(partition, 0, output) u32 LE | crc32c of the 12 bytes before u32 LE
//! ```
//!
//! [`InputFormat::KeyValue`]: crate::InputFormat::KeyValue

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use spillway_agg::Output;
use spillway_core::decimal::push_decimal;
use spillway_core::{bail, crc32c, BlockChecksum, Fs, FsFile, Result};

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
    checksum: BlockChecksum,
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
            checksum: BlockChecksum::new(partition as u64, 0),
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
            self.checksum.update(&self.pending);
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
    /// final name; returns what it wrote.
    pub fn finish(mut self, sync: bool) -> Result<Finished> {
        self.cut_chunk();
        self.write_pending()?;
        if sync {
            self.file.sync_data()?;
        }
        self.fs.rename(&self.partial, &self.path)?;
        Ok(Finished {
            records: self.records_written,
            bytes: self.bytes_written,
            checksum: self.checksum.finish(),
        })
    }
}

/// A finished partition output: what was written, and what a resumed job
/// checks the output against (module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Finished {
    /// Records written (not recorded in the work directory).
    pub records: u64,
    /// Bytes of the output file.
    pub bytes: u64,
    /// `block_crc(partition, 0, contents)`.
    pub checksum: u32,
}

const FINISHED_BYTES: usize = 16;

/// Where a job records partition `partition`'s finished output in its
/// work directory `work_dir`.
pub fn finished_path(work_dir: &Path, partition: usize) -> PathBuf {
    work_dir.join(format!("part-{partition:05}.done"))
}

impl Finished {
    /// Writes the record to `path` (synced if `sync`).
    pub fn store(&self, fs: &dyn Fs, path: &Path, sync: bool) -> Result<()> {
        let mut bytes = [0u8; FINISHED_BYTES];
        bytes[..8].copy_from_slice(&self.bytes.to_le_bytes());
        bytes[8..12].copy_from_slice(&self.checksum.to_le_bytes());
        let crc = crc32c(&bytes[..12]);
        bytes[12..].copy_from_slice(&crc.to_le_bytes());
        let file = fs.create_or_truncate(path)?;
        file.write_at(&bytes, 0)?;
        if sync {
            file.sync_data()?;
        }
        Ok(())
    }

    /// Checks the output at `output` (partition `partition`) against the
    /// record at `record`: `None` when they match, else why not (no record,
    /// a damaged one, a length or a checksum that differs).
    pub fn check(fs: &dyn Fs, record: &Path, output: &Path, partition: usize) -> Result<Option<String>> {
        if !fs.exists(record)? {
            return Ok(Some("no record of it was made".into()));
        }
        let file = fs.open_read(record)?;
        let mut bytes = Vec::with_capacity(FINISHED_BYTES);
        let len = file.len()?;
        if len != FINISHED_BYTES as u64 {
            return Ok(Some(format!("its record {} holds {len} bytes", record.display())));
        }
        file.read_exact_append(&mut bytes, FINISHED_BYTES, 0)?;
        let stored = u32::from_le_bytes(bytes[12..].try_into().expect("4 bytes"));
        if crc32c(&bytes[..12]) != stored {
            return Ok(Some(format!(
                "its record {} fails its checksum",
                record.display()
            )));
        }
        let expected_bytes = u64::from_le_bytes(bytes[..8].try_into().expect("8 bytes"));
        let expected_checksum = u32::from_le_bytes(bytes[8..12].try_into().expect("4 bytes"));
        let output_file = fs.open_read(output)?;
        let actual_bytes = output_file.len()?;
        if actual_bytes != expected_bytes {
            return Ok(Some(format!(
                "{actual_bytes} bytes where {expected_bytes} were written"
            )));
        }
        let mut checksum = BlockChecksum::new(partition as u64, 0);
        let mut buffer = Vec::with_capacity(WRITE_BYTES);
        let mut offset = 0;
        while offset < actual_bytes {
            let piece = (actual_bytes - offset).min(WRITE_BYTES as u64) as usize;
            buffer.clear();
            output_file.read_exact_append(&mut buffer, piece, offset)?;
            checksum.update(&buffer);
            offset += piece as u64;
        }
        Ok((checksum.finish() != expected_checksum)
            .then(|| "its contents changed since it was written".into()))
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
