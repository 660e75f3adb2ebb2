//! The per-node disk scheduler: write tokens (TritonSort, reused by Themis
//! as its node-wide disk scheduler).
//!
//! # Rules
//! 1. A write to disk `d` needs one of `d`'s `write_tokens_per_disk` write
//!    tokens. Capping the writes queued per disk makes writers gather data
//!    into few large writes instead of many small ones.
//! 2. With more than one disk, a disk is never read and written at once: a
//!    write token is granted only while no read token of that disk is held,
//!    and a read token only while no write token is held. Mixing reads and
//!    writes turns sequential streams into seeks (TritonSort puts input and
//!    output on one set of disks and intermediate data on another for the
//!    same reason).
//! 3. With exactly one disk, rule 2 does not apply: that disk must do both,
//!    so read tokens are granted at once and only rule 1 holds.
//! 4. Requests for one disk are served first come, first served (a ticket
//!    queue), so a stream of reads cannot starve a write or the other way
//!    round; consecutive requests of one kind are granted together.
//!
//! ```text
//!   disk d:  [held: W W]   waiting: W3 R1 R2 W4
//!   W3 is granted when a W ends (if tokens are capped at 2); R1 and R2
//!   wait until every W has ended, then go together; W4 waits for them.
//! ```

use std::collections::VecDeque;
use std::fmt;
use std::sync::{Arc, Condvar, Mutex};

use spillway_core::sync;
use spillway_core::{ensure, Result};

use crate::context::WorkerContext;
use crate::wait::{Blocked, Resource, Wait, CANCEL_POLL};

/// Hands out write and read tokens per disk; see the module rules above.
///
/// # Thread safety
/// Cheap to clone (an `Arc`); one mutex and condition variable per disk, so
/// disks do not contend with each other.
#[derive(Clone)]
pub struct DiskScheduler {
    inner: Arc<SchedulerInner>,
}

struct SchedulerInner {
    write_tokens_per_disk: usize,
    disks: Vec<DiskSlot>,
}

struct DiskSlot {
    state: Mutex<DiskState>,
    changed: Condvar,
}

#[derive(Debug, Default)]
struct DiskState {
    reads: usize,
    writes: usize,
    /// Tickets of waiting requests, oldest first.
    waiting: VecDeque<u64>,
    next_ticket: u64,
    /// Bumped on every grant and release.
    generation: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Access {
    Read,
    Write,
}

/// A worker's wait for a token of `disk`.
#[derive(Debug)]
struct TokenWait {
    disks: DiskScheduler,
    disk: usize,
    access: Access,
}

impl Resource for TokenWait {
    fn state(&self) -> u64 {
        self.disks.generation(self.disk)
    }

    fn code(&self) -> u64 {
        let kind = match self.access {
            Access::Write => 4,
            Access::Read => 5,
        };
        ((self.disk as u64) << 3) | kind
    }

    fn describe(&self) -> String {
        let disk = self.disk;
        match self.access {
            Access::Write => format!(
                "waits for a write token of disk {disk} ({} of {} write tokens held, {} reads in flight)",
                self.disks.writes_in_flight(disk),
                self.disks.write_tokens_per_disk(),
                self.disks.reads_in_flight(disk)
            ),
            Access::Read => format!(
                "waits for a read token of disk {disk} ({} writes in flight)",
                self.disks.writes_in_flight(disk)
            ),
        }
    }
}

impl fmt::Debug for DiskScheduler {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DiskScheduler")
            .field("disks", &self.inner.disks.len())
            .field("write_tokens_per_disk", &self.inner.write_tokens_per_disk)
            .finish()
    }
}

impl DiskScheduler {
    /// A scheduler for `disks` disks with `write_tokens_per_disk` write
    /// tokens each. Zero disks or zero tokens are accepted here, but every
    /// request that could never be granted then fails with `InvalidArgument`.
    pub fn new(disks: usize, write_tokens_per_disk: usize) -> Self {
        Self {
            inner: Arc::new(SchedulerInner {
                write_tokens_per_disk,
                disks: (0..disks)
                    .map(|_| DiskSlot {
                        state: Mutex::new(DiskState::default()),
                        changed: Condvar::new(),
                    })
                    .collect(),
            }),
        }
    }

    /// How many disks are scheduled.
    pub fn disks(&self) -> usize {
        self.inner.disks.len()
    }

    /// The write tokens each disk has.
    pub fn write_tokens_per_disk(&self) -> usize {
        self.inner.write_tokens_per_disk
    }

    /// Write tokens of `disk` held now (0 for a disk out of range).
    pub fn writes_in_flight(&self, disk: usize) -> usize {
        self.inner
            .disks
            .get(disk)
            .map_or(0, |slot| sync::lock(&slot.state).writes)
    }

    /// Read tokens of `disk` held now (0 for a disk out of range).
    pub fn reads_in_flight(&self, disk: usize) -> usize {
        self.inner
            .disks
            .get(disk)
            .map_or(0, |slot| sync::lock(&slot.state).reads)
    }

    pub(crate) fn generation(&self, disk: usize) -> u64 {
        self.inner
            .disks
            .get(disk)
            .map_or(0, |slot| sync::lock(&slot.state).generation)
    }

    fn check(&self, disk: usize, access: Access) -> Result<&DiskSlot> {
        let disks = self.inner.disks.len();
        ensure!(
            disk < disks,
            InvalidArgument,
            "disk {disk} is out of range: the scheduler has {disks} disk(s)"
        );
        ensure!(
            access == Access::Read || self.inner.write_tokens_per_disk > 0,
            InvalidArgument,
            "the disk scheduler has no write tokens"
        );
        Ok(&self.inner.disks[disk])
    }

    /// Whether `access` may start on a disk in `state` (ignoring the queue).
    fn compatible(&self, state: &DiskState, access: Access) -> bool {
        let shared = self.inner.disks.len() > 1;
        match access {
            Access::Write => state.writes < self.inner.write_tokens_per_disk && (!shared || state.reads == 0),
            Access::Read => !shared || state.writes == 0,
        }
    }

    fn grant(state: &mut DiskState, access: Access) {
        match access {
            Access::Read => state.reads += 1,
            Access::Write => state.writes += 1,
        }
        state.generation += 1;
    }

    /// A write token for `disk` now, or `None`; for threads outside a phase.
    pub fn try_write_token(&self, disk: usize) -> Result<Option<WriteToken>> {
        let slot = self.check(disk, Access::Write)?;
        let mut state = sync::lock(&slot.state);
        if state.waiting.is_empty() && self.compatible(&state, Access::Write) {
            Self::grant(&mut state, Access::Write);
            return Ok(Some(WriteToken {
                scheduler: self.clone(),
                disk,
            }));
        }
        Ok(None)
    }

    /// A read token for `disk` now, or `None`; for threads outside a phase.
    pub fn try_read_token(&self, disk: usize) -> Result<Option<ReadToken>> {
        let slot = self.check(disk, Access::Read)?;
        let mut state = sync::lock(&slot.state);
        let single = self.inner.disks.len() == 1;
        if (single || state.waiting.is_empty()) && self.compatible(&state, Access::Read) {
            Self::grant(&mut state, Access::Read);
            return Ok(Some(ReadToken {
                scheduler: self.clone(),
                disk,
            }));
        }
        Ok(None)
    }

    pub(crate) fn write_token_waiting(&self, disk: usize, cx: &mut WorkerContext) -> Result<WriteToken> {
        self.acquire(disk, Access::Write, cx)?;
        Ok(WriteToken {
            scheduler: self.clone(),
            disk,
        })
    }

    pub(crate) fn read_token_waiting(&self, disk: usize, cx: &mut WorkerContext) -> Result<ReadToken> {
        self.acquire(disk, Access::Read, cx)?;
        Ok(ReadToken {
            scheduler: self.clone(),
            disk,
        })
    }

    /// Waits for `access` to `disk` following the rules; on success the
    /// token is counted as held.
    fn acquire(&self, disk: usize, access: Access, cx: &mut WorkerContext) -> Result<()> {
        let slot = self.check(disk, access)?;
        // On a single disk reads never wait, so they need no place in line.
        let in_line = !(access == Access::Read && self.inner.disks.len() == 1);
        let mut state = sync::lock(&slot.state);
        if (!in_line || state.waiting.is_empty()) && self.compatible(&state, access) {
            Self::grant(&mut state, access);
            return Ok(());
        }
        let ticket = state.next_ticket;
        state.next_ticket += 1;
        state.waiting.push_back(ticket);
        drop(state);

        let started = cx.begin_wait(Wait::Resource {
            blocked: match access {
                Access::Read => Blocked::Input,
                Access::Write => Blocked::Output,
            },
            resource: Arc::new(TokenWait {
                disks: self.clone(),
                disk,
                access,
            }),
        });
        let mut state = sync::lock(&slot.state);
        let granted = loop {
            if state.waiting.front() == Some(&ticket) && self.compatible(&state, access) {
                state.waiting.pop_front();
                Self::grant(&mut state, access);
                break true;
            }
            if cx.cancelled() {
                state.waiting.retain(|waiting| *waiting != ticket);
                break false;
            }
            state = sync::wait_timeout(&slot.changed, state, CANCEL_POLL).0;
        };
        drop(state);
        // The next in line may now be grantable (a read after a read), or
        // may now be first (after a cancelled ticket left the line).
        slot.changed.notify_all();
        cx.end_wait(started);
        if granted {
            Ok(())
        } else {
            Err(cx.phase.cancellation_error())
        }
    }

    fn release(&self, disk: usize, access: Access) {
        let slot = &self.inner.disks[disk];
        let mut state = sync::lock(&slot.state);
        match access {
            Access::Read => state.reads -= 1,
            Access::Write => state.writes -= 1,
        }
        state.generation += 1;
        drop(state);
        slot.changed.notify_all();
    }
}

/// Permission to write to one disk; the token goes back when this drops.
/// Hold it for the duration of the write system calls, not longer.
pub struct WriteToken {
    scheduler: DiskScheduler,
    disk: usize,
}

/// Permission to read from one disk; the token goes back when this drops.
pub struct ReadToken {
    scheduler: DiskScheduler,
    disk: usize,
}

impl WriteToken {
    /// The disk this token is for.
    pub fn disk(&self) -> usize {
        self.disk
    }
}

impl ReadToken {
    /// The disk this token is for.
    pub fn disk(&self) -> usize {
        self.disk
    }
}

impl fmt::Debug for WriteToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WriteToken").field("disk", &self.disk).finish()
    }
}

impl fmt::Debug for ReadToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReadToken").field("disk", &self.disk).finish()
    }
}

impl Drop for WriteToken {
    fn drop(&mut self) {
        self.scheduler.release(self.disk, Access::Write);
    }
}

impl Drop for ReadToken {
    fn drop(&mut self) {
        self.scheduler.release(self.disk, Access::Read);
    }
}
