//! How many worker threads a parallel job runs.

/// The number of worker threads for a request: `requested` itself, or every
/// core the process may use when it is 0 (the convention of every `threads`
/// option and `-t`/`--threads` flag in Spillway).
pub fn worker_threads(requested: usize) -> usize {
    if requested > 0 {
        requested
    } else {
        std::thread::available_parallelism().map_or(1, usize::from)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_means_every_available_core() {
        assert_eq!(worker_threads(3), 3);
        let all = worker_threads(0);
        assert!(all >= 1);
        assert_eq!(all, std::thread::available_parallelism().map_or(1, usize::from));
    }
}
