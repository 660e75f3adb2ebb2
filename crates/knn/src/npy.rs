//! NumPy's `.npy` files: the kNN CLI reads points and queries from them and
//! writes distances and indices to them.
//!
//! A `.npy` file is the magic `\x93NUMPY`, a two-byte version, the length of
//! a header (two bytes little-endian in version 1.0, four in 2.0 and 3.0),
//! the header itself (a Python dict literal naming the dtype, the order and
//! the shape, padded with spaces and ending in `\n`), then the elements.
//!
//! | bytes          | content                                                    |
//! |----------------|------------------------------------------------------------|
//! | 0..6           | `\x93NUMPY`                                                |
//! | 6, 7           | major, minor version                                       |
//! | 8..10 or 8..12 | header length, little-endian `u16` (1.0) or `u32` (2.0, 3.0) |
//! | header         | `{'descr': '<f8', 'fortran_order': False, 'shape': (r, c), }` |
//! | data           | `r * c` elements in C order                                |
//!
//! Only 2-D C-order arrays of little-endian `f4`, `f8` and `i8` are read:
//! coordinates are `f32` or `f64` (what [`Points`](crate::Points) takes) and
//! indices are `i64` (what NumPy uses for them). Anything else is refused
//! with a message that says how to convert it, rather than converted here
//! with a loss the caller did not ask for.

use spillway_core::{Error, IoContext, Result};
use std::path::Path;

/// The first six bytes of every `.npy` file.
const MAGIC: &[u8; 6] = b"\x93NUMPY";
/// NumPy pads its headers so the data starts at a multiple of this.
const DATA_ALIGNMENT_BYTES: usize = 64;
/// The dtypes read, as their `descr`, for error messages.
const ACCEPTED: &str = "'<f4', '<f8', '<i8'";

/// Element data of a decoded array.
#[derive(Debug, Clone, PartialEq)]
pub enum NpyData {
    /// `<f4`: little-endian 32-bit floats.
    F32(Vec<f32>),
    /// `<f8`: little-endian 64-bit floats.
    F64(Vec<f64>),
    /// `<i8`: little-endian 64-bit signed integers.
    I64(Vec<i64>),
}

/// A 2-D C-order array: element `(row, col)` is `data[row * cols + col]`.
#[derive(Debug, Clone, PartialEq)]
pub struct NpyArray {
    /// The number of rows (the first axis).
    pub rows: usize,
    /// The number of columns (the second axis).
    pub cols: usize,
    /// The `rows * cols` elements.
    pub data: NpyData,
}

/// Decodes an `.npy` image; `path` only names the file in errors.
///
/// Every malformed or unsupported input is an [`Error::InvalidArgument`]
/// whose message starts with `path`; nothing is allocated beyond the size of
/// `bytes`.
pub fn decode(bytes: &[u8], path: &Path) -> Result<NpyArray> {
    let invalid = |what: String| Error::InvalidArgument(format!("{}: {what}", path.display()));
    if bytes.len() < 8 || &bytes[..6] != MAGIC {
        return Err(invalid("not a NumPy .npy file (bad magic)".into()));
    }
    let (header_start, header_bytes) = match (bytes[6], bytes[7]) {
        (1, 0) if bytes.len() >= 10 => (10_usize, usize::from(u16::from_le_bytes([bytes[8], bytes[9]]))),
        (2 | 3, 0) if bytes.len() >= 12 => {
            let length = u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]);
            (12, usize::try_from(length).unwrap_or(usize::MAX))
        }
        (1..=3, 0) => return Err(invalid("file ends inside the header length".into())),
        (major, minor) => {
            return Err(invalid(format!(
                "unsupported .npy format version {major}.{minor}"
            )))
        }
    };
    let header_end = header_start
        .checked_add(header_bytes)
        .filter(|&end| end <= bytes.len())
        .ok_or_else(|| {
            invalid(format!(
                "header of {header_bytes} bytes runs past the end of the file ({} bytes)",
                bytes.len()
            ))
        })?;
    let header = parse_header(&bytes[header_start..header_end])
        .map_err(|what| invalid(format!("malformed .npy header: {what}")))?;

    let descr = String::from_utf8_lossy(&header.descr);
    let itemsize = match header.descr.as_slice() {
        b"<f4" => 4,
        b"<f8" | b"<i8" => 8,
        b">f4" | b">f8" | b">i8" => {
            return Err(invalid(format!(
                "dtype '{descr}' is big-endian; only little-endian arrays are read \
                 (save with array.astype('<{}'))",
                &descr[1..]
            )))
        }
        _ => {
            return Err(invalid(format!(
                "dtype '{descr}' is not supported; expected one of {ACCEPTED}"
            )))
        }
    };
    if header.fortran_order {
        return Err(invalid(
            "array is in Fortran order; save a C-order copy (numpy.ascontiguousarray(array))".into(),
        ));
    }
    let &[rows, cols] = header.shape.as_slice() else {
        let hint = match header.shape.len() {
            1 => " (for one row, save array.reshape(1, -1))",
            _ => "",
        };
        return Err(invalid(format!(
            "expected a 2-D (rows, dims) array, found shape {}{hint}",
            shape_text(&header.shape)
        )));
    };
    let data_bytes = rows
        .checked_mul(cols)
        .and_then(|count| count.checked_mul(itemsize));
    let body = &bytes[header_end..];
    if data_bytes != Some(body.len()) {
        let expected = data_bytes.map_or_else(|| "more than usize::MAX".to_string(), |n| n.to_string());
        return Err(invalid(format!(
            "shape ({rows}, {cols}) of '{descr}' needs {expected} data bytes, found {}",
            body.len()
        )));
    }
    let data = match header.descr.as_slice() {
        b"<f4" => NpyData::F32(from_le(body, f32::from_le_bytes)),
        b"<f8" => NpyData::F64(from_le(body, f64::from_le_bytes)),
        _ => NpyData::I64(from_le(body, i64::from_le_bytes)),
    };
    Ok(NpyArray { rows, cols, data })
}

/// Reads and decodes the `.npy` file at `path`.
pub fn read(path: &Path) -> Result<NpyArray> {
    let bytes = std::fs::read(path).io_context(|| format!("reading {}", path.display()))?;
    decode(&bytes, path)
}

/// Encodes a `rows x cols` C-order array of `<f8`.
///
/// # Panics
/// If `data.len() != rows * cols`.
pub fn encode_f64(rows: usize, cols: usize, data: &[f64]) -> Vec<u8> {
    encode("<f8", rows, cols, data, f64::to_le_bytes)
}

/// Encodes a `rows x cols` C-order array of `<i8`.
///
/// # Panics
/// If `data.len() != rows * cols`.
pub fn encode_i64(rows: usize, cols: usize, data: &[i64]) -> Vec<u8> {
    encode("<i8", rows, cols, data, i64::to_le_bytes)
}

/// Encodes a `rows x cols` C-order array of `<f4`.
///
/// # Panics
/// If `data.len() != rows * cols`.
pub fn encode_f32(rows: usize, cols: usize, data: &[f32]) -> Vec<u8> {
    encode("<f4", rows, cols, data, f32::to_le_bytes)
}

/// A version 1.0 file as NumPy writes it: the header padded with spaces so
/// the data starts at a multiple of [`DATA_ALIGNMENT_BYTES`].
fn encode<T: Copy, const N: usize>(
    descr: &str,
    rows: usize,
    cols: usize,
    data: &[T],
    to_le: fn(T) -> [u8; N],
) -> Vec<u8> {
    let count = data.len();
    assert!(
        rows.checked_mul(cols) == Some(count),
        "{count} elements do not make a {rows} x {cols} array"
    );
    let dict = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': ({rows}, {cols}), }}");
    let unpadded = MAGIC.len() + 4 + dict.len() + 1;
    let padding = unpadded.next_multiple_of(DATA_ALIGNMENT_BYTES) - unpadded;
    let header_bytes = u16::try_from(dict.len() + padding + 1).expect("two numbers make a short header");
    let mut out = Vec::with_capacity(unpadded + padding + count * N);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&[1, 0]);
    out.extend_from_slice(&header_bytes.to_le_bytes());
    out.extend_from_slice(dict.as_bytes());
    out.resize(out.len() + padding, b' ');
    out.push(b'\n');
    out.extend(data.iter().flat_map(|&value| to_le(value)));
    out
}

/// Little-endian elements of `N` bytes each; `body.len()` is a multiple of `N`.
fn from_le<const N: usize, T>(body: &[u8], convert: fn([u8; N]) -> T) -> Vec<T> {
    body.chunks_exact(N)
        .map(|chunk| convert(chunk.try_into().expect("chunks_exact yields N bytes")))
        .collect()
}

/// A shape as Python prints it: `()`, `(5,)`, `(2, 3)`.
fn shape_text(shape: &[usize]) -> String {
    match shape {
        [one] => format!("({one},)"),
        _ => format!(
            "({})",
            shape.iter().map(usize::to_string).collect::<Vec<_>>().join(", ")
        ),
    }
}

/// A header parser's result: an error is a message for [`decode`] to give the path.
type Parsed<T> = std::result::Result<T, String>;

/// The three keys of an `.npy` header.
struct Header {
    descr: Vec<u8>,
    fortran_order: bool,
    shape: Vec<usize>,
}

/// Parses exactly the dict literal NumPy writes: the keys `descr`,
/// `fortran_order` and `shape` once each in any order, a string, `True` or
/// `False`, and a tuple of non-negative integers; spaces and a trailing comma
/// optional.
fn parse_header(text: &[u8]) -> Parsed<Header> {
    let mut cursor = Cursor { text, at: 0 };
    let (mut descr, mut fortran_order, mut shape) = (None, None, None);
    cursor.expect(b'{')?;
    while !cursor.eat(b'}') {
        let key = cursor.string()?;
        cursor.expect(b':')?;
        let duplicate = match key {
            b"descr" => descr.replace(cursor.string()?.to_vec()).is_some(),
            b"fortran_order" => fortran_order.replace(cursor.boolean()?).is_some(),
            b"shape" => shape.replace(cursor.tuple()?).is_some(),
            _ => return Err(format!("unexpected key '{}'", String::from_utf8_lossy(key))),
        };
        if duplicate {
            return Err(format!("key '{}' appears twice", String::from_utf8_lossy(key)));
        }
        if !cursor.eat(b',') {
            cursor.expect(b'}')?;
            break;
        }
    }
    cursor.skip_spaces();
    if cursor.at != text.len() {
        return Err(format!("unexpected text after the dict at byte {}", cursor.at));
    }
    Ok(Header {
        descr: descr.ok_or("missing key 'descr'")?,
        fortran_order: fortran_order.ok_or("missing key 'fortran_order'")?,
        shape: shape.ok_or("missing key 'shape'")?,
    })
}

/// A position in a header being parsed.
struct Cursor<'a> {
    text: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    fn skip_spaces(&mut self) {
        while matches!(self.text.get(self.at), Some(b' ' | b'\t' | b'\r' | b'\n')) {
            self.at += 1;
        }
    }

    /// Consumes `byte` (after spaces) if it comes next.
    fn eat(&mut self, byte: u8) -> bool {
        self.skip_spaces();
        let found = self.text.get(self.at) == Some(&byte);
        self.at += usize::from(found);
        found
    }

    fn expect(&mut self, byte: u8) -> Parsed<()> {
        if self.eat(byte) {
            Ok(())
        } else {
            Err(format!("expected '{}' at byte {}", char::from(byte), self.at))
        }
    }

    /// A string in single or double quotes, without escapes.
    fn string(&mut self) -> Parsed<&'a [u8]> {
        self.skip_spaces();
        let quote = match self.text.get(self.at) {
            Some(&quote @ (b'\'' | b'"')) => quote,
            _ => return Err(format!("expected a quoted string at byte {}", self.at)),
        };
        let start = self.at + 1;
        let length = self.text[start..]
            .iter()
            .position(|&byte| byte == quote)
            .ok_or_else(|| format!("unterminated string at byte {}", self.at))?;
        self.at = start + length + 1;
        Ok(&self.text[start..start + length])
    }

    fn boolean(&mut self) -> Parsed<bool> {
        self.skip_spaces();
        let rest = &self.text[self.at..];
        if rest.starts_with(b"True") {
            self.at += 4;
            Ok(true)
        } else if rest.starts_with(b"False") {
            self.at += 5;
            Ok(false)
        } else {
            Err(format!("expected True or False at byte {}", self.at))
        }
    }

    /// A tuple of non-negative integers: `()`, `(n,)`, `(n, m)`, `(n, m,)`.
    fn tuple(&mut self) -> Parsed<Vec<usize>> {
        self.expect(b'(')?;
        let mut items = Vec::new();
        while !self.eat(b')') {
            items.push(self.integer()?);
            if !self.eat(b',') {
                self.expect(b')')?;
                if items.len() == 1 {
                    return Err("a one-element shape needs a trailing comma: (n,)".into());
                }
                break;
            }
        }
        Ok(items)
    }

    fn integer(&mut self) -> Parsed<usize> {
        self.skip_spaces();
        let start = self.at;
        let mut value: usize = 0;
        while let Some(&digit @ b'0'..=b'9') = self.text.get(self.at) {
            value = value
                .checked_mul(10)
                .and_then(|value| value.checked_add(usize::from(digit - b'0')))
                .ok_or_else(|| format!("shape dimension at byte {start} is too large"))?;
            self.at += 1;
        }
        if self.at > start {
            Ok(value)
        } else {
            Err(format!("expected a non-negative integer at byte {start}"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use spillway_core::ErrorKind;

    const PATH: &str = "points.npy";

    fn decoded(bytes: &[u8]) -> NpyArray {
        decode(bytes, Path::new(PATH)).unwrap()
    }

    /// Decodes `bytes`, expecting a refusal that names the file and contains `expected`.
    fn refused(bytes: &[u8], expected: &str) {
        let error = decode(bytes, Path::new(PATH)).unwrap_err();
        assert_eq!(error.kind(), ErrorKind::InvalidArgument, "{error}");
        let Error::InvalidArgument(message) = &error else {
            unreachable!()
        };
        assert!(message.starts_with("points.npy: "), "{message}");
        assert!(message.contains(expected), "{message:?} lacks {expected:?}");
    }

    /// A file with `header` (padded to 64 bytes as NumPy does) and `data_bytes` zero bytes.
    fn file(version: u8, header: &str, data_bytes: usize) -> Vec<u8> {
        let prefix = if version == 1 { 10 } else { 12 };
        let length = (prefix + header.len() + 1).next_multiple_of(64) - prefix;
        let mut bytes = b"\x93NUMPY".to_vec();
        bytes.extend_from_slice(&[version, 0]);
        match version {
            1 => bytes.extend_from_slice(&(length as u16).to_le_bytes()),
            _ => bytes.extend_from_slice(&(length as u32).to_le_bytes()),
        }
        bytes.extend_from_slice(format!("{header:<width$}\n", width = length - 1).as_bytes());
        bytes.resize(bytes.len() + data_bytes, 0);
        bytes
    }

    fn header(descr: &str, fortran_order: &str, shape: &str) -> String {
        format!("{{'descr': '{descr}', 'fortran_order': {fortran_order}, 'shape': {shape}, }}")
    }

    /// A header of `<f8` in C order with `shape`.
    fn shaped(shape: &str) -> String {
        header("<f8", "False", shape)
    }

    /// A header of `descr` in C order with shape `(1, 1)`.
    fn typed(descr: &str) -> String {
        header(descr, "False", "(1, 1)")
    }

    fn array(rows: usize, cols: usize, data: NpyData) -> NpyArray {
        NpyArray { rows, cols, data }
    }

    #[test]
    fn round_trips() {
        let f64s = vec![0.5, -0.0, f64::INFINITY, f64::MIN_POSITIVE / 3.0, 1e300, -7.25];
        let bytes = encode_f64(2, 3, &f64s);
        assert_eq!((bytes.len(), bytes[127]), (128 + 48, b'\n'), "data at byte 128");
        assert_eq!(decoded(&bytes), array(2, 3, NpyData::F64(f64s)));
        let f32s = vec![1.5, -0.0, f32::NEG_INFINITY, 3e-42];
        assert_eq!(decoded(&encode_f32(4, 1, &f32s)), array(4, 1, NpyData::F32(f32s)));
        let i64s = vec![i64::MIN, -1, 0, 1, i64::MAX, 42];
        assert_eq!(decoded(&encode_i64(3, 2, &i64s)), array(3, 2, NpyData::I64(i64s)));
        assert_eq!(
            decoded(&encode_f64(0, 3, &[])),
            array(0, 3, NpyData::F64(Vec::new()))
        );
    }

    #[test]
    #[should_panic(expected = "5 elements do not make a 2 x 3 array")]
    fn encode_checks_the_length() {
        encode_f64(2, 3, &[0.0; 5]);
    }

    #[test]
    fn decodes_a_header_as_numpy_writes_it() {
        // What numpy 2.4 writes for np.arange(6.0).reshape(2, 3): the header
        // padded to 128 bytes, leaving room for the shape to grow.
        let mut bytes = b"\x93NUMPY\x01\x00\x76\x00".to_vec();
        let dict = "{'descr': '<f8', 'fortran_order': False, 'shape': (2, 3), }";
        bytes.extend_from_slice(format!("{dict:<117}\n").as_bytes());
        assert_eq!(bytes.len(), 128);
        for value in 0..6 {
            bytes.extend_from_slice(&f64::from(value).to_le_bytes());
        }
        let expected = NpyData::F64(vec![0.0, 1.0, 2.0, 3.0, 4.0, 5.0]);
        assert_eq!(decoded(&bytes), array(2, 3, expected));
    }

    #[test]
    fn decodes_version_2_and_any_key_order() {
        let bytes = file(2, r#"{"shape":(1,2),"descr":"<i8","fortran_order":False}"#, 16);
        assert_eq!(decoded(&bytes), array(1, 2, NpyData::I64(vec![0, 0])));
        let bytes = file(3, &header("<f4", "False", "(3, 1,)"), 12);
        assert_eq!(decoded(&bytes).data, NpyData::F32(vec![0.0; 3]));
    }

    /// Refuses a version 1.0 file with each header in `cases`, expecting its message.
    fn refused_headers(cases: &[(String, &str)]) {
        for (text, expected) in cases {
            refused(&file(1, text, 8), expected);
        }
    }

    #[test]
    fn refuses_what_is_not_an_npy_file() {
        let past_the_end = "header of 65535 bytes runs past the end of the file (12 bytes)";
        let cases: [(&[u8], &str); 6] = [
            (b"", "bad magic"),
            (b"PK\x03\x04 a zip file", "bad magic"),
            (b"\x93NUMPY\x04\x00\x10\x00", "format version 4.0"),
            (b"\x93NUMPY\x02\x00\x10\x00", "file ends inside the header length"),
            (b"\x93NUMPY\x01\x00\xff\xff{}", past_the_end),
            (b"\x93NUMPY\x02\x00\xff\xff\xff\xff{}", "runs past the end"),
        ];
        for (bytes, expected) in cases {
            refused(bytes, expected);
        }
    }

    #[test]
    fn refuses_malformed_headers() {
        refused_headers(&[
            (
                "{'descr': '<f8', 'shape': (2, 3)}".into(),
                "missing key 'fortran_order'",
            ),
            (
                "{'descr': '<f8', 'descr': '<f8'}".into(),
                "key 'descr' appears twice",
            ),
            (shaped("(1, 1), 'x': 1"), "unexpected key 'x'"),
            (header("<f8", "false", "(1, 1)"), "expected True or False"),
            (shaped("(1)"), "needs a trailing comma"),
            (shaped("(-1, 2)"), "expected a non-negative integer"),
            (shaped("(99999999999999999999999, 1)"), "too large"),
            (shaped("(1, 1)") + " x", "unexpected text after the dict"),
        ]);
    }

    #[test]
    fn refuses_shapes_other_than_two_dimensional() {
        refused_headers(&[
            (
                shaped("(6,)"),
                "expected a 2-D (rows, dims) array, found shape (6,)",
            ),
            (shaped("(1, 2, 3)"), "found shape (1, 2, 3)"),
            (shaped("()"), "found shape ()"),
        ]);
    }

    #[test]
    fn refuses_unsupported_dtypes_and_fortran_order() {
        let accepted = "dtype '<i4' is not supported; expected one of '<f4', '<f8', '<i8'";
        refused_headers(&[
            (typed("<i4"), accepted),
            (typed("|u1"), "dtype '|u1' is not supported"),
            (typed("<c16"), "dtype '<c16' is not supported"),
            (typed("O"), "dtype 'O' is not supported"),
            (typed(">f8"), "dtype '>f8' is big-endian; only little-endian"),
            (header("<f8", "True", "(1, 1)"), "numpy.ascontiguousarray"),
        ]);
    }

    #[test]
    fn refuses_data_of_the_wrong_length() {
        let mut bytes = encode_f64(2, 3, &[1.0; 6]);
        bytes.push(0);
        refused(&bytes, "shape (2, 3) of '<f8' needs 48 data bytes, found 49");
        bytes.truncate(bytes.len() - 2);
        refused(&bytes, "needs 48 data bytes, found 47");
        let absurd = shaped("(4611686018427387904, 4611686018427387904)");
        refused_headers(&[
            (absurd, "needs more than usize::MAX data bytes, found 8"),
            (shaped("(1000000000, 1000)"), "needs 8000000000000 data bytes"),
        ]);
    }

    #[test]
    fn read_names_the_file() {
        let directory = tempfile::tempdir().unwrap();
        let path = directory.path().join("queries.npy");
        let error = read(&path).unwrap_err();
        assert_eq!(error.kind(), ErrorKind::Io);
        assert!(error.to_string().contains("queries.npy"), "{error}");
        std::fs::write(&path, encode_f32(1, 2, &[1.0, 2.0])).unwrap();
        assert_eq!(read(&path).unwrap().data, NpyData::F32(vec![1.0, 2.0]));
        std::fs::write(&path, b"not npy").unwrap();
        let message = read(&path).unwrap_err().to_string();
        assert!(
            message.contains(&format!("{}: not a NumPy .npy file", path.display())),
            "{message}"
        );
    }

    /// What any successful decode guarantees.
    fn check_consistent(array: &NpyArray) {
        let count = match &array.data {
            NpyData::F32(data) => data.len(),
            NpyData::F64(data) => data.len(),
            NpyData::I64(data) => data.len(),
        };
        assert_eq!(Some(count), array.rows.checked_mul(array.cols));
    }

    proptest! {
        #[test]
        fn decoding_arbitrary_bytes_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            if let Ok(array) = decode(&bytes, Path::new(PATH)) {
                check_consistent(&array);
            }
        }

        #[test]
        fn decoding_an_arbitrary_header_never_panics(text in "[{}()', :0-9a-zA-Z<>_\"]{0,80}", version in 1u8..4) {
            let bytes = file(version, &text, 16);
            if let Ok(array) = decode(&bytes, Path::new(PATH)) {
                check_consistent(&array);
            }
        }

        #[test]
        fn decoding_a_mutated_file_never_panics(index in any::<prop::sample::Index>(), value in any::<u8>()) {
            let mut bytes = encode_i64(3, 2, &[1, 2, 3, 4, 5, 6]);
            let index = index.index(bytes.len());
            bytes[index] = value;
            match decode(&bytes, Path::new(PATH)) {
                Ok(array) => check_consistent(&array),
                Err(error) => prop_assert_eq!(error.kind(), ErrorKind::InvalidArgument),
            }
        }
    }
}
