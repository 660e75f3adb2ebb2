//! An engine object that a Python handle owns until it is closed: calls
//! hold it shared (the engines are thread-safe, so calls from several
//! Python threads run at once), `close` takes it exclusively, waiting for
//! them; once closed, every call fails saying so.

use std::sync::{PoisonError, RwLock};

use spillway_core::{Error, Result};

#[derive(Debug)]
pub struct Closable<T> {
    inner: RwLock<Option<T>>,
    /// What it is and where ("the stream index in /data/s"), for the error.
    what: String,
}

impl<T> Closable<T> {
    pub fn new(value: T, what: String) -> Closable<T> {
        Closable {
            inner: RwLock::new(Some(value)),
            what,
        }
    }

    /// Runs `call` on the open object, else fails saying it is closed.
    pub fn with<R>(&self, call: impl FnOnce(&T) -> Result<R>) -> Result<R> {
        match self.inner.read().unwrap_or_else(PoisonError::into_inner).as_ref() {
            Some(value) => call(value),
            None => Err(Error::InvalidArgument(format!(
                "{} is closed; open it again to use it",
                self.what
            ))),
        }
    }

    /// The object, taken out to be closed; `None` when it already was.
    pub fn take(&self) -> Option<T> {
        self.inner.write().unwrap_or_else(PoisonError::into_inner).take()
    }

    pub fn is_closed(&self) -> bool {
        self.inner
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .is_none()
    }
}
