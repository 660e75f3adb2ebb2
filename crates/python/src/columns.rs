//! Columns from Python read where they lie: NumPy arrays, Arrow buffers
//! and `bytes` expose their memory through the buffer protocol, so a batch
//! of millions of rows reaches an engine without a copy. A copy into fresh
//! memory cost more than the aggregation it fed: on this kind of VM most of
//! a batch's time went to the kernel zeroing the new pages.
//!
//! A column must not change while an engine reads it (the call releases
//! the GIL, so another Python thread could write to it); that is the
//! caller's side of the bargain, as with any library that reads NumPy
//! memory in place.

use std::borrow::Cow;

use pyo3::buffer::{Element, PyBuffer};
use pyo3::prelude::*;
use spillway_core::{Error, Result};

/// A Python object's memory as items of `T`, held for as long as the
/// view lives.
pub(crate) struct Column<T: Element> {
    buffer: PyBuffer<T>,
}

impl<T: Element + Copy> Column<T> {
    /// Views `object` (NumPy array, Arrow buffer, `bytes`) as items of
    /// `T`, or fails naming `what`: its items must be of `T`'s type and
    /// lie one after another.
    pub(crate) fn new(object: &Bound<'_, PyAny>, what: &str) -> Result<Self> {
        let buffer = PyBuffer::<T>::get(object).map_err(|error| {
            Error::InvalidArgument(format!(
                "{what}: cannot be read as {}: {error}",
                std::any::type_name::<T>()
            ))
        })?;
        if !buffer.is_c_contiguous() {
            return Err(Error::InvalidArgument(format!(
                "{what}: its items do not lie one after another in memory; give a contiguous column"
            )));
        }
        Ok(Column { buffer })
    }

    /// The items, in place when they are aligned for `T` (NumPy's and
    /// Arrow's are), else copied.
    pub(crate) fn items(&self) -> Cow<'_, [T]> {
        let (pointer, count) = (self.buffer.buf_ptr() as *const T, self.buffer.item_count());
        if count == 0 {
            return Cow::Borrowed(&[]);
        }
        if pointer.is_aligned() {
            #[allow(unsafe_code)]
            // SAFETY: the buffer is C-contiguous with `count` items of T
            // (its format was checked by `PyBuffer::get`), aligned, and
            // held exported by `self.buffer` for the borrow's lifetime.
            return Cow::Borrowed(unsafe { std::slice::from_raw_parts(pointer, count) });
        }
        #[allow(unsafe_code)]
        // SAFETY: as above, but read one unaligned item at a time.
        Cow::Owned(
            (0..count)
                .map(|index| unsafe { pointer.add(index).read_unaligned() })
                .collect(),
        )
    }
}

/// A Python object's memory as bytes: `bytes` (format `B`) or an Arrow
/// buffer (format `b`).
pub(crate) enum ByteColumn {
    Unsigned(Column<u8>),
    Signed(Column<i8>),
}

impl ByteColumn {
    pub(crate) fn new(object: &Bound<'_, PyAny>, what: &str) -> Result<Self> {
        match Column::<u8>::new(object, what) {
            Ok(column) => Ok(ByteColumn::Unsigned(column)),
            Err(_) => Column::<i8>::new(object, what).map(ByteColumn::Signed),
        }
    }

    pub(crate) fn bytes(&self) -> &[u8] {
        let buffer = match self {
            ByteColumn::Unsigned(column) => (column.buffer.buf_ptr(), column.buffer.len_bytes()),
            ByteColumn::Signed(column) => (column.buffer.buf_ptr(), column.buffer.len_bytes()),
        };
        if buffer.1 == 0 {
            return &[];
        }
        #[allow(unsafe_code)]
        // SAFETY: a contiguous buffer of `len_bytes` bytes, held exported
        // by the column for the borrow's lifetime; every byte is a u8.
        unsafe {
            std::slice::from_raw_parts(buffer.0 as *const u8, buffer.1)
        }
    }
}
