//! Durations in reports, written as seconds (a float), the unit every
//! report and table of Spillway uses: `#[serde(with =
//! "spillway_core::seconds")]` on a `Duration` field.
//!
//! ```
//! use std::time::Duration;
//! #[derive(serde::Serialize, serde::Deserialize)]
//! struct Report {
//!     #[serde(with = "spillway_core::seconds")]
//!     elapsed: Duration,
//! }
//! let json = serde_json::to_string(&Report { elapsed: Duration::from_millis(1500) }).unwrap();
//! assert_eq!(json, r#"{"elapsed":1.5}"#);
//! let back: Report = serde_json::from_str(&json).unwrap();
//! assert_eq!(back.elapsed, Duration::from_millis(1500));
//! ```

use std::time::Duration;

use serde::{Deserialize, Deserializer, Serializer};

/// Writes `duration` as seconds.
pub fn serialize<S: Serializer>(duration: &Duration, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_f64(duration.as_secs_f64())
}

/// Reads seconds back into a duration; a negative, infinite or NaN number
/// is an error.
pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Duration, D::Error> {
    let seconds = f64::deserialize(deserializer)?;
    Duration::try_from_secs_f64(seconds).map_err(serde::de::Error::custom)
}
