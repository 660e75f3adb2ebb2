//! Fragments: a range of a run, compressed column by column.
//!
//! ```text
//! key lengths  (repeat count, length) varint pairs
//! state sizes  (repeat count, size) varint pairs
//! keys         concatenated
//! states       concatenated
//! ```
//!
//! The columns are written one after another and the whole is compressed
//! with the tree's codec. Lengths as runs are the seed's column
//! specialisation (§5.4): fixed-size keys or PAOs take a few bytes for the
//! whole fragment. Hashes are not stored at all: decoding recomputes them
//! from the keys, which costs less than decoding stored 64-bit deltas (7
//! bytes a record) and saves their memory, and checks that they ascend.

use spillway_core::{hash64, varint, Codec, DecodeError, Result};

use super::run::Run;
use super::tree_hash;

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
        encode_lengths(range.clone().map(|index| run.key(index).len()), scratch);
        encode_lengths(range.clone().map(|index| run.state(index).len()), scratch);
        let keys = run.keys_of(range.clone());
        let states = run.states_of(range.clone());
        scratch.extend_from_slice(keys);
        scratch.extend_from_slice(states);
        let raw_bytes = keys.len() + states.len();
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
    /// `out` (which must end below its first hash), hashing keys to
    /// `hash_bits` as the tree does; `scratch` holds the decompressed
    /// columns.
    pub(crate) fn decode_into(
        &self,
        codec: Codec,
        hash_bits: u32,
        scratch: &mut Vec<u8>,
        out: &mut Run,
    ) -> Result<(), DecodeError> {
        scratch.clear();
        codec.decompress(&self.bytes, self.encoded_bytes as usize, scratch)?;
        let records = self.records as usize;
        let mut at = 0;
        let key_lengths = decode_lengths(scratch, &mut at, records, "key lengths")?;
        let state_sizes = decode_lengths(scratch, &mut at, records, "state sizes")?;
        let total = |lengths: &[u32]| lengths.iter().map(|&length| u64::from(length)).sum::<u64>();
        let (keys_total, states_total) = (total(&key_lengths), total(&state_sizes));
        if at as u64 + keys_total + states_total != scratch.len() as u64 {
            return Err(DecodeError::new(
                "a fragment's columns do not add up to its length",
            ));
        }
        let (keys, states) = scratch[at..].split_at(keys_total as usize);
        let mut hashes = Vec::with_capacity(records);
        let mut key_at = 0;
        for &length in &key_lengths {
            let key = &keys[key_at..key_at + length as usize];
            let hash = tree_hash(hash64(key), hash_bits);
            if hashes.last().is_some_and(|&last| last > hash) {
                return Err(DecodeError::new("a fragment's keys are out of hash order"));
            }
            hashes.push(hash);
            key_at += length as usize;
        }
        out.extend_columns(&hashes, &key_lengths, &state_sizes, keys, states);
        Ok(())
    }
}

/// Appends `lengths` as (repeat count, length) varint pairs.
fn encode_lengths(mut lengths: impl Iterator<Item = usize>, out: &mut Vec<u8>) {
    let Some(mut length) = lengths.next() else { return };
    let mut repeats = 1u64;
    for next in lengths {
        if next == length {
            repeats += 1;
            continue;
        }
        varint::encode_u64(repeats, out);
        varint::encode_u64(length as u64, out);
        (length, repeats) = (next, 1);
    }
    varint::encode_u64(repeats, out);
    varint::encode_u64(length as u64, out);
}

/// Reads `records` lengths that [`encode_lengths`] wrote at `at`, moving
/// `at` past them.
fn decode_lengths(input: &[u8], at: &mut usize, records: usize, what: &str) -> Result<Vec<u32>, DecodeError> {
    // A pair takes at least two bytes, so the input bounds what a damaged
    // count can make us allocate.
    let mut lengths = Vec::with_capacity(records.min(input.len()));
    while lengths.len() < records {
        let (repeats, used) = varint::decode_u64(input.get(*at..).unwrap_or_default())?;
        *at += used;
        let (length, used) = varint::decode_u32(input.get(*at..).unwrap_or_default())?;
        *at += used;
        if repeats == 0 || repeats > (records - lengths.len()) as u64 {
            return Err(DecodeError::new(format!("a fragment's {what} do not add up")));
        }
        lengths.extend(std::iter::repeat_n(length, repeats as usize));
    }
    Ok(lengths)
}

/// The fuzz target's body (`crates/agg/fuzz`, through `format`): `data` is
/// a fragment with its header in front (codec byte, record count and
/// decoded length, u32 LE each). Decoding must give an error or records in
/// hash order that encode back to a fragment decoding to the same records;
/// anything else panics.
pub(crate) fn check_fragment(data: &[u8]) {
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
        .decode_into(codec, 64, &mut Vec::new(), &mut decoded)
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
        .decode_into(codec, 64, &mut Vec::new(), &mut round_trip)
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

    /// A run of `records` (key, state), hashed and ordered as a tree's.
    fn run_of(records: impl IntoIterator<Item = (Vec<u8>, Vec<u8>)>) -> Run {
        let mut records: Vec<(u64, Vec<u8>, Vec<u8>)> = records
            .into_iter()
            .map(|(key, state)| (hash64(&key), key, state))
            .collect();
        records.sort();
        let mut run = Run::default();
        for (hash, key, state) in &records {
            run.push(*hash, key, state);
        }
        run
    }

    #[test]
    fn fragments_round_trip_any_range_with_every_codec() {
        let run = run_of((0..1000u64).map(|index| {
            let state = if index % 10 == 0 { vec![1; 20] } else { vec![2; 8] };
            (format!("key{index}").into_bytes(), state)
        }));
        for codec in [Codec::None, Codec::Lz4, Codec::Snappy, Codec::Zstd { level: 1 }] {
            for range in [0..1000, 0..1, 17..503, 999..1000] {
                let fragment = Fragment::encode(&run, range.clone(), codec, &mut Vec::new()).unwrap();
                let mut decoded = Run::default();
                fragment
                    .decode_into(codec, 64, &mut Vec::new(), &mut decoded)
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
        let run = run_of((0..200u64).map(|index| {
            (
                format!("k{index}").into_bytes(),
                index.to_le_bytes()[..(index % 9) as usize].to_vec(),
            )
        }));
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
                let _ = damaged.decode_into(codec, 64, &mut Vec::new(), &mut Run::default());
            }
        }
    }

    #[test]
    fn the_fuzz_target_survives_random_and_valid_inputs() {
        let run = run_of((0..50u64).map(|index| (format!("k{index}").into_bytes(), vec![index as u8; 3])));
        let mut state = 0x2545_F491_4F6C_DD1Du64;
        for codec_byte in 0..4u8 {
            let codec =
                [Codec::None, Codec::Lz4, Codec::Snappy, Codec::Zstd { level: 1 }][codec_byte as usize];
            let fragment = Fragment::encode(&run, 0..50, codec, &mut Vec::new()).unwrap();
            let mut data = vec![codec_byte];
            data.extend_from_slice(&fragment.records.to_le_bytes());
            data.extend_from_slice(&fragment.encoded_bytes.to_le_bytes());
            data.extend_from_slice(&fragment.bytes);
            check_fragment(&data);
            for _ in 0..500 {
                let mut damaged = data.clone();
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                let at = state as usize % damaged.len();
                damaged[at] = (state >> 32) as u8;
                check_fragment(&damaged);
            }
        }
    }

    #[test]
    fn damaged_fragments_are_refused() {
        let run = run_of([(b"a".to_vec(), b"x".to_vec()), (b"b".to_vec(), b"y".to_vec())]);
        let fragment = Fragment::encode(&run, 0..2, Codec::None, &mut Vec::new()).unwrap();
        let decode = |fragment: &Fragment| {
            fragment
                .decode_into(Codec::None, 64, &mut Vec::new(), &mut Run::default())
                .map_err(|error| error.what().to_string())
        };
        assert_eq!(decode(&fragment), Ok(()));
        // Lengths that overrun the bytes.
        let mut long = fragment.clone();
        long.bytes[1] = 9;
        assert!(decode(&long).unwrap_err().contains("do not add up"));
        // The keys swapped: out of hash order.
        let mut swapped = fragment;
        let keys_at = swapped.bytes.len() - 4;
        swapped.bytes.swap(keys_at, keys_at + 1);
        assert!(decode(&swapped).unwrap_err().contains("out of hash order"));
    }
}
