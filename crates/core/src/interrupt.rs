//! Stopping long work when its user asks: Ctrl-C (SIGINT) or SIGTERM in
//! the `spillway` command, `KeyboardInterrupt` in Python.
//!
//! Long work holds an [`Interrupt`] and calls [`Interrupt::check`] between
//! units of work (a buffer, a block, a batch of records: every few tens of
//! milliseconds at most), which fails with [`Error::Interrupted`] once an
//! interrupt was raised. The work then unwinds through its ordinary error
//! path, which removes its temporary files and partial outputs, so an
//! interrupted call leaves nothing that looks complete.
//!
//! Signals: [`install_signal_handlers`] makes the first SIGINT or SIGTERM
//! only record itself (an atomic store, all a handler may do); every
//! [`Interrupt::on_signals`] token then reads as raised. A second signal
//! ends the process at once with the default action, for work that does
//! not come to a check soon enough; what it leaves behind names its owner
//! ([`crate::scratch`]) and the next run removes it.

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::Arc;

use crate::{Error, Result};

/// The first signal received since [`install_signal_handlers`], or 0.
static SIGNAL_RECEIVED: AtomicI32 = AtomicI32::new(0);

/// A request to stop, shared by the caller and the work (clones share it).
///
/// # Thread safety
/// Raised from any thread; checked from any number of threads with one
/// relaxed atomic load (two for a token that watches signals).
#[derive(Clone, Default)]
pub struct Interrupt {
    raised: Arc<AtomicBool>,
    watches_signals: bool,
}

impl fmt::Debug for Interrupt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Interrupt")
            .field("raised", &self.is_raised())
            .field("watches_signals", &self.watches_signals)
            .finish()
    }
}

/// Options that differ only in their interrupt describe the same work, so
/// every token equals every other (engines' option structs derive
/// `PartialEq` with a token among their fields).
impl PartialEq for Interrupt {
    fn eq(&self, _: &Interrupt) -> bool {
        true
    }
}

impl Eq for Interrupt {}

impl Interrupt {
    /// A token raised only by [`raise`](Self::raise) (the default: work
    /// that nobody interrupts).
    pub fn new() -> Interrupt {
        Interrupt::default()
    }

    /// A token that also reads as raised once SIGINT or SIGTERM arrived
    /// (after [`install_signal_handlers`]).
    pub fn on_signals() -> Interrupt {
        Interrupt {
            watches_signals: true,
            ..Interrupt::default()
        }
    }

    /// Asks the work holding this token (and every clone) to stop.
    pub fn raise(&self) {
        self.raised.store(true, Ordering::Relaxed);
    }

    /// Whether the work should stop.
    pub fn is_raised(&self) -> bool {
        self.raised.load(Ordering::Relaxed)
            || (self.watches_signals && SIGNAL_RECEIVED.load(Ordering::Relaxed) != 0)
    }

    /// Fails with [`Error::Interrupted`] once the work should stop.
    pub fn check(&self) -> Result<()> {
        if self.is_raised() {
            return Err(Error::Interrupted(match received_signal() {
                Some(signal) if self.watches_signals => format!("stopped by {}", signal_name(signal)),
                _ => "stopped on request".to_string(),
            }));
        }
        Ok(())
    }
}

/// The signal that interrupted this process (SIGINT or SIGTERM), if one
/// arrived since [`install_signal_handlers`].
pub fn received_signal() -> Option<i32> {
    match SIGNAL_RECEIVED.load(Ordering::Relaxed) {
        0 => None,
        signal => Some(signal),
    }
}

/// The exit status of a command stopped by `signal`: 128 + its number
/// (130 for SIGINT, 143 for SIGTERM), as shells report it.
pub fn exit_status(signal: i32) -> u8 {
    (128 + signal).clamp(0, 255) as u8
}

fn signal_name(signal: i32) -> &'static str {
    match signal {
        libc::SIGINT => "SIGINT (Ctrl-C)",
        libc::SIGTERM => "SIGTERM",
        _ => "a signal",
    }
}

/// Records the first SIGINT or SIGTERM for [`Interrupt::on_signals`]
/// tokens instead of ending the process; a second one ends it with the
/// default action. For a process's main program (the `spillway` command),
/// not for a library loaded into someone else's process.
pub fn install_signal_handlers() -> Result<()> {
    for signal in [libc::SIGINT, libc::SIGTERM] {
        install(signal)?;
    }
    Ok(())
}

#[allow(unsafe_code)]
fn install(signal: i32) -> Result<()> {
    // SAFETY: `action` is a zeroed `sigaction` (a valid value: no flags,
    // an empty mask) given a handler that only touches atomics and calls
    // async-signal-safe functions; `sigaction` reads it and writes no
    // old action (null).
    let installed = unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as usize;
        action.sa_flags = libc::SA_RESTART;
        libc::sigemptyset(&mut action.sa_mask);
        libc::sigaction(signal, &action, std::ptr::null_mut())
    };
    if installed != 0 {
        return Err(Error::io(
            format!("installing the handler of {}", signal_name(signal)),
            std::io::Error::last_os_error(),
        ));
    }
    Ok(())
}

#[allow(unsafe_code)]
extern "C" fn on_signal(signal: libc::c_int) {
    if SIGNAL_RECEIVED
        .compare_exchange(0, signal, Ordering::Relaxed, Ordering::Relaxed)
        .is_err()
    {
        // The second signal: end now, as if no handler were installed.
        // SAFETY: `signal` and `raise` are async-signal-safe; SIG_DFL is
        // a valid disposition.
        unsafe {
            libc::signal(signal, libc::SIG_DFL);
            libc::raise(signal);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorKind;

    #[test]
    fn a_raised_token_fails_its_checks_and_its_clones_see_it() {
        let interrupt = Interrupt::new();
        let clone = interrupt.clone();
        assert!(interrupt.check().is_ok());
        clone.raise();
        let error = interrupt.check().unwrap_err();
        assert_eq!(error.kind(), ErrorKind::Interrupted);
        assert!(error.to_string().contains("interrupted"), "{error}");
        assert!(!Interrupt::new().is_raised(), "a new token is its own");
    }

    #[test]
    fn exit_statuses_follow_the_shell() {
        assert_eq!(exit_status(libc::SIGINT), 130);
        assert_eq!(exit_status(libc::SIGTERM), 143);
    }
}
