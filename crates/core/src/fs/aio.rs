//! Overlapped direct writes through Linux AIO (`io_submit`), for
//! [`FsFile::write_at_overlapped`](super::FsFile::write_at_overlapped).
//!
//! A direct write leaves the caller with nothing to do for the device's
//! round trip (tens of microseconds), and a thread that sleeps through it
//! is often the one a busy core makes wait once the write completes. A
//! write started with `io_submit` returns at once: the caller does its own
//! work (a log writer puts the batch into its in-memory buffer) and then
//! waits for the write with `io_getevents`, usually without sleeping at
//! all, instead of handing that work to another thread.
//!
//! A context holds one write in flight. Where the kernel refuses a context
//! or a submission (no AIO, its system-wide limit reached), the write is
//! done synchronously instead: the outcome is the same, only not
//! overlapped.

use std::io;
use std::os::fd::RawFd;

use super::syscall::retry_interrupted;

/// `struct iocb` of `<linux/aio_abi.h>` (little-endian field order).
#[repr(C)]
#[derive(Default)]
struct Iocb {
    data: u64,
    key: u32,
    rw_flags: i32,
    opcode: u16,
    reqprio: i16,
    fildes: u32,
    buf: u64,
    nbytes: u64,
    offset: i64,
    reserved2: u64,
    flags: u32,
    resfd: u32,
}

/// `struct io_event` of `<linux/aio_abi.h>`.
#[repr(C)]
#[derive(Default)]
struct IoEvent {
    data: u64,
    obj: u64,
    res: i64,
    res2: i64,
}

const IOCB_CMD_PWRITE: u16 = 1;

/// An AIO context for one write at a time.
#[derive(Debug)]
pub(super) struct Context {
    id: libc::c_ulong,
}

impl Context {
    /// A context, or `None` where the kernel refuses one.
    #[allow(unsafe_code)]
    pub(super) fn new() -> Option<Context> {
        let mut id: libc::c_ulong = 0;
        // SAFETY: io_setup writes the new context's id into `id`, which
        // outlives the call.
        let done = unsafe {
            libc::syscall(
                libc::SYS_io_setup,
                1 as libc::c_long,
                &mut id as *mut libc::c_ulong,
            )
        };
        (done == 0).then_some(Context { id })
    }

    /// Starts writing `buf` at `offset` of `fd`, runs `meanwhile` while
    /// the device works, and waits for the write; returns how many bytes
    /// were written (possibly fewer than asked, as `pwrite` may). `None`
    /// where the kernel refused the submission: nothing was written and
    /// `meanwhile` did not run. The caller holds the context alone.
    #[allow(unsafe_code)]
    pub(super) fn write(
        &mut self,
        fd: RawFd,
        buf: &[u8],
        offset: u64,
        meanwhile: &mut dyn FnMut(),
    ) -> Option<io::Result<usize>> {
        let mut iocb = Iocb {
            opcode: IOCB_CMD_PWRITE,
            fildes: u32::try_from(fd).ok()?,
            buf: buf.as_ptr() as u64,
            nbytes: buf.len() as u64,
            offset: i64::try_from(offset).ok()?,
            ..Iocb::default()
        };
        let mut iocbs = [&mut iocb as *mut Iocb];
        // SAFETY: the iocb and the array pointing to it live for the call
        // (the kernel copies the iocb); `buf` stays borrowed until the
        // write completes, which `InFlight` waits for even when `meanwhile`
        // panics.
        retry_interrupted(|| unsafe {
            libc::syscall(
                libc::SYS_io_submit,
                self.id,
                1 as libc::c_long,
                iocbs.as_mut_ptr(),
            )
        })
        .ok()?;
        let mut in_flight = InFlight {
            context: self,
            done: false,
        };
        meanwhile();
        Some(in_flight.wait().and_then(|res| {
            usize::try_from(res)
                .map_err(|_| io::Error::from_raw_os_error(i32::try_from(-res).unwrap_or(libc::EIO)))
        }))
    }
}

impl Drop for Context {
    #[allow(unsafe_code)]
    fn drop(&mut self) {
        // SAFETY: the context is ours and no write is in flight in it.
        unsafe { libc::syscall(libc::SYS_io_destroy, self.id) };
    }
}

/// A submitted write, waited for when dropped if nobody did: the buffer
/// must outlive the write.
struct InFlight<'a> {
    context: &'a Context,
    done: bool,
}

impl InFlight<'_> {
    /// Waits for the write; returns its result (bytes written, or a
    /// negated errno).
    #[allow(unsafe_code)]
    fn wait(&mut self) -> io::Result<i64> {
        let mut event = IoEvent::default();
        // SAFETY: io_getevents writes at most one event into `event`.
        retry_interrupted(|| unsafe {
            libc::syscall(
                libc::SYS_io_getevents,
                self.context.id,
                1 as libc::c_long,
                1 as libc::c_long,
                &mut event as *mut IoEvent,
                std::ptr::null_mut::<libc::timespec>(),
            )
        })?;
        self.done = true;
        Ok(event.res)
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        if !self.done {
            let _ = self.wait();
        }
    }
}
