//! The write path of a [`StreamIndex`]: a batch is logged (and synced),
//! then indexed in the active buffer; a full buffer is frozen and handed
//! to the flusher, and the next one takes writes.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use spillway_core::sync;
use spillway_core::{Error, Interrupt, Result};

use crate::batch::{check_writes, Batch, Op};
use crate::buffer::{Buffer, BufferEntry, BufferTree, RECORD_OVERHEAD_BYTES};
use crate::index::StreamIndex;
use crate::manifest::LiveLog;
use crate::options::TemplatePolicy;
use crate::shared::Durable;
use crate::template::TemplateTree;
use crate::wal::{self, Wal};

impl StreamIndex {
    /// Appends one record.
    pub fn append(&self, key: u64, time: u64, value: &[u8]) -> Result<()> {
        let mut batch = Batch::new();
        batch.append(key, time, value);
        self.write(&batch)
    }

    /// Replaces every record with `key` and `time` by this one.
    pub fn update(&self, key: u64, time: u64, value: &[u8]) -> Result<()> {
        let mut batch = Batch::new();
        batch.update(key, time, value);
        self.write(&batch)
    }

    /// Removes every record with `key` and `time`.
    pub fn delete(&self, key: u64, time: u64) -> Result<()> {
        let mut batch = Batch::new();
        batch.delete(key, time);
        self.write(&batch)
    }

    /// Writes a batch: logged (and synced, with `sync`), then indexed.
    /// The batch is all or nothing: a bad write in it refuses it whole.
    pub fn write(&self, batch: &Batch) -> Result<()> {
        self.shared.poison.check()?;
        self.check_writable()?;
        if batch.is_empty() {
            return Ok(());
        }
        let batch_bytes = batch.values.len() + batch.len() * RECORD_OVERHEAD_BYTES;
        let (active, first_seq, log_end) = loop {
            let gate = self.read_gate();
            let active = gate.clone();
            let mut data = sync::lock(&active.data);
            if data.len() > 0 && data.bytes() + batch_bytes > self.shared.options.buffer_bytes {
                drop(data);
                drop(gate);
                self.flush_if_active(active.first_seq)?;
                continue;
            }
            let last_time = self.last_time.load(Ordering::Relaxed);
            let latest = batch.check(
                self.shared.options.value_limit(),
                self.shared.options.ordered_time,
                last_time,
            )?;
            let first_seq = active.first_seq + data.len() as u64;
            let log_end = match data.wal.as_mut() {
                Some(wal) => self.shared.poison.guard(|| wal.append(batch, first_seq))?,
                None => 0,
            };
            self.last_time.store(latest, Ordering::Relaxed);
            data.push_batch(batch);
            data.in_flight.push((first_seq, batch.len() as u64));
            let expected_entries = data.expected_entries(&self.shared.options);
            drop(data);
            // Indexing runs with the gate held shared: a flush waits for it.
            let location = first_seq - active.first_seq;
            if active.index(batch, location, &self.shared.options, expected_entries) {
                self.shared.counters.templates.fetch_add(1, Ordering::Relaxed);
            }
            drop(gate);
            break (active, first_seq, log_end);
        };
        let synced = match &active.wal_sync {
            Some(wal_sync) if self.shared.options.sync => {
                self.shared.poison.guard(|| wal_sync.sync_to(log_end))
            }
            _ => Ok(()),
        };
        let mut data = sync::lock(&active.data);
        let position = data
            .in_flight
            .iter()
            .position(|&(seq, _)| seq == first_seq)
            .expect("registered above");
        data.in_flight.swap_remove(position);
        drop(data);
        self.shared
            .counters
            .writes
            .fetch_add(batch.len() as u64, Ordering::Relaxed);
        synced
    }

    /// Checks records `0..count` (`record(i)` gives record `i`'s key,
    /// time and value) as a write checks them, before any is written:
    /// values no longer than [`Options::value_limit`](crate::Options::value_limit),
    /// numbers finite, and with `ordered_time` times that never go back,
    /// within the records or from the stream's latest. `name(i)` names
    /// record `i` in errors ("record 7", "line 9"). On failure returns the
    /// position of the first bad record and why: a caller may write the
    /// records before it, as [`StreamIndex::write_all`] of that many.
    pub fn check_records<'a>(
        &self,
        count: usize,
        record: impl Fn(usize) -> (u64, u64, &'a [u8]),
        name: impl Fn(usize) -> String,
    ) -> std::result::Result<(), (usize, Error)> {
        let options = &self.shared.options;
        check_writes(
            count,
            record,
            options.value_limit(),
            options.ordered_time,
            self.last_time.load(Ordering::Relaxed),
            name,
        )
        .map(drop)
    }

    /// Writes records `0..count` with `op` (a delete's value is ignored),
    /// checked whole first ([`StreamIndex::check_records`], naming them
    /// "record i"): one bad record refuses them all.
    ///
    /// They are written in parts of about a quarter of a buffer, counted
    /// as the buffer counts them (a value and a fixed cost per record), so
    /// that a large write neither grows a buffer far past `buffer_bytes`
    /// nor holds a copy of itself whole. Each part is acknowledged (logged,
    /// and with `sync` synced) before the next; if one fails, or
    /// `interrupt` is raised before it, the parts before it stay written.
    pub fn write_all<'a>(
        &self,
        op: Op,
        count: usize,
        record: impl Fn(usize) -> (u64, u64, &'a [u8]),
        interrupt: &Interrupt,
    ) -> Result<()> {
        let record = |i: usize| {
            let (key, time, value) = record(i);
            (key, time, if op == Op::Delete { &[][..] } else { value })
        };
        self.check_records(count, record, |i| format!("record {i}"))
            .map_err(|(_, error)| error)?;
        self.write_in_parts(op, count, record, interrupt)
    }

    /// The writing half of [`StreamIndex::write_all`], for records already
    /// checked (an ingest checks its batch itself, to name a bad record
    /// by its line).
    pub(crate) fn write_in_parts<'a>(
        &self,
        op: Op,
        count: usize,
        record: impl Fn(usize) -> (u64, u64, &'a [u8]),
        interrupt: &Interrupt,
    ) -> Result<()> {
        let part_bytes = (self.shared.options.buffer_bytes / 4).max(1);
        let mut part = Batch::new();
        let mut bytes = 0;
        for i in 0..count {
            let (key, time, value) = record(i);
            let cost = value.len() + RECORD_OVERHEAD_BYTES;
            if !part.is_empty() && bytes + cost > part_bytes {
                interrupt.check()?;
                self.write(&part)?;
                part.clear();
                bytes = 0;
            }
            part.push(op, key, time, value);
            bytes += cost;
        }
        interrupt.check()?;
        self.write(&part)
    }

    pub(crate) fn check_writable(&self) -> Result<()> {
        if self.read_only {
            return Err(Error::InvalidArgument(format!(
                "the stream index in {} was opened read-only",
                self.shared.dir.display()
            )));
        }
        Ok(())
    }

    /// Freezes the active buffer if it is still the one that starts at
    /// `first_seq` (a writer found it full). The writer waits while the
    /// buffer frozen before it is being written: two full buffers are as
    /// far as the flusher may fall behind.
    pub(crate) fn flush_if_active(&self, first_seq: u64) -> Result<()> {
        let started = Instant::now();
        let mut durable = self.shared.until_written(sync::lock(&self.shared.durable))?;
        if self.read_gate().first_seq == first_seq {
            self.freeze(&mut durable)?;
        }
        self.shared
            .counters
            .flush_pause_nanos
            .fetch_add(started.elapsed().as_nanos() as u64, Ordering::Relaxed);
        Ok(())
    }

    /// Writes the active buffer as a segment (if it holds anything) and
    /// starts a new one; returns once the segment is durable.
    pub fn flush(&self) -> Result<()> {
        self.check_writable()?;
        let mut durable = self.shared.until_written(sync::lock(&self.shared.durable))?;
        self.freeze(&mut durable)?;
        self.shared.until_written(durable).map(drop)
    }

    /// Hands the active buffer (if it holds anything) to the flusher
    /// thread and starts a new one. Called with no buffer frozen.
    ///
    /// Writers wait only while the next buffer is made: the old one is
    /// sorted and written after they have moved on. The old log is made
    /// durable whole before the new one is listed (most of it before the
    /// writers are stopped), so that every log but the newest is known
    /// to end where the next one starts.
    pub(crate) fn freeze(&self, durable: &mut Durable) -> Result<()> {
        self.shared.poison.check()?;
        let active = self.read_gate().clone();
        self.sync_log(&active)?;
        let mut gate = sync::write(&self.gate);
        let count = sync::lock(&gate.data).len() as u64;
        if count == 0 {
            return Ok(());
        }
        let old = gate.clone();
        self.sync_log(&old)?;
        let template = self.next_template(durable, &old.tree);
        let mut manifest = durable.manifest.clone();
        // The log the flusher made ready, unless it is being made now.
        let spare = self
            .shared
            .spare
            .try_lock()
            .ok()
            .and_then(|mut spare| spare.take())
            .filter(|_| self.shared.options.sync);
        let number = match &spare {
            Some(spare) => spare.number(),
            None => {
                manifest.next_log_number += 1;
                manifest.next_log_number - 1
            }
        };
        let header = wal::Header {
            store_id: manifest.store_id,
            number,
            first_seq: old.first_seq + count,
            padded: self.shared.options.sync,
        };
        manifest.logs.push(LiveLog {
            number: header.number,
            first_seq: header.first_seq,
        });
        let next = self.shared.poison.guard(|| {
            let wal = match spare {
                Some(spare) => Wal::start(spare, header)?,
                None => Wal::create(self.shared.fs.as_ref(), &self.shared.dir, header)?,
            };
            // Listed before any write goes into it.
            manifest.write(self.shared.fs.as_ref(), &self.shared.dir)?;
            Ok(Buffer::new(
                &self.shared.options,
                header.first_seq,
                Some(wal),
                template,
            ))
        })?;
        durable.manifest = manifest;
        *gate = Arc::new(next);
        // Readers switch to the new buffer with the writers, so a write
        // acknowledged in the new buffer is never missed; the old one
        // stays readable until its segment replaces it.
        let mut view = sync::write(&self.shared.view);
        assert!(view.frozen.is_none(), "one buffer frozen at a time");
        view.frozen = Some(old);
        view.active = gate.clone();
        self.shared.frozen_changed.notify_all();
        Ok(())
    }

    /// Makes everything written to `buffer`'s log so far durable.
    pub(crate) fn sync_log(&self, buffer: &Buffer) -> Result<()> {
        let Some(wal_sync) = &buffer.wal_sync else {
            return Ok(());
        };
        let written = sync::lock(&buffer.data).wal.as_ref().map_or(0, Wal::written);
        self.shared.poison.guard(|| wal_sync.sync_to(written))
    }

    /// Picks the index of the next buffer from how the last one went.
    pub(crate) fn next_template(
        &self,
        durable: &mut Durable,
        tree: &BufferTree,
    ) -> Option<TemplateTree<BufferEntry>> {
        if let BufferTree::Template(template) = tree {
            let overflow = sync::read(template).overflow_stats();
            durable.total_overflow.leaves += overflow.leaves;
            durable.total_overflow.entries += overflow.entries;
            durable.total_overflow.overflow_entries += overflow.overflow_entries;
            for (total, count) in durable
                .total_overflow
                .overflowed
                .iter_mut()
                .zip(overflow.overflowed)
            {
                *total += count;
            }
            durable.last_overflow = overflow;
        }
        let made = |template: TemplateTree<BufferEntry>| {
            self.shared.counters.templates.fetch_add(1, Ordering::Relaxed);
            Some(template)
        };
        match (self.shared.options.template, tree) {
            (TemplatePolicy::None, _) => None,
            (_, BufferTree::Growing(grown)) => made(TemplateTree::from_tree(&sync::lock(grown))),
            (TemplatePolicy::Rebuild { threshold }, BufferTree::Template(current))
                if durable.last_overflow.calls_for_rebuild(
                    threshold,
                    self.shared.options.fill,
                    self.shared.options.leaf_capacity,
                ) =>
            {
                made(TemplateTree::from_keys(
                    &sync::read(current).sorted_keys(),
                    self.shared.options.fan_out,
                    self.shared.options.leaf_capacity,
                    self.shared.options.fill,
                ))
            }
            (_, BufferTree::Template(current)) => Some(sync::read(current).empty_copy()),
        }
    }

    /// Records a clean close (see `Drop`): the frozen buffer is written
    /// and no writer is left.
    pub(crate) fn close_cleanly(&self) -> Result<()> {
        self.shared.poison.check()?;
        let mut durable = sync::lock(&self.shared.durable);
        if sync::read(&self.shared.view).frozen.is_some() {
            return Ok(());
        }
        let active = self.read_gate().clone();
        self.sync_log(&active)?;
        let mut manifest = durable.manifest.clone();
        debug_assert_eq!(
            manifest.logs.last().map(|log| log.number),
            Some(active.log_number)
        );
        manifest.closed_at = active.first_seq + sync::lock(&active.data).len() as u64;
        self.shared
            .poison
            .guard(|| manifest.write(self.shared.fs.as_ref(), &self.shared.dir))?;
        durable.manifest = manifest;
        Ok(())
    }
}
