//! Reports and statistics cross to Python as JSON text of the engine's own
//! types (their `Serialize`), which `spillway` reads with `json.loads`:
//! the same fields, names and shapes as the command line's `--json`.

use serde::Serialize;
use spillway_core::{Error, Result};

/// `value` as JSON text.
pub fn to_json(value: &impl Serialize) -> Result<String> {
    serde_json::to_string(value)
        .map_err(|error| Error::Internal(format!("a report does not serialize: {error}")))
}
