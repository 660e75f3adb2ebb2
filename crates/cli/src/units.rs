//! Values on the command line: numbers with units, and values the
//! libraries parse from text (their `FromStr`).

/// Parses a count or size with an optional binary suffix: `1000`, `64K`,
/// `1M` (2^20), `1G`, `2T`; `KiB`/`KB`-style spellings are accepted too.
pub fn parse_count(text: &str) -> Result<u64, String> {
    let trimmed = text.trim();
    let digits_end = trimmed
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(trimmed.len());
    let (digits, suffix) = trimmed.split_at(digits_end);
    if digits.is_empty() {
        return Err(format!(
            "expected a whole number with an optional K/M/G/T suffix, got {text:?}"
        ));
    }
    let shift = match suffix.to_ascii_uppercase().as_str() {
        "" | "B" => 0,
        "K" | "KB" | "KIB" => 10,
        "M" | "MB" | "MIB" => 20,
        "G" | "GB" | "GIB" => 30,
        "T" | "TB" | "TIB" => 40,
        _ => {
            return Err(format!(
                "unknown suffix {suffix:?} in {text:?}; use K, M, G or T (binary units)"
            ))
        }
    };
    let value: u64 = digits.parse().map_err(|_| format!("{text:?} is too large"))?;
    value
        .checked_mul(1u64 << shift)
        .ok_or_else(|| format!("{text:?} is too large"))
}

/// A value a library parses from text (a preset, a mix, a format).
pub fn parse_text<T: std::str::FromStr<Err = spillway_core::Error>>(text: &str) -> Result<T, String> {
    text.parse()
        .map_err(|error: spillway_core::Error| strip_kind(&error))
}

/// A library's message without the "invalid argument: " prefix, which
/// clap's own "invalid value" wording (or the flag put in front) already says.
pub fn strip_kind(error: &spillway_core::Error) -> String {
    let message = error.to_string();
    message
        .strip_prefix("invalid argument: ")
        .map_or(message.clone(), str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_take_binary_suffixes() {
        assert_eq!(parse_count("1000"), Ok(1000));
        assert_eq!(parse_count("64K"), Ok(64 << 10));
        assert_eq!(parse_count("1m"), Ok(1 << 20));
        assert_eq!(parse_count("1G"), Ok(1 << 30));
        assert_eq!(parse_count("2GiB"), Ok(2 << 30));
        assert_eq!(parse_count("3T"), Ok(3 << 40));
        assert!(parse_count("1.5G").unwrap_err().contains("unknown suffix"));
        assert!(parse_count("G").unwrap_err().contains("whole number"));
        assert!(parse_count("-1").unwrap_err().contains("whole number"));
        assert!(parse_count("20000000T").unwrap_err().contains("too large"));
    }
}
