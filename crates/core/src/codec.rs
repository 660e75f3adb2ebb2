//! Block compression: none, LZ4, Snappy and zstd behind one small interface.
//!
//! Engines compress whole blocks (list blocks, fragment columns, spilled
//! runs). A block's format stores the codec's one-byte [`Codec::id`] and the
//! decompressed length next to the compressed bytes; the reader passes both
//! back, and [`Codec::decompress`] checks the length against the engine's
//! [`Limits`] before it allocates and against what the codec really produced
//! after. Every codec here uses its raw block format (LZ4 block, Snappy raw,
//! a single zstd frame) because the block's own header already carries the
//! length and a CRC32C covers the compressed bytes.
//!
//! | id | codec  | notes                                                  |
//! |----|--------|--------------------------------------------------------|
//! | 0  | none   | stored as is                                           |
//! | 1  | lz4    | LZ4 block format, no length prefix                     |
//! | 2  | snappy | Snappy raw format (starts with a varint of the length) |
//! | 3  | zstd   | one zstd frame; the level is not stored                |
//!
//! Ids are persisted: never renumber them, only add new ones.
//!
//! ```
//! use spillway_core::codec::Codec;
//! let codec: Codec = "zstd:3".parse().unwrap();
//! let mut compressed = Vec::new();
//! codec.compress(b"abcabcabcabcabcabc", &mut compressed).unwrap();
//! let mut block = Vec::new();
//! codec.decompress(&compressed, 18, &mut block).unwrap();
//! assert_eq!(block, b"abcabcabcabcabcabc");
//! ```

use std::cell::RefCell;
use std::fmt;
use std::str::FromStr;

use crate::limits::Limits;
use crate::varint::DecodeError;
use crate::{bail, Error, Result};

/// The zstd level used when none is given: zstd's own default, a good
/// balance of speed (hundreds of MB/s) and ratio for block-sized inputs.
pub const ZSTD_LEVEL_DEFAULT: i32 = 3;

/// A block compression algorithm, chosen per engine (or per column) and
/// recorded per block by its [`id`](Self::id).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Codec {
    /// No compression, for data that does not compress or when CPU is the
    /// bottleneck.
    None,
    /// LZ4: the fastest to decompress; the default choice for hot data.
    Lz4,
    /// Snappy: similar speed to LZ4, kept for formats and peers that expect it.
    Snappy,
    /// zstd at `level` (negative levels are faster, up to 22 smaller): for
    /// cold data and data that crosses the network.
    Zstd {
        /// The compression level; it only affects compression.
        level: i32,
    },
}

const ID_NONE: u8 = 0;
const ID_LZ4: u8 = 1;
const ID_SNAPPY: u8 = 2;
const ID_ZSTD: u8 = 3;

thread_local! {
    // Compression contexts are reused per thread: creating a zstd context
    // allocates its working memory, which costs more than compressing a
    // small block.
    static ZSTD_COMPRESSOR: RefCell<Option<(i32, zstd::bulk::Compressor<'static>)>> =
        const { RefCell::new(None) };
    static ZSTD_DECOMPRESSOR: RefCell<Option<zstd::bulk::Decompressor<'static>>> =
        const { RefCell::new(None) };
    static SNAPPY_ENCODER: RefCell<snap::raw::Encoder> = RefCell::new(snap::raw::Encoder::new());
}

impl Codec {
    /// The persisted one-byte id of this codec (table in the
    /// [module docs](self)).
    pub fn id(&self) -> u8 {
        match self {
            Codec::None => ID_NONE,
            Codec::Lz4 => ID_LZ4,
            Codec::Snappy => ID_SNAPPY,
            Codec::Zstd { .. } => ID_ZSTD,
        }
    }

    /// The codec of a persisted id. The zstd level is not persisted, so id 3
    /// gives [`ZSTD_LEVEL_DEFAULT`]; that is enough to decompress.
    ///
    /// # Errors
    /// A [`DecodeError`] for an unknown id (damage, or a file written by a
    /// newer Spillway); the caller adds the file and offset.
    pub fn from_id(id: u8) -> Result<Self, DecodeError> {
        match id {
            ID_NONE => Ok(Codec::None),
            ID_LZ4 => Ok(Codec::Lz4),
            ID_SNAPPY => Ok(Codec::Snappy),
            ID_ZSTD => Ok(Codec::Zstd {
                level: ZSTD_LEVEL_DEFAULT,
            }),
            unknown => Err(DecodeError::new(format!(
                "unknown codec id {unknown} (known: 0 none, 1 lz4, 2 snappy, 3 zstd)"
            ))),
        }
    }

    /// Compresses `input` and appends the result to `output`, so callers can
    /// reuse one buffer and put a header in front of the compressed bytes.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a zstd level out of range or an input
    /// too large for the codec (Snappy takes at most 4 GiB - 1);
    /// [`Error::Internal`] if the compressor fails otherwise.
    pub fn compress(&self, input: &[u8], output: &mut Vec<u8>) -> Result<()> {
        let start = output.len();
        let written = match *self {
            Codec::None => {
                output.extend_from_slice(input);
                return Ok(());
            }
            Codec::Lz4 => {
                output.resize(start + lz4_flex::block::get_maximum_output_size(input.len()), 0);
                lz4_flex::block::compress_into(input, &mut output[start..])
                    .map_err(|error| Error::Internal(format!("lz4 compression failed: {error}")))
            }
            Codec::Snappy => {
                let bound = snap::raw::max_compress_len(input.len());
                if bound == 0 {
                    bail!(
                        InvalidArgument,
                        "input of {} bytes is too large for snappy",
                        input.len()
                    );
                }
                output.resize(start + bound, 0);
                SNAPPY_ENCODER.with_borrow_mut(|encoder| {
                    encoder
                        .compress(input, &mut output[start..])
                        .map_err(|error| Error::Internal(format!("snappy compression failed: {error}")))
                })
            }
            Codec::Zstd { level } => {
                check_zstd_level(level)?;
                output.resize(start + zstd::zstd_safe::compress_bound(input.len()), 0);
                zstd_compress(level, input, &mut output[start..])
            }
        };
        match written {
            Ok(written) => {
                output.truncate(start + written);
                Ok(())
            }
            Err(error) => {
                output.truncate(start);
                Err(error)
            }
        }
    }

    /// Decompresses `input` into `output` (appended) under the default
    /// [`Limits`]; engines with their own limits call
    /// [`decompress_with_limits`](Self::decompress_with_limits).
    ///
    /// # Errors
    /// As [`decompress_with_limits`](Self::decompress_with_limits).
    pub fn decompress(
        &self,
        input: &[u8],
        decompressed_len: usize,
        output: &mut Vec<u8>,
    ) -> Result<(), DecodeError> {
        self.decompress_with_limits(input, decompressed_len, &Limits::default(), output)
    }

    /// Decompresses `input`, which the block's format says expands to
    /// exactly `decompressed_len` bytes, and appends the result to `output`.
    ///
    /// # Algorithm
    /// 1. Check `decompressed_len` against `limits` (block size and ratio)
    ///    before allocating anything.
    /// 2. Where the codec's own format records the length (Snappy, zstd),
    ///    check that it agrees, still before allocating.
    /// 3. Decompress into exactly `decompressed_len` bytes of `output`; an
    ///    input that would produce more fails, one that produces fewer fails.
    ///
    /// On error `output` is left as it was.
    ///
    /// # Errors
    /// A [`DecodeError`] for damaged input or a length that breaks the
    /// limits or disagrees with the data; the caller adds the file and offset
    /// with [`DecodeError::at`].
    pub fn decompress_with_limits(
        &self,
        input: &[u8],
        decompressed_len: usize,
        limits: &Limits,
        output: &mut Vec<u8>,
    ) -> Result<(), DecodeError> {
        limits.check_decompressed_len(input.len(), decompressed_len)?;
        match *self {
            Codec::None => {
                if input.len() != decompressed_len {
                    return Err(DecodeError::new(format!(
                        "uncompressed block has {} bytes, expected {decompressed_len}",
                        input.len()
                    )));
                }
                output.extend_from_slice(input);
                return Ok(());
            }
            Codec::Lz4 => {}
            Codec::Snappy => {
                let declared = snap::raw::decompress_len(input)
                    .map_err(|error| DecodeError::new(format!("invalid snappy block header: {error}")))?;
                check_codec_declared_len("snappy", declared as u64, decompressed_len)?;
            }
            Codec::Zstd { .. } => match zstd::zstd_safe::get_frame_content_size(input) {
                Ok(Some(declared)) => {
                    check_codec_declared_len("zstd", declared, decompressed_len)?;
                }
                Ok(None) => {}
                Err(_) => return Err(DecodeError::new("invalid zstd frame header")),
            },
        }

        let start = output.len();
        output.resize(start + decompressed_len, 0);
        let destination = &mut output[start..];
        let produced = match *self {
            Codec::None => unreachable!("handled above"),
            Codec::Lz4 => lz4_flex::block::decompress_into(input, destination)
                .map_err(|error| format!("invalid lz4 block: {error}")),
            Codec::Snappy => snap::raw::Decoder::new()
                .decompress(input, destination)
                .map_err(|error| format!("invalid snappy block: {error}")),
            Codec::Zstd { .. } => zstd_decompress(input, destination),
        };
        match produced {
            Ok(produced) if produced == decompressed_len => Ok(()),
            Ok(produced) => {
                output.truncate(start);
                Err(DecodeError::new(format!(
                    "{self} block decompressed to {produced} bytes, expected {decompressed_len}"
                )))
            }
            Err(what) => {
                output.truncate(start);
                Err(DecodeError::new(what))
            }
        }
    }
}

fn check_codec_declared_len(codec: &str, declared: u64, decompressed_len: usize) -> Result<(), DecodeError> {
    if declared == decompressed_len as u64 {
        return Ok(());
    }
    Err(DecodeError::new(format!(
        "{codec} block declares {declared} decompressed bytes, expected {decompressed_len}"
    )))
}

fn check_zstd_level(level: i32) -> Result<()> {
    let range = zstd::compression_level_range();
    if !range.contains(&level) {
        bail!(
            InvalidArgument,
            "zstd level {level} is out of range {}..={}",
            range.start(),
            range.end()
        );
    }
    Ok(())
}

fn zstd_compress(level: i32, input: &[u8], destination: &mut [u8]) -> Result<usize> {
    let internal = |error: std::io::Error| Error::Internal(format!("zstd compression failed: {error}"));
    ZSTD_COMPRESSOR.with_borrow_mut(|slot| {
        let compressor = match slot {
            Some((current_level, compressor)) => {
                if *current_level != level {
                    compressor.set_compression_level(level).map_err(internal)?;
                    *current_level = level;
                }
                compressor
            }
            None => {
                let compressor = zstd::bulk::Compressor::new(level).map_err(internal)?;
                &mut slot.insert((level, compressor)).1
            }
        };
        compressor
            .compress_to_buffer(input, destination)
            .map_err(internal)
    })
}

fn zstd_decompress(input: &[u8], destination: &mut [u8]) -> Result<usize, String> {
    ZSTD_DECOMPRESSOR.with_borrow_mut(|slot| {
        let decompressor = match slot {
            Some(decompressor) => decompressor,
            None => slot.insert(
                zstd::bulk::Decompressor::new()
                    .map_err(|error| format!("cannot create a zstd decompressor: {error}"))?,
            ),
        };
        decompressor
            .decompress_to_buffer(input, destination)
            .map_err(|error| format!("invalid zstd block: {error}"))
    })
}

/// The name used in options and on the command line: `none`, `lz4`,
/// `snappy`, `zstd:<level>`; it parses back to the same codec.
impl fmt::Display for Codec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Codec::None => f.write_str("none"),
            Codec::Lz4 => f.write_str("lz4"),
            Codec::Snappy => f.write_str("snappy"),
            Codec::Zstd { level } => write!(f, "zstd:{level}"),
        }
    }
}

/// Parses `none`, `lz4`, `snappy`, `zstd` (level [`ZSTD_LEVEL_DEFAULT`]) or
/// `zstd:<level>`, ignoring ASCII case and surrounding whitespace.
impl FromStr for Codec {
    type Err = Error;

    fn from_str(text: &str) -> Result<Self> {
        let name = text.trim().to_ascii_lowercase();
        let codec = match name.as_str() {
            "none" => Codec::None,
            "lz4" => Codec::Lz4,
            "snappy" => Codec::Snappy,
            "zstd" => Codec::Zstd {
                level: ZSTD_LEVEL_DEFAULT,
            },
            other => {
                let Some(level) = other.strip_prefix("zstd:") else {
                    bail!(
                        InvalidArgument,
                        "unknown codec {text:?}: expected none, lz4, snappy, zstd or zstd:<level>"
                    );
                };
                let Ok(level) = level.parse::<i32>() else {
                    bail!(
                        InvalidArgument,
                        "invalid zstd level in codec {text:?}: {level:?} is not an integer"
                    );
                };
                check_zstd_level(level)?;
                Codec::Zstd { level }
            }
        };
        Ok(codec)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorKind;

    fn all_codecs() -> [Codec; 5] {
        [
            Codec::None,
            Codec::Lz4,
            Codec::Snappy,
            Codec::Zstd { level: 3 },
            Codec::Zstd { level: -5 },
        ]
    }

    fn compressible(len: usize) -> Vec<u8> {
        let text = b"spill the root buffer into the lists of its children; ";
        text.iter().copied().cycle().take(len).collect()
    }

    fn random(len: usize, mut state: u64) -> Vec<u8> {
        (0..len)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                (state >> 24) as u8
            })
            .collect()
    }

    fn round_trip(codec: Codec, data: &[u8]) -> Vec<u8> {
        // A non-empty prefix checks that both directions append.
        let mut compressed = b"header".to_vec();
        codec.compress(data, &mut compressed).unwrap();
        assert_eq!(&compressed[..6], b"header");
        let mut decompressed = b"prefix".to_vec();
        codec
            .decompress(&compressed[6..], data.len(), &mut decompressed)
            .unwrap_or_else(|error| panic!("{codec}: {error}"));
        assert_eq!(&decompressed[..6], b"prefix");
        assert!(
            decompressed[6..] == *data,
            "{codec} round trip of {} bytes",
            data.len()
        );
        compressed.split_off(6)
    }

    #[test]
    fn every_codec_round_trips_compressible_random_and_empty_data() {
        let text = compressible(100_000);
        let noise = random(100_000, 7);
        for codec in all_codecs() {
            let compressed = round_trip(codec, &text);
            if codec != Codec::None {
                assert!(compressed.len() < text.len() / 5, "{codec}: {}", compressed.len());
            }
            round_trip(codec, &noise);
            round_trip(codec, &[]);
            round_trip(codec, b"x");
        }
    }

    #[test]
    fn ids_are_stable_and_round_trip() {
        let expected = [
            (Codec::None, 0),
            (Codec::Lz4, 1),
            (Codec::Snappy, 2),
            (Codec::Zstd { level: 3 }, 3),
        ];
        for (codec, id) in expected {
            assert_eq!(codec.id(), id);
            assert_eq!(Codec::from_id(id).unwrap(), codec);
        }
        assert_eq!(
            Codec::from_id(3).unwrap(),
            Codec::Zstd {
                level: ZSTD_LEVEL_DEFAULT
            }
        );
    }

    #[test]
    fn unknown_ids_are_rejected() {
        for id in [4, 17, 255] {
            let error = Codec::from_id(id).unwrap_err();
            assert!(
                error.what().contains(&format!("unknown codec id {id}")),
                "{error}"
            );
            assert_eq!(error.at("/data/1.list", 0).kind(), ErrorKind::Corruption);
        }
    }

    #[test]
    fn names_parse_and_print() {
        assert_eq!("none".parse::<Codec>().unwrap(), Codec::None);
        assert_eq!("lz4".parse::<Codec>().unwrap(), Codec::Lz4);
        assert_eq!(" Snappy ".parse::<Codec>().unwrap(), Codec::Snappy);
        assert_eq!("zstd".parse::<Codec>().unwrap(), Codec::Zstd { level: 3 });
        assert_eq!("zstd:19".parse::<Codec>().unwrap(), Codec::Zstd { level: 19 });
        assert_eq!("zstd:-1".parse::<Codec>().unwrap(), Codec::Zstd { level: -1 });
        for codec in all_codecs() {
            assert_eq!(codec.to_string().parse::<Codec>().unwrap(), codec);
        }
    }

    #[test]
    fn bad_names_are_rejected_naming_the_value() {
        for (text, expected) in [
            ("gzip", "unknown codec \"gzip\""),
            ("", "unknown codec \"\""),
            ("zstd:fast", "\"fast\" is not an integer"),
            ("zstd:99", "zstd level 99 is out of range"),
        ] {
            let error = text.parse::<Codec>().unwrap_err();
            assert_eq!(error.kind(), ErrorKind::InvalidArgument);
            assert!(error.to_string().contains(expected), "{text}: {error}");
        }
    }

    #[test]
    fn out_of_range_zstd_level_fails_to_compress() {
        let mut output = vec![1, 2, 3];
        let error = Codec::Zstd { level: 1000 }
            .compress(b"data", &mut output)
            .unwrap_err();
        assert_eq!(error.kind(), ErrorKind::InvalidArgument);
        assert_eq!(output, [1, 2, 3]);
    }

    #[test]
    fn wrong_expected_length_is_an_error() {
        let data = compressible(10_000);
        for codec in all_codecs() {
            let mut compressed = Vec::new();
            codec.compress(&data, &mut compressed).unwrap();
            for wrong_len in [data.len() - 1, data.len() + 1, 0] {
                let mut output = b"keep".to_vec();
                let error = codec
                    .decompress(&compressed, wrong_len, &mut output)
                    .expect_err(&format!("{codec} accepted length {wrong_len}"));
                assert!(!error.what().is_empty());
                assert_eq!(output, b"keep", "{codec}: output changed on error");
            }
        }
    }

    #[test]
    fn truncated_or_garbage_input_is_an_error() {
        let data = compressible(10_000);
        for codec in all_codecs() {
            let mut compressed = Vec::new();
            codec.compress(&data, &mut compressed).unwrap();
            let half = &compressed[..compressed.len() / 2];
            let mut output = Vec::new();
            assert!(
                codec.decompress(half, data.len(), &mut output).is_err(),
                "{codec}"
            );
            assert!(output.is_empty());
            if codec != Codec::None {
                let garbage = random(compressed.len(), 99);
                assert!(
                    codec.decompress(&garbage, data.len(), &mut output).is_err(),
                    "{codec}"
                );
                assert!(output.is_empty());
            }
        }
    }

    #[test]
    fn mutated_input_never_panics_and_never_returns_the_wrong_length() {
        let data = compressible(4096);
        let mut state = 12345u64;
        for codec in all_codecs() {
            let mut compressed = Vec::new();
            codec.compress(&data, &mut compressed).unwrap();
            for _ in 0..500 {
                let mut mutated = compressed.clone();
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                let position = (state % mutated.len() as u64) as usize;
                mutated[position] ^= 1 << ((state >> 60) & 7);
                let mut output = Vec::new();
                match codec.decompress(&mutated, data.len(), &mut output) {
                    Ok(()) => assert_eq!(output.len(), data.len()),
                    Err(_) => assert!(output.is_empty()),
                }
            }
        }
    }

    #[test]
    fn limits_are_checked_before_allocating() {
        let limits = Limits::default().with_block_bytes_max(1 << 16);
        let mut compressed = Vec::new();
        Codec::Lz4.compress(&[0; 1 << 17], &mut compressed).unwrap();
        let mut output = Vec::new();
        let error = Codec::Lz4
            .decompress_with_limits(&compressed, 1 << 17, &limits, &mut output)
            .unwrap_err();
        assert!(error.what().contains("block_bytes_max"), "{error}");
        assert_eq!(output.capacity(), 0);
        // A few bytes claiming to expand to a gigabyte break the ratio bound.
        let error = Codec::Lz4.decompress(&[0; 8], 1 << 27, &mut output).unwrap_err();
        assert!(error.what().contains("decompression_ratio_max"), "{error}");
        assert_eq!(output.capacity(), 0);
    }

    #[test]
    fn codec_headers_must_agree_with_the_expected_length() {
        let data = compressible(5000);
        for codec in [Codec::Snappy, Codec::Zstd { level: 1 }] {
            let mut compressed = Vec::new();
            codec.compress(&data, &mut compressed).unwrap();
            let error = codec.decompress(&compressed, 4000, &mut Vec::new()).unwrap_err();
            assert!(error.what().contains("declares 5000"), "{codec}: {error}");
        }
    }
}
