//! Output plumbing shared by the generators: large writes and fast number
//! formatting.
//!
//! Generators format records into a memory buffer and hand the writer one
//! [`CHUNK_BYTES`] chunk at a time, so an unbuffered `File` or a locked stdout
//! sees a few large writes instead of one system call per record.

use std::io::Write;

use spillway_core::{IoContext, Result};

/// The size at which a [`ChunkedSink`] passes its buffer to the writer.
pub(crate) const CHUNK_BYTES: usize = 1 << 20;

/// A byte buffer in front of a writer that counts what it passed on.
pub(crate) struct ChunkedSink<W: Write> {
    writer: W,
    buffer: Vec<u8>,
    bytes_written: u64,
    what: &'static str,
}

impl<W: Write> ChunkedSink<W> {
    /// A sink for `writer`; `what` names the output in error messages.
    pub(crate) fn new(writer: W, what: &'static str) -> Self {
        ChunkedSink {
            writer,
            buffer: Vec::with_capacity(CHUNK_BYTES + 4096),
            bytes_written: 0,
            what,
        }
    }

    /// The buffer to append records to; call [`ChunkedSink::maybe_flush`]
    /// after each record.
    #[inline]
    pub(crate) fn buffer(&mut self) -> &mut Vec<u8> {
        &mut self.buffer
    }

    /// Writes the buffer out once it holds at least [`CHUNK_BYTES`].
    #[inline]
    pub(crate) fn maybe_flush(&mut self) -> Result<()> {
        if self.buffer.len() >= CHUNK_BYTES {
            self.flush_buffer()?;
        }
        Ok(())
    }

    /// Writes `bytes` (a whole block) straight to the writer, after anything
    /// buffered.
    pub(crate) fn write_block(&mut self, bytes: &[u8]) -> Result<()> {
        self.flush_buffer()?;
        let what = self.what;
        self.writer
            .write_all(bytes)
            .io_context(|| format!("writing {what}"))?;
        self.bytes_written += bytes.len() as u64;
        Ok(())
    }

    fn flush_buffer(&mut self) -> Result<()> {
        if !self.buffer.is_empty() {
            let what = self.what;
            self.writer
                .write_all(&self.buffer)
                .io_context(|| format!("writing {what}"))?;
            self.bytes_written += self.buffer.len() as u64;
            self.buffer.clear();
        }
        Ok(())
    }

    /// Writes what is left, flushes the writer and returns the bytes written.
    pub(crate) fn finish(mut self) -> Result<u64> {
        self.flush_buffer()?;
        let what = self.what;
        self.writer.flush().io_context(|| format!("flushing {what}"))?;
        Ok(self.bytes_written)
    }
}

/// Appends `bytes` as lowercase hexadecimal, two digits per byte.
#[inline]
pub(crate) fn push_hex(buffer: &mut Vec<u8>, bytes: &[u8]) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    buffer.reserve(bytes.len() * 2);
    for &byte in bytes {
        buffer.push(DIGITS[usize::from(byte >> 4)]);
        buffer.push(DIGITS[usize::from(byte & 0xF)]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_formatting() {
        let mut buffer = Vec::new();
        push_hex(&mut buffer, &[0x00, 0xAB, 0x0F, 0xF0]);
        assert_eq!(buffer, b"00ab0ff0");
    }

    #[test]
    fn sink_counts_and_orders_bytes() {
        let mut output = Vec::new();
        let mut sink = ChunkedSink::new(&mut output, "test output");
        sink.buffer().extend_from_slice(b"ab");
        sink.maybe_flush().unwrap();
        sink.write_block(b"cd").unwrap();
        sink.buffer().extend_from_slice(&vec![b'e'; CHUNK_BYTES]);
        sink.maybe_flush().unwrap();
        assert_eq!(sink.finish().unwrap(), 4 + CHUNK_BYTES as u64);
        assert_eq!(&output[..5], b"abcde");
    }
}
