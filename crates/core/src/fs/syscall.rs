//! Calling `libc` directly, for what `std` does not offer (fallocate,
//! sync_file_range, Linux AIO): a signal may interrupt such a call before
//! it did anything, and the caller must then make it again.

use std::io;

/// Calls `call`, a system call returning -1 with errno on failure, until it
/// is not interrupted (EINTR); returns what it returned otherwise.
pub(super) fn retry_interrupted<T: Copy + PartialOrd + Default>(
    mut call: impl FnMut() -> T,
) -> io::Result<T> {
    loop {
        let result = call();
        if result >= T::default() {
            return Ok(result);
        }
        let error = io::Error::last_os_error();
        if error.kind() != io::ErrorKind::Interrupted {
            return Err(error);
        }
    }
}
