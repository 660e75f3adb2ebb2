//! Fragments: a range of a run, compressed column by column.
//!
//! ```text
//! hashes       first hash (u64 LE), then varint deltas (the run is sorted)
//! key lengths  varints
//! state sizes  (repeat count, size) varint pairs: fixed-size PAOs take a
//!              few bytes for the whole fragment
//! keys         concatenated
//! states       concatenated
//! ```
//!
//! The columns are written one after another and the whole is compressed
//! with the tree's codec. Hashes as deltas and sizes as runs are the
//! seed's column specialisation (§5.4): they remove the per-record
//! framing that a general compressor only partly recovers.

use spillway_core::{varint, Codec, DecodeError, Result};

use super::run::Run;

thread_local! {
    /// The output of compression, reused by every fragment of this thread.
    static COMPRESSED: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// A compressed range of a run.
#[derive(Debug, Clone)]
pub(crate) struct Fragment {
    records: u32,
    /// Bytes of the encoded columns before compression.
    encoded_bytes: u32,
    /// [`Run::raw_bytes`] of the records: what node capacities count.
    pub(crate) raw_bytes: usize,
    bytes: Vec<u8>,
}

impl Fragment {
    /// Encodes and compresses records `range` of `run`, using `scratch` for
    /// the uncompressed columns.
    pub(crate) fn encode(
        run: &Run,
        range: std::ops::Range<usize>,
        codec: Codec,
        scratch: &mut Vec<u8>,
    ) -> Result<Fragment> {
        scratch.clear();
        let mut raw_bytes = 0;
        let mut previous = run.hashes[range.start];
        scratch.extend_from_slice(&previous.to_le_bytes());
        for &hash in &run.hashes[range.start + 1..range.end] {
            varint::encode_u64(hash - previous, scratch);
            previous = hash;
        }
        for index in range.clone() {
            varint::encode_u64(run.key(index).len() as u64, scratch);
        }
        let mut index = range.start;
        while index < range.end {
            let size = run.state(index).len();
            let repeats = (index..range.end)
                .take_while(|&other| run.state(other).len() == size)
                .count();
            varint::encode_u64(repeats as u64, scratch);
            varint::encode_u64(size as u64, scratch);
            index += repeats;
        }
        for index in range.clone() {
            scratch.extend_from_slice(run.key(index));
            raw_bytes += run.key(index).len();
        }
        for index in range.clone() {
            scratch.extend_from_slice(run.state(index));
            raw_bytes += run.state(index).len();
        }
        // Compressed into a reused buffer, then copied to an allocation of
        // the exact size: compressing into a fresh vector and shrinking it
        // leaves a hole in the heap per fragment, which fragmented the heap
        // to several times the fragments' size.
        let bytes = COMPRESSED.with(|compressed| {
            let mut compressed = compressed.borrow_mut();
            compressed.clear();
            codec.compress(scratch, &mut compressed)?;
            Ok::<_, spillway_core::Error>(compressed.to_vec())
        })?;
        Ok(Fragment {
            records: range.len() as u32,
            encoded_bytes: scratch.len() as u32,
            raw_bytes: raw_bytes + super::run::RECORD_OVERHEAD_BYTES * range.len(),
            bytes,
        })
    }

    /// Bytes held in memory.
    pub(crate) fn compressed_bytes(&self) -> usize {
        self.bytes.capacity()
    }

    pub(crate) fn records(&self) -> usize {
        self.records as usize
    }

    /// Decompresses and decodes the fragment, appending its records to
    /// `out` (which must end below its first hash); `scratch` holds the
    /// decompressed columns.
    pub(crate) fn decode_into(
        &self,
        codec: Codec,
        scratch: &mut Vec<u8>,
        out: &mut Run,
    ) -> Result<(), DecodeError> {
        scratch.clear();
        codec.decompress(&self.bytes, self.encoded_bytes as usize, scratch)?;
        let records = self.records as usize;
        let mut at = 0;
        let first = scratch
            .get(..8)
            .ok_or_else(|| DecodeError::new("a fragment's hashes are cut short"))?;
        // A record takes at least a byte in each of two columns, so the
        // decompressed length bounds the count (and what a damaged count
        // can make us allocate).
        let capacity = records.min(scratch.len());
        let mut hashes = Vec::with_capacity(capacity);
        let mut hash = u64::from_le_bytes(first.try_into().expect("8 bytes"));
        hashes.push(hash);
        at += 8;
        for _ in 1..records {
            let (delta, used) = varint::decode_u64(&scratch[at..])?;
            hash = hash
                .checked_add(delta)
                .ok_or_else(|| DecodeError::new("a fragment's hashes overflow"))?;
            hashes.push(hash);
            at += used;
        }
        let mut key_lengths = Vec::with_capacity(capacity);
        for _ in 0..records {
            let (length, used) = varint::decode_u64(&scratch[at..])?;
            key_lengths.push(length as usize);
            at += used;
        }
        let mut state_sizes = Vec::with_capacity(capacity);
        while state_sizes.len() < records {
            let (repeats, used) = varint::decode_u64(&scratch[at..])?;
            at += used;
            let (size, used) = varint::decode_u64(&scratch[at..])?;
            at += used;
            if repeats == 0 || repeats as usize > records - state_sizes.len() {
                return Err(DecodeError::new("a fragment's state sizes do not add up"));
            }
            state_sizes.extend(std::iter::repeat_n(size as usize, repeats as usize));
        }
        let keys_total: usize = key_lengths.iter().sum();
        let states_total: usize = state_sizes.iter().sum();
        if at + keys_total + states_total != scratch.len() {
            return Err(DecodeError::new(
                "a fragment's columns do not add up to its length",
            ));
        }
        let mut key_at = at;
        let mut state_at = at + keys_total;
        for index in 0..records {
            let key = &scratch[key_at..key_at + key_lengths[index]];
            let state = &scratch[state_at..state_at + state_sizes[index]];
            out.push(hashes[index], key, state);
            key_at += key_lengths[index];
            state_at += state_sizes[index];
        }
        Ok(())
    }
}

/// The fuzz target's body (`crates/agg/fuzz`): `data` is a fragment with
/// its header in front (codec byte, record count and decoded length, u32 LE
/// each). Decoding must give an error or records in hash order that encode
/// back to a fragment decoding to the same records; anything else panics.
pub fn fuzz_decode(data: &[u8]) {
    if data.len() < 9 {
        return;
    }
    let codec = match data[0] % 4 {
        0 => Codec::None,
        1 => Codec::Lz4,
        2 => Codec::Snappy,
        _ => Codec::Zstd { level: 1 },
    };
    let field = |at: usize| u32::from_le_bytes(data[at..at + 4].try_into().expect("4 bytes"));
    let fragment = Fragment {
        records: field(1) % (1 << 16),
        // The decoded length is trusted by the codecs as an allocation size.
        encoded_bytes: field(5) % (1 << 20),
        raw_bytes: 0,
        bytes: data[9..].to_vec(),
    };
    let mut decoded = Run::default();
    if fragment
        .decode_into(codec, &mut Vec::new(), &mut decoded)
        .is_err()
        || decoded.is_empty()
    {
        return;
    }
    assert_eq!(decoded.len(), fragment.records());
    assert!(decoded.hashes.windows(2).all(|pair| pair[0] <= pair[1]));
    let again = Fragment::encode(&decoded, 0..decoded.len(), codec, &mut Vec::new()).expect("re-encoding");
    let mut round_trip = Run::default();
    again
        .decode_into(codec, &mut Vec::new(), &mut round_trip)
        .expect("a re-encoded fragment decodes");
    assert_eq!(round_trip.hashes, decoded.hashes);
    for index in 0..decoded.len() {
        assert_eq!(round_trip.key(index), decoded.key(index));
        assert_eq!(round_trip.state(index), decoded.state(index));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fragments_round_trip_any_range_with_every_codec() {
        let mut run = Run::default();
        for index in 0..1000u64 {
            let state = if index % 10 == 0 { vec![1; 20] } else { vec![2; 8] };
            run.push(index * 977, format!("key{index}").as_bytes(), &state);
        }
        for codec in [Codec::None, Codec::Lz4, Codec::Snappy, Codec::Zstd { level: 1 }] {
            for range in [0..1000, 0..1, 17..503, 999..1000] {
                let fragment = Fragment::encode(&run, range.clone(), codec, &mut Vec::new()).unwrap();
                let mut decoded = Run::default();
                fragment
                    .decode_into(codec, &mut Vec::new(), &mut decoded)
                    .unwrap();
                assert_eq!(decoded.len(), range.len());
                for (index, original) in range.clone().enumerate() {
                    assert_eq!(decoded.hashes[index], run.hashes[original]);
                    assert_eq!(decoded.key(index), run.key(original));
                    assert_eq!(decoded.state(index), run.state(original));
                }
            }
        }
    }

    #[test]
    fn damaged_fragments_never_panic_the_decoder() {
        let mut run = Run::default();
        for index in 0..200u64 {
            run.push(
                index * 3,
                format!("k{index}").as_bytes(),
                &index.to_le_bytes()[..(index % 9) as usize],
            );
        }
        let mut state = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for codec in [Codec::None, Codec::Lz4] {
            let original = Fragment::encode(&run, 0..200, codec, &mut Vec::new()).unwrap();
            for _ in 0..2000 {
                let mut damaged = original.clone();
                match next() % 3 {
                    0 => {
                        let at = next() as usize % damaged.bytes.len();
                        damaged.bytes[at] ^= 1 << (next() % 8);
                    }
                    1 => damaged.bytes.truncate(next() as usize % damaged.bytes.len()),
                    _ => damaged.records = (next() % 400) as u32,
                }
                // Either an error or some records; never a panic.
                let _ = damaged.decode_into(codec, &mut Vec::new(), &mut Run::default());
            }
        }
    }

    #[test]
    fn the_fuzz_target_survives_random_and_valid_inputs() {
        let mut run = Run::default();
        for index in 0..50u64 {
            run.push(index * 11, format!("k{index}").as_bytes(), &[index as u8; 3]);
        }
        let mut state = 0x2545_F491_4F6C_DD1Du64;
        for codec_byte in 0..4u8 {
            let codec =
                [Codec::None, Codec::Lz4, Codec::Snappy, Codec::Zstd { level: 1 }][codec_byte as usize];
            let fragment = Fragment::encode(&run, 0..50, codec, &mut Vec::new()).unwrap();
            let mut data = vec![codec_byte];
            data.extend_from_slice(&fragment.records.to_le_bytes());
            data.extend_from_slice(&fragment.encoded_bytes.to_le_bytes());
            data.extend_from_slice(&fragment.bytes);
            fuzz_decode(&data);
            for _ in 0..500 {
                let mut damaged = data.clone();
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                let at = state as usize % damaged.len();
                damaged[at] = (state >> 32) as u8;
                fuzz_decode(&damaged);
            }
        }
    }

    #[test]
    fn damaged_fragments_are_refused() {
        let mut run = Run::default();
        run.push(1, b"a", b"x");
        run.push(2, b"b", b"y");
        let mut fragment = Fragment::encode(&run, 0..2, Codec::None, &mut Vec::new()).unwrap();
        fragment.bytes[9] = 200;
        assert!(fragment
            .decode_into(Codec::None, &mut Vec::new(), &mut Run::default())
            .is_err());
    }
}
