//! The flusher thread: writes each frozen buffer as a segment; between
//! flushes it makes the next log ready (a store with `sync`) or syncs the
//! active log in the background (one without).

use std::sync::atomic::Ordering;
use std::sync::{Arc, MutexGuard};

use spillway_core::sync;
use spillway_core::Result;

use crate::buffer::Buffer;
use crate::manifest::Listed;
use crate::shared::{Durable, Shared};
use crate::wal::{self, Wal};

/// How often the flusher of a store without `sync` makes its active log
/// durable, and how much the log must have grown since (see
/// `Shared::sync_active_log`).
const LOG_SYNC_INTERVAL: std::time::Duration = std::time::Duration::from_millis(50);
const LOG_SYNC_BYTES_MIN: u64 = 1 << 20;

impl Shared {
    /// The flusher thread: writes each frozen buffer as a segment, until
    /// the store closes. A failure poisons the store; the buffer then
    /// stays frozen, and in its log for the next open.
    pub(crate) fn run_flusher(&self) {
        let mut durable = sync::lock(&self.durable);
        loop {
            let frozen = sync::read(&self.view).frozen.clone();
            match frozen {
                Some(old) if self.poison.check().is_ok() => {
                    // Reported to writers through the poison.
                    let _ = self.write_frozen(&mut durable, &old);
                    self.frozen_changed.notify_all();
                }
                _ if durable.stop => return,
                _ if self.wants_spare() => durable = self.make_spare(durable),
                _ if self.options.sync => durable = sync::wait(&self.frozen_changed, durable),
                _ => {
                    durable = sync::wait_timeout(&self.frozen_changed, durable, LOG_SYNC_INTERVAL).0;
                    durable = self.sync_active_log(durable);
                }
            }
        }
    }

    /// Without `sync`, makes the active log durable in the background
    /// every [`LOG_SYNC_INTERVAL`] once it has grown by
    /// [`LOG_SYNC_BYTES_MIN`]: a log must be durable whole before the
    /// next one is listed (see `freeze`), and syncing it here leaves that
    /// sync little to do while writers wait. Writers append meanwhile (a
    /// sync holds none of their locks).
    pub(crate) fn sync_active_log<'a>(&'a self, durable: MutexGuard<'a, Durable>) -> MutexGuard<'a, Durable> {
        let active = sync::read(&self.view).active.clone();
        let Some(wal_sync) = &active.wal_sync else {
            return durable;
        };
        let written = sync::lock(&active.data).wal.as_ref().map_or(0, Wal::written);
        let synced = active.synced_in_background.load(Ordering::Relaxed);
        if written < synced + LOG_SYNC_BYTES_MIN || self.poison.check().is_err() {
            return durable;
        }
        drop(durable);
        // Reported to writers through the poison.
        if self.poison.guard(|| wal_sync.sync_to(written)).is_ok() {
            active.synced_in_background.store(written, Ordering::Relaxed);
        }
        sync::lock(&self.durable)
    }

    /// Whether the flusher should make the next log ready now.
    pub(crate) fn wants_spare(&self) -> bool {
        self.options.sync
            && !self.spare_failed.load(Ordering::Relaxed)
            && self.poison.check().is_ok()
            && sync::lock(&self.spare).is_none()
    }

    /// Makes the next log's file ready (see [`wal::Spare`]): its number is
    /// taken under the flush lock, its zeros written without it (a freeze
    /// meanwhile makes its own log). Sized for the log of a full buffer,
    /// about half the buffer's bytes.
    pub(crate) fn make_spare<'a>(&'a self, mut durable: MutexGuard<'a, Durable>) -> MutexGuard<'a, Durable> {
        let number = durable.manifest.next_log_number;
        // Counted now, durable with the next manifest (an open counts past
        // every log file it finds, so a crash before then reuses nothing).
        durable.manifest.next_log_number += 1;
        drop(durable);
        {
            let mut spare = sync::lock(&self.spare);
            let len = (self.options.buffer_bytes as u64 / 2)
                .next_multiple_of(4096)
                .max(64 << 10);
            match wal::Spare::prepare(self.fs.as_ref(), &self.dir, number, len) {
                Ok(made) => *spare = Some(made),
                Err(_) => {
                    self.spare_failed.store(true, Ordering::Relaxed);
                    let _ = self.fs.remove_file(&self.dir.join(wal::file_name(number)));
                }
            }
        }
        let durable = sync::lock(&self.durable);
        // For `settle`, which waits for the spare under this lock.
        self.frozen_changed.notify_all();
        durable
    }

    /// Writes the frozen buffer `old` as a segment, lists it in the
    /// manifest, puts it in the view in the buffer's place and removes
    /// the buffer's log.
    pub(crate) fn write_frozen(&self, durable: &mut Durable, old: &Buffer) -> Result<()> {
        let (records, shadows) = old.drain();
        let seqs = (
            old.first_seq,
            old.first_seq + sync::lock(&old.data).len() as u64 - 1,
        );
        let written = self.poison.guard(|| {
            let id = durable.manifest.next_segment_id;
            let segment = self.write_segment(id, durable.manifest.store_id, seqs, &records, &shadows)?;
            let mut manifest = durable.manifest.clone();
            manifest.next_segment_id = id + 1;
            manifest.next_seq = seqs.1 + 1;
            manifest.segments.push(Listed::of(&segment.meta));
            // The frozen buffer's log is the oldest live one; its writes
            // are in the segment now.
            let oldest = manifest.logs.remove(0);
            debug_assert_eq!(oldest.number, old.log_number);
            manifest.write(self.fs.as_ref(), &self.dir)?;
            durable.manifest = manifest;
            Ok(segment)
        })?;
        written.adopt(Arc::new(records));
        {
            let mut view = sync::write(&self.view);
            view.frozen = None;
            view.segments.push(written);
        }
        if let Some(tiering) = self.tiering.get() {
            tiering.wake();
        }
        self.poison.guard(|| {
            self.fs
                .remove_file(&self.dir.join(wal::file_name(old.log_number)))
        })?;
        self.counters.flushes.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
}
