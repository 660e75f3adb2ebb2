//! How many worker threads a parallel job runs, and how background
//! threads yield to latency-bound ones.

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

/// The most worker threads any `threads` option accepts: far more than a
/// machine has cores (each is a real thread with its own stack and
/// buffers), few enough that a typo (`-t 100000`) is refused at once
/// instead of starting thousands of threads.
pub const THREADS_MAX: usize = 1024;

/// Refuses a `threads` request over [`THREADS_MAX`], naming the option
/// (`what`, e.g. "--threads") and the machine's cores.
pub fn check_threads(requested: usize, what: &str) -> crate::Result<()> {
    crate::ensure!(
        requested <= THREADS_MAX,
        InvalidArgument,
        "{what} {requested} is more than the {THREADS_MAX} threads allowed (0 uses every core; this machine has {})",
        worker_threads(0)
    );
    Ok(())
}

/// The longest time slice Linux lets a normal thread ask for.
pub const BACKGROUND_SLICE_NS: u64 = 100_000_000;

/// Asks the scheduler to treat the calling thread as background work: a
/// long time slice (Linux 6.12 and later), so that a thread with the
/// default slice that wakes up (a writer whose log sync completed)
/// preempts it at once instead of waiting up to a slice for a core, while
/// the CPU shares stay those of equal threads (unlike `nice`, which starves
/// the background of the cores it needs to keep up). Returns whether the
/// kernel took it; older kernels refuse, and nothing changes.
pub fn prefer_throughput() -> bool {
    #[cfg(target_os = "linux")]
    {
        let attr = libc::sched_attr {
            size: size_of::<libc::sched_attr>() as u32,
            sched_policy: libc::SCHED_OTHER as u32,
            sched_flags: 0,
            sched_nice: 0,
            sched_priority: 0,
            sched_runtime: BACKGROUND_SLICE_NS,
            sched_deadline: 0,
            sched_period: 0,
        };
        // SAFETY: sched_setattr reads `size` bytes of the attribute, which
        // lives for the call; pid 0 is the calling thread.
        #[allow(unsafe_code)]
        let result =
            unsafe { libc::syscall(libc::SYS_sched_setattr, 0, &attr as *const libc::sched_attr, 0) };
        result == 0
    }
    #[cfg(not(target_os = "linux"))]
    {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thread_counts_past_the_limit_are_refused_by_name() {
        assert!(check_threads(0, "--threads").is_ok());
        assert!(check_threads(THREADS_MAX, "--threads").is_ok());
        let error = check_threads(100_000, "--threads").unwrap_err();
        assert_eq!(error.kind(), crate::ErrorKind::InvalidArgument);
        assert!(error.to_string().contains("--threads 100000"), "{error}");
    }

    #[test]
    fn zero_means_every_available_core() {
        assert_eq!(worker_threads(3), 3);
        let all = worker_threads(0);
        assert!(all >= 1);
        assert_eq!(all, std::thread::available_parallelism().map_or(1, usize::from));
    }

    /// The calling thread's time slice, where the kernel shows it.
    fn own_slice_ns() -> Option<u64> {
        let sched = std::fs::read_to_string("/proc/thread-self/sched").ok()?;
        let line = sched.lines().find(|line| line.starts_with("se.slice"))?;
        line.split(':').nth(1)?.trim().parse().ok()
    }

    #[test]
    fn a_background_thread_gets_a_long_slice_and_no_other_does() {
        let (taken, slice) = std::thread::spawn(|| (prefer_throughput(), own_slice_ns()))
            .join()
            .unwrap();
        if taken {
            if let Some(slice) = slice {
                assert_eq!(slice, BACKGROUND_SLICE_NS);
            }
        }
        let other = std::thread::spawn(own_slice_ns).join().unwrap();
        assert!(other.is_none_or(|slice| slice < BACKGROUND_SLICE_NS), "{other:?}");
    }
}
