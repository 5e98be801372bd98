//! The value syntaxes of `daemon.toml` (durations, sizes, counts), and readers of optional
//! spanned values that fall back to a default and report errors at the value's place.

use std::time::Duration;

use toml::Spanned;

use super::source::SourceFile;
use super::ConfigError;

/// What turns pings (and other optional timers) off.
const OFF: &str = "off";

/// Parses durations such as `500ms`, `30s`, `15m`, `1h30m` and `2d`.
pub(crate) fn parse_duration(text: &str) -> Result<Duration, String> {
    let invalid = || format!("`{text}` is not a duration (examples: 500ms, 30s, 15m, 1h30m)");
    let trimmed = text.trim();
    if trimmed.is_empty() {
        return Err(invalid());
    }
    let mut total = Duration::ZERO;
    let mut rest = trimmed;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        if digits == 0 {
            return Err(invalid());
        }
        let number: u64 = rest[..digits].parse().map_err(|_| invalid())?;
        rest = &rest[digits..];
        let unit_length = rest
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(rest.len());
        let unit = rest[..unit_length].trim();
        rest = &rest[unit_length..];
        let part = match unit {
            "ms" => Duration::from_millis(number),
            "s" => Duration::from_secs(number),
            "m" => Duration::from_secs(number.saturating_mul(60)),
            "h" => Duration::from_secs(number.saturating_mul(3600)),
            "d" => Duration::from_secs(number.saturating_mul(86_400)),
            _ => return Err(invalid()),
        };
        total = total.saturating_add(part);
    }
    if total.is_zero() {
        return Err(format!("`{text}` must be longer than zero"));
    }
    Ok(total)
}

/// Parses sizes such as `512KiB`, `10MiB`, `1GB` and `4096` (bytes).
pub(crate) fn parse_size(text: &str) -> Result<u64, String> {
    let invalid = || format!("`{text}` is not a size (examples: 4096, 512KiB, 10MiB, 1GB)");
    let trimmed = text.trim();
    let digits = trimmed
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(trimmed.len());
    if digits == 0 {
        return Err(invalid());
    }
    let number: u64 = trimmed[..digits].parse().map_err(|_| invalid())?;
    let multiplier: u64 = match trimmed[digits..].trim() {
        "" | "B" => 1,
        "KB" | "kB" => 1_000,
        "KiB" => 1 << 10,
        "MB" => 1_000_000,
        "MiB" => 1 << 20,
        "GB" => 1_000_000_000,
        "GiB" => 1 << 30,
        _ => return Err(invalid()),
    };
    match number.checked_mul(multiplier) {
        Some(0) => Err(format!(
            "`{text}` must be larger than zero (leave the key out to keep the cache off)"
        )),
        Some(bytes) => Ok(bytes),
        None => Err(invalid()),
    }
}

/// A duration at `key`, or `default` when the key is left out.
pub(super) fn duration(
    source: &SourceFile,
    value: &Option<Spanned<String>>,
    key: &str,
    default: Duration,
) -> Result<Duration, ConfigError> {
    match value {
        None => Ok(default),
        Some(spanned) => parse_duration(spanned.get_ref())
            .map_err(|message| source.error(&spanned.span(), key, message)),
    }
}

/// Like `duration`, but `"off"` means none.
pub(super) fn optional_duration(
    source: &SourceFile,
    value: &Option<Spanned<String>>,
    key: &str,
    default: Option<Duration>,
) -> Result<Option<Duration>, ConfigError> {
    match value {
        Some(spanned) if spanned.get_ref().trim() == OFF => Ok(None),
        Some(_) => duration(source, value, key, Duration::ZERO).map(Some),
        None => Ok(default),
    }
}

/// A whole number of at least 1 at `key`, or `default` when the key is left out.
pub(super) fn count(
    source: &SourceFile,
    value: &Option<Spanned<i64>>,
    key: &str,
    default: u64,
) -> Result<u64, ConfigError> {
    match value {
        None => Ok(default),
        Some(spanned) => u64::try_from(*spanned.get_ref())
            .ok()
            .filter(|count| *count >= 1)
            .ok_or_else(|| {
                source.error(&spanned.span(), key, "must be a whole number of at least 1")
            }),
    }
}

/// A count at `key` from 1 to `ceiling`; left out means `default`.
pub(super) fn count_at_most(
    source: &SourceFile,
    value: &Option<Spanned<i64>>,
    key: &str,
    default: u64,
    ceiling: u64,
) -> Result<u64, ConfigError> {
    let count = count(source, value, key, default)?;
    match value {
        Some(spanned) if count > ceiling => {
            Err(source.error(&spanned.span(), key, format!("must be at most {ceiling}")))
        }
        _ => Ok(count),
    }
}

/// A size at `key`; left out means none.
pub(super) fn optional_size(
    source: &SourceFile,
    value: &Option<Spanned<String>>,
    key: &str,
) -> Result<Option<u64>, ConfigError> {
    value
        .as_ref()
        .map(|size| {
            parse_size(size.get_ref()).map_err(|message| source.error(&size.span(), key, message))
        })
        .transpose()
}
