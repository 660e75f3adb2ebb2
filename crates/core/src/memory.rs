//! Large data buffers, and reading scattered memory.

/// Hints the kernel to back `buffer`'s allocation with transparent huge
/// pages (`madvise(MADV_HUGEPAGE)` on its 2 MiB-aligned interior).
///
/// Filling a fresh multi-megabyte buffer otherwise costs one page fault per
/// 4 KiB page; with huge pages it costs one per 2 MiB. That matters where
/// many large buffers are filled once and kept (the logical disks of an
/// in-memory sort). Only a hint: where the kernel does not do huge pages, or
/// the buffer is too small, nothing happens.
pub fn advise_huge_pages<T>(buffer: &mut Vec<T>) {
    const HUGE_PAGE_BYTES: usize = 2 << 20;
    let start = buffer.as_mut_ptr() as usize;
    let end = start + buffer.capacity() * size_of::<T>();
    let aligned_start = start.next_multiple_of(HUGE_PAGE_BYTES);
    let aligned_end = end / HUGE_PAGE_BYTES * HUGE_PAGE_BYTES;
    if aligned_end > aligned_start {
        madvise_huge_pages(aligned_start, aligned_end - aligned_start);
    }
}

#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
fn madvise_huge_pages(address: usize, length: usize) {
    // SAFETY: the range lies inside an allocation the caller owns (the
    // capacity of its Vec) and is page-aligned; MADV_HUGEPAGE changes how the
    // kernel backs the pages, never their contents or their mapping.
    let _ = unsafe { libc::madvise(address as *mut libc::c_void, length, libc::MADV_HUGEPAGE) };
}

#[cfg(not(target_os = "linux"))]
fn madvise_huge_pages(_address: usize, _length: usize) {}

/// Appends `bytes` to `out` as `extend_from_slice` does, without a call
/// to `memcpy` for up to 16 bytes: two overlapping copies of a fixed
/// length each. Keys and values of small records are copied a few times
/// each on their way to disk, and a library call per copy cost more than
/// the copy.
#[inline]
pub fn extend_small(out: &mut Vec<u8>, bytes: &[u8]) {
    let len = bytes.len();
    if len > 16 {
        out.extend_from_slice(bytes);
        return;
    }
    let at = out.len();
    out.extend_from_slice(&[0; 16]);
    let to = &mut out[at..];
    if len >= 8 {
        to[..8].copy_from_slice(&bytes[..8]);
        to[len - 8..len].copy_from_slice(&bytes[len - 8..]);
    } else if len >= 4 {
        to[..4].copy_from_slice(&bytes[..4]);
        to[len - 4..len].copy_from_slice(&bytes[len - 4..]);
    } else {
        for (to, &byte) in to.iter_mut().zip(bytes) {
            *to = byte;
        }
    }
    out.truncate(at + len);
}

/// Asks the processor to bring the cache line holding `value` into its
/// caches, without waiting for it: code that knows which scattered
/// addresses it will read next (a hash table's slots for a batch of keys,
/// records in sorted order) overlaps their cache misses with its work.
/// Only a hint; it changes nothing the program can observe.
#[inline(always)]
pub fn prefetch<T>(value: &T) {
    #[cfg(target_arch = "x86_64")]
    #[allow(unsafe_code)]
    // SAFETY: a prefetch reads no memory the program can observe and
    // cannot fault; the address comes from a live reference. SSE, which
    // the instruction needs, is part of every x86-64 processor.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(
            (value as *const T).cast::<i8>(),
        );
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = value;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn advised_buffers_keep_their_contents() {
        let mut buffer: Vec<u8> = Vec::with_capacity(8 << 20);
        buffer.extend((0..1000u32).map(|value| value as u8));
        advise_huge_pages(&mut buffer);
        buffer.extend(std::iter::repeat_n(7u8, 6 << 20));
        assert_eq!(buffer.len(), 1000 + (6 << 20));
        assert!(buffer[..1000]
            .iter()
            .enumerate()
            .all(|(index, &byte)| byte == index as u8));
        let mut small = vec![1u8; 10];
        advise_huge_pages(&mut small);
        assert_eq!(small, vec![1u8; 10]);
    }

    #[test]
    fn extend_small_appends_as_extend_from_slice_does() {
        let source: Vec<u8> = (1..=40).collect();
        for len in 0..=40 {
            let mut out = vec![0xEE; 3];
            extend_small(&mut out, &source[..len]);
            let mut expected = vec![0xEE; 3];
            expected.extend_from_slice(&source[..len]);
            assert_eq!(out, expected, "{len} bytes");
        }
    }

    #[test]
    fn a_prefetch_changes_nothing() {
        let values = vec![3u64; 1000];
        for value in &values {
            prefetch(value);
        }
        assert!(values.iter().all(|&value| value == 3));
    }
}
