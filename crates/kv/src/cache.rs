//! Open handles of list files, bounded: a large tree has more list files
//! than a process may keep open, so handles are opened on demand and the
//! least recently used is closed when the bound is reached.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use spillway_core::sync;
use spillway_core::{Fs, FsFile, Result};

/// A bounded cache of open list files.
///
/// # Thread safety
/// Shared by readers and the background worker; a lookup takes a short
/// lock, and a file is opened outside it.
#[derive(Debug)]
pub struct FileCache {
    fs: Arc<dyn Fs>,
    capacity: usize,
    inner: Mutex<Inner>,
    opens: AtomicU64,
}

#[derive(Debug, Default)]
struct Inner {
    /// By file number: the handle and when it was last used.
    handles: HashMap<u64, (Arc<dyn FsFile>, u64)>,
    tick: u64,
}

impl FileCache {
    /// A cache of at most `capacity` handles on `fs`.
    pub fn new(fs: Arc<dyn Fs>, capacity: usize) -> Self {
        assert!(capacity > 0, "a file cache holds at least one handle");
        FileCache {
            fs,
            capacity,
            inner: Mutex::new(Inner::default()),
            opens: AtomicU64::new(0),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // Nothing here is left half-updated by a panic.
        sync::lock(&self.inner)
    }

    /// An open handle of the list file numbered `number`, at `path`.
    pub fn handle(&self, number: u64, path: &Path) -> Result<Arc<dyn FsFile>> {
        {
            let mut inner = self.lock();
            inner.tick += 1;
            let tick = inner.tick;
            if let Some((handle, used)) = inner.handles.get_mut(&number) {
                *used = tick;
                return Ok(handle.clone());
            }
        }
        let handle: Arc<dyn FsFile> = Arc::from(self.fs.open_read(path)?);
        // GETs read one block anywhere; cursors read chunks of one list's
        // range and ask for the next themselves. The kernel's read-ahead
        // would read past a range that a fast split cut (by megabytes on a
        // disk with a large `read_ahead_kb`): a third of the device reads
        // of a 16-byte store's GETs, measured, went to it.
        handle.read_randomly()?;
        self.opens.fetch_add(1, Ordering::Relaxed);
        let mut inner = self.lock();
        if inner.handles.len() >= self.capacity {
            let oldest = inner
                .handles
                .iter()
                .min_by_key(|(_, (_, used))| *used)
                .map(|(&number, _)| number);
            if let Some(oldest) = oldest {
                inner.handles.remove(&oldest);
            }
        }
        let tick = inner.tick;
        inner.handles.insert(number, (handle.clone(), tick));
        Ok(handle)
    }

    /// Closes the handle of file `number` (before the file is removed).
    pub fn forget(&self, number: u64) {
        self.lock().handles.remove(&number);
    }

    /// Files opened since the cache was made.
    pub fn opens(&self) -> u64 {
        self.opens.load(Ordering::Relaxed)
    }
}
