//! The points a tree is built from: a borrowed row-major matrix of f32 or
//! f64 coordinates, checked before anything is built.

use spillway_core::{ensure, Result};

/// The largest magnitude a coordinate may have: squares and sums of squares
/// of differences stay far from f64's overflow whatever the dimension.
pub const COORDINATE_MAX: f64 = 1e150;

/// The most dimensions a point may have.
pub const DIMS_MAX: usize = 1 << 16;

/// A coordinate type the index stores: widened to f64 exactly for every
/// distance.
pub trait Coordinate: Copy + Send + Sync + 'static + std::fmt::Debug {
    /// The coordinate as f64 (exact for f32 and f64).
    fn to_f64(self) -> f64;
    /// The dtype code written in saved trees (1: f32, 2: f64).
    const DTYPE: u8;
}

impl Coordinate for f32 {
    fn to_f64(self) -> f64 {
        f64::from(self)
    }
    const DTYPE: u8 = 1;
}

impl Coordinate for f64 {
    fn to_f64(self) -> f64 {
        self
    }
    const DTYPE: u8 = 2;
}

/// A row-major matrix of points, `dims` coordinates each.
#[derive(Debug, Clone, Copy)]
pub enum Points<'a> {
    /// Single-precision coordinates (stored as given; distances in f64).
    F32 {
        /// `rows × dims` coordinates, row by row.
        data: &'a [f32],
        /// Coordinates per point.
        dims: usize,
    },
    /// Double-precision coordinates.
    F64 {
        /// `rows × dims` coordinates, row by row.
        data: &'a [f64],
        /// Coordinates per point.
        dims: usize,
    },
}

impl<'a> Points<'a> {
    /// f32 points, checked: at least one, `dims` in 1..=[`DIMS_MAX`],
    /// every coordinate finite and within [`COORDINATE_MAX`].
    pub fn f32(data: &'a [f32], dims: usize) -> Result<Points<'a>> {
        check_matrix(data, dims, "points")?;
        Ok(Points::F32 { data, dims })
    }

    /// f64 points, checked as [`Points::f32`].
    pub fn f64(data: &'a [f64], dims: usize) -> Result<Points<'a>> {
        check_matrix(data, dims, "points")?;
        Ok(Points::F64 { data, dims })
    }

    /// Coordinates per point.
    pub fn dims(&self) -> usize {
        match *self {
            Points::F32 { dims, .. } | Points::F64 { dims, .. } => dims,
        }
    }

    /// The number of points.
    pub fn rows(&self) -> usize {
        match *self {
            Points::F32 { data, dims } => data.len() / dims,
            Points::F64 { data, dims } => data.len() / dims,
        }
    }

    /// Coordinate `col` of point `row`, widened to f64.
    pub fn get(&self, row: usize, col: usize) -> f64 {
        match *self {
            Points::F32 { data, dims } => f64::from(data[row * dims + col]),
            Points::F64 { data, dims } => data[row * dims + col],
        }
    }
}

/// Checks a row-major matrix: non-empty, whole rows, finite bounded values;
/// the error names `what[row, col]`.
pub fn check_matrix<T: Coordinate>(data: &[T], dims: usize, what: &str) -> Result<()> {
    ensure!(
        (1..=DIMS_MAX).contains(&dims),
        InvalidArgument,
        "{what} must have 1 to {DIMS_MAX} dimensions, got {dims}"
    );
    ensure!(
        !data.is_empty(),
        InvalidArgument,
        "{what} are empty: at least one point is needed"
    );
    ensure!(
        data.len().is_multiple_of(dims),
        InvalidArgument,
        "{what} hold {} coordinates, not a whole number of {dims}-dimensional points",
        data.len()
    );
    ensure!(
        data.len() / dims < u32::MAX as usize,
        InvalidArgument,
        "{what} hold {} points, more than the {} an index may hold",
        data.len() / dims,
        u32::MAX - 1
    );
    if let Some(at) = data.iter().position(|x| !acceptable(x.to_f64())) {
        let value = data[at].to_f64();
        let problem = if value.is_nan() {
            "is NaN".to_string()
        } else if value.is_infinite() {
            "is infinite".to_string()
        } else {
            format!("is {value:e}, beyond the largest magnitude allowed ({COORDINATE_MAX:e})")
        };
        spillway_core::bail!(InvalidArgument, "{what}[{}, {}] {problem}", at / dims, at % dims);
    }
    Ok(())
}

/// A finite coordinate within [`COORDINATE_MAX`].
fn acceptable(x: f64) -> bool {
    x.is_finite() && x.abs() <= COORDINATE_MAX
}
