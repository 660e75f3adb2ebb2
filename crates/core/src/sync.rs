//! Locks that stay usable after a panic elsewhere.
//!
//! A `Mutex` or `RwLock` whose holder panicked is "poisoned": `lock()`
//! returns an error from then on. Spillway's shared state is kept
//! consistent at every point a panic could happen (a counter added to, a
//! slot replaced whole, a map entry inserted), and a panic in one worker
//! already fails the work through its own path, so the engines take the
//! guard anyway instead of turning one panic into a second one in every
//! thread that touches the lock. Each helper is the standard call with the
//! poison ignored.
//!
//! ```
//! use std::sync::Mutex;
//! let count = Mutex::new(0);
//! *spillway_core::sync::lock(&count) += 1;
//! assert_eq!(*spillway_core::sync::lock(&count), 1);
//! ```

use std::sync::{
    Condvar, Mutex, MutexGuard, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard, WaitTimeoutResult,
};
use std::time::Duration;

/// `mutex.lock()`, taking the guard even if a holder panicked.
#[inline]
pub fn lock<T: ?Sized>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// `lock.read()`, taking the guard even if a writer panicked.
#[inline]
pub fn read<T: ?Sized>(lock: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    lock.read().unwrap_or_else(PoisonError::into_inner)
}

/// `lock.write()`, taking the guard even if a writer panicked.
#[inline]
pub fn write<T: ?Sized>(lock: &RwLock<T>) -> RwLockWriteGuard<'_, T> {
    lock.write().unwrap_or_else(PoisonError::into_inner)
}

/// `condvar.wait(guard)`, taking the guard back even if a holder panicked.
#[inline]
pub fn wait<'a, T>(condvar: &Condvar, guard: MutexGuard<'a, T>) -> MutexGuard<'a, T> {
    condvar.wait(guard).unwrap_or_else(PoisonError::into_inner)
}

/// `condvar.wait_timeout(guard, timeout)`, taking the guard back even if a
/// holder panicked.
#[inline]
pub fn wait_timeout<'a, T>(
    condvar: &Condvar,
    guard: MutexGuard<'a, T>,
    timeout: Duration,
) -> (MutexGuard<'a, T>, WaitTimeoutResult) {
    condvar
        .wait_timeout(guard, timeout)
        .unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::panic;

    #[test]
    fn a_panic_while_holding_the_lock_does_not_lock_others_out() {
        let mutex = Mutex::new(1);
        let rwlock = RwLock::new(2);
        let _ = panic::catch_unwind(|| {
            let _mutex = mutex.lock().unwrap();
            let _rwlock = rwlock.write().unwrap();
            panic!("a worker's bug");
        });
        assert!(mutex.is_poisoned() && rwlock.is_poisoned());
        *lock(&mutex) += 1;
        *write(&rwlock) += 1;
        assert_eq!(*lock(&mutex), 2);
        assert_eq!(*read(&rwlock), 3);
        let condvar = Condvar::new();
        let (guard, timeout) = wait_timeout(&condvar, lock(&mutex), Duration::from_millis(1));
        assert!(timeout.timed_out());
        assert_eq!(*guard, 2);
    }
}
