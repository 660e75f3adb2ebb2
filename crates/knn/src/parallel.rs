//! Work items shared out to a fixed number of threads.

use std::sync::Mutex;

use spillway_core::{Interrupt, Result};

/// Runs `work` on every item of `items` on `threads` threads (the calling
/// one among them), each with its own state made by `init`; returns the
/// states. Items are taken one at a time from a shared queue, so uneven
/// items balance out. The interrupt is checked before each item; the first
/// error stops every thread.
pub fn for_each<I: Send, S: Send>(
    items: impl Iterator<Item = I> + Send,
    threads: usize,
    interrupt: &Interrupt,
    init: impl Fn() -> S + Sync,
    work: impl Fn(&mut S, I) -> Result<()> + Sync,
) -> Result<Vec<S>> {
    let queue = Mutex::new(items);
    let failed = std::sync::atomic::AtomicBool::new(false);
    let run = || -> Result<S> {
        let mut state = init();
        loop {
            if failed.load(std::sync::atomic::Ordering::Relaxed) {
                return Ok(state);
            }
            let next = spillway_core::sync::lock(&queue).next();
            let Some(item) = next else { return Ok(state) };
            let outcome = interrupt.check().and_then(|()| work(&mut state, item));
            if let Err(error) = outcome {
                failed.store(true, std::sync::atomic::Ordering::Relaxed);
                return Err(error);
            }
        }
    };
    std::thread::scope(|scope| {
        let helpers: Vec<_> = (1..threads.max(1)).map(|_| scope.spawn(run)).collect();
        let mine = run();
        let mut states = Vec::with_capacity(helpers.len() + 1);
        for outcome in helpers
            .into_iter()
            .map(|h| h.join().expect("a kNN worker thread panicked"))
            .chain([mine])
        {
            states.push(outcome?);
        }
        Ok(states)
    })
}
