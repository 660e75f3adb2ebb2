//! Long native calls that Ctrl-C stops.
//!
//! Python runs its SIGINT handler (which raises `KeyboardInterrupt`) only
//! between bytecodes of the main thread, never while a native call holds
//! it. So a long call runs its work on a thread of its own and the calling
//! thread waits for it with the GIL released, waking every
//! [`POLL_INTERVAL`] to let Python run its signal handlers. When one raises,
//! the work's [`Interrupt`] is raised, the call waits for the work to
//! unwind (it removes its temporary files and partial outputs on the way
//! out) and then raises the handler's exception.

use std::time::Duration;

use crossbeam_channel::RecvTimeoutError;

use pyo3::prelude::*;
use spillway_core::Interrupt;

/// How often a waiting call lets Python look for signals.
const POLL_INTERVAL: Duration = Duration::from_millis(50);

/// Runs `work` on a thread of its own with the GIL released, raising
/// Python's `KeyboardInterrupt` (or whatever a signal handler raises)
/// once `work` has stopped after an interrupt.
pub fn interruptible<T: Send>(py: Python<'_>, work: impl FnOnce(&Interrupt) -> T + Send) -> PyResult<T> {
    let interrupt = Interrupt::new();
    let interrupt = &interrupt;
    std::thread::scope(|scope| {
        let (done, finished) = crossbeam_channel::bounded::<()>(1);
        let worker = std::thread::Builder::new()
            .name("spillway-call".into())
            .spawn_scoped(scope, move || {
                let outcome = work(interrupt);
                let _ = done.send(());
                outcome
            })
            .map_err(|error| {
                pyo3::exceptions::PyOSError::new_err(format!("starting a thread for the call: {error}"))
            })?;
        loop {
            // A panicking worker drops its sender: that ends the wait too.
            let waiting = py.detach(|| {
                matches!(
                    finished.recv_timeout(POLL_INTERVAL),
                    Err(RecvTimeoutError::Timeout)
                )
            });
            if !waiting {
                break;
            }
            if let Err(raised) = py.check_signals() {
                interrupt.raise();
                // The work's outcome (Interrupted, or done after all) is
                // dropped: the caller asked to stop.
                let _ = py.detach(|| worker.join());
                return Err(raised);
            }
        }
        match worker.join() {
            Ok(outcome) => Ok(outcome),
            Err(panic) => std::panic::resume_unwind(panic),
        }
    })
}
