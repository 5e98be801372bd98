//! Where a change feed read starts: `since` as a sequence number or as a time (an RFC 3339 timestamp, or an age such as `30m`, `12h`, `7d`), and the summary of what changed after a time.

use serde::de::Visitor;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::parse::InvalidParams;
use super::state::Kind;

/// The longest `since` text: an RFC 3339 timestamp with nanoseconds and an offset fits.
pub const MAX_SINCE_BYTES: usize = 64;
/// The oldest age `since` may name: ten years (the feed keeps 7 days; an age past it says
/// `truncated`, an age past this bound is a mistake).
pub const MAX_SINCE_AGE_MS: i64 = 3650 * 24 * 3600 * 1000;

/// What `since` accepts, for every error that refuses one.
pub const SINCE_FORMS: &str = "`since` is a sequence number (0 or more), an RFC 3339 time such as \
     2026-12-04T10:00:00Z, or an age such as 90s, 30m, 12h or 7d (at most 3650d)";

/// `since`: after a sequence number, or from a time on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Since {
    /// The feed after this sequence number.
    Sequence(i64),
    /// The feed from this time on: the text as the client wrote it, checked when parsed.
    Time(String),
}

impl Since {
    /// A command line's `--since`: digits are a sequence number, anything else a time.
    pub fn from_command_line(text: &str) -> Result<Since, InvalidParams> {
        let since = match !text.is_empty() && text.bytes().all(|byte| byte.is_ascii_digit()) {
            true => Since::Sequence(
                text.parse()
                    .map_err(|_| InvalidParams(SINCE_FORMS.to_string()))?,
            ),
            false => Since::Time(text.to_string()),
        };
        since.check(0)?;
        Ok(since)
    }

    /// Where the read starts, checked: a sequence number of 0 or more, or a time resolved
    /// against `now_ms` (ms since the epoch).
    pub fn check(&self, now_ms: i64) -> Result<FeedStart, InvalidParams> {
        match self {
            Since::Sequence(sequence) if *sequence < 0 => Err(InvalidParams(SINCE_FORMS.into())),
            Since::Sequence(sequence) => Ok(FeedStart::After(*sequence)),
            Since::Time(text) => feed_time(text, now_ms).map(FeedStart::AtOrAfterMs),
        }
    }
}

/// Where a feed read starts once `since` is checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FeedStart {
    /// The entries with a greater sequence number.
    After(i64),
    /// The entries written at or after this time (ms since the epoch).
    AtOrAfterMs(i64),
}

/// The time a `since` text names, in ms since the epoch: an RFC 3339 timestamp, or `now_ms`
/// minus an age of whole seconds, minutes, hours or days. Bounded: at most `MAX_SINCE_BYTES`
/// of text, an age of at most `MAX_SINCE_AGE_MS`.
pub fn feed_time(text: &str, now_ms: i64) -> Result<i64, InvalidParams> {
    let refuse = || InvalidParams(format!("{SINCE_FORMS}, not {:?}", shown(text)));
    if text.len() > MAX_SINCE_BYTES {
        return Err(refuse());
    }
    if let Some(age_ms) = age_ms(text) {
        return match age_ms <= MAX_SINCE_AGE_MS {
            true => Ok(now_ms.saturating_sub(age_ms)),
            false => Err(refuse()),
        };
    }
    match text.parse::<jiff::Timestamp>() {
        Ok(timestamp) => Ok(timestamp.as_millisecond()),
        Err(_) => Err(refuse()),
    }
}

/// An age's length in ms: 1 to 7 digits and one unit of `s`, `m`, `h`, `d`.
fn age_ms(text: &str) -> Option<i64> {
    let unit = text.chars().last()?;
    let digits = &text[..text.len() - unit.len_utf8()];
    if digits.is_empty() || digits.len() > 7 || !digits.bytes().all(|byte| byte.is_ascii_digit()) {
        return None;
    }
    let count: i64 = digits.parse().ok()?;
    let unit_ms = match unit {
        's' => 1_000,
        'm' => 60_000,
        'h' => 3_600_000,
        'd' => 86_400_000,
        _ => return None,
    };
    count.checked_mul(unit_ms)
}

/// A refused text as an error shows it: printable characters only, cut short.
fn shown(text: &str) -> String {
    text.chars()
        .filter(|character| !character.is_control())
        .take(MAX_SINCE_BYTES)
        .collect()
}

impl Serialize for Since {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Since::Sequence(sequence) => serializer.serialize_i64(*sequence),
            Since::Time(text) => serializer.serialize_str(text),
        }
    }
}

impl<'de> Deserialize<'de> for Since {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Since, D::Error> {
        struct SinceVisitor;
        impl Visitor<'_> for SinceVisitor {
            type Value = Since;
            fn expecting(&self, formatter: &mut std::fmt::Formatter) -> std::fmt::Result {
                formatter.write_str(SINCE_FORMS)
            }
            fn visit_i64<E: serde::de::Error>(self, value: i64) -> Result<Since, E> {
                Ok(Since::Sequence(value))
            }
            fn visit_u64<E: serde::de::Error>(self, value: u64) -> Result<Since, E> {
                i64::try_from(value)
                    .map(Since::Sequence)
                    .map_err(|_| E::custom(SINCE_FORMS))
            }
            fn visit_str<E: serde::de::Error>(self, value: &str) -> Result<Since, E> {
                // Checked here, so a wrong text is refused as it is parsed, naming the field.
                feed_time(value, 0).map_err(|error| E::custom(error.0))?;
                Ok(Since::Time(value.to_string()))
            }
        }
        deserializer.deserialize_any(SinceVisitor)
    }
}

/// What changed after a `since` time, within the client's view: per server and entry kind,
/// and over all of them. Counts the feed's entries from the time up to the answer's
/// `latestSeq`, every page of them, not only the first.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ChangesSummary {
    /// The time `since` named (ms since the epoch).
    pub since_ms: i64,
    /// The feed's first entry at or after that time is the one after this sequence number:
    /// `since` as a number reads the same window.
    pub after_seq: i64,
    pub total: ChangeCounts,
    /// One row per (server, entry kind) with any change, ordered by server and kind.
    pub servers: Vec<ServerChangeCounts>,
}

/// Changes counted by kind of change.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ChangeCounts {
    pub added: u64,
    pub removed: u64,
    pub changed: u64,
    /// Changes of large swaps (a first load past its first 1,000) the feed counted without
    /// naming them (`truncated` entries' `count`).
    pub unlisted: u64,
}

impl ChangeCounts {
    pub fn all(&self) -> u64 {
        self.added + self.removed + self.changed + self.unlisted
    }

    fn add(&mut self, kind: super::ChangeKind, count: u64) {
        use super::ChangeKind;
        match kind {
            ChangeKind::Added => self.added += count,
            ChangeKind::Removed => self.removed += count,
            ChangeKind::Changed => self.changed += count,
            ChangeKind::Truncated => self.unlisted += count,
        }
    }
}

impl ChangesSummary {
    /// The summary of `counts`: (server, entry kind, kind of change, how many), in any order
    /// and any number of times each.
    pub fn tallied(
        since_ms: i64,
        after_seq: i64,
        counts: impl IntoIterator<Item = (String, Kind, super::ChangeKind, u64)>,
    ) -> ChangesSummary {
        let mut per_server: std::collections::BTreeMap<(String, Kind), ChangeCounts> =
            std::collections::BTreeMap::new();
        let mut total = ChangeCounts::default();
        for (server, entry_kind, kind, count) in counts {
            per_server
                .entry((server, entry_kind))
                .or_default()
                .add(kind, count);
            total.add(kind, count);
        }
        ChangesSummary {
            since_ms,
            after_seq,
            total,
            servers: per_server
                .into_iter()
                .map(|((server, entry_kind), counts)| ServerChangeCounts {
                    server,
                    entry_kind,
                    counts,
                })
                .collect(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ServerChangeCounts {
    pub server: String,
    pub entry_kind: Kind,
    #[serde(flatten)]
    pub counts: ChangeCounts,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{parse_params, ChangesParams};
    use serde_json::json;

    const NOW: i64 = 1_800_000_000_000;

    #[test]
    fn since_takes_a_sequence_a_timestamp_or_a_bounded_age() {
        let check = |value: serde_json::Value| {
            parse_params::<ChangesParams>(json!({ "since": value }))
                .and_then(|params| params.since.expect("since").check(NOW))
        };
        assert_eq!(check(json!(42)), Ok(FeedStart::After(42)));
        assert_eq!(
            check(json!("1d")),
            Ok(FeedStart::AtOrAfterMs(NOW - 86_400_000))
        );
        assert_eq!(
            check(json!("30m")),
            Ok(FeedStart::AtOrAfterMs(NOW - 1_800_000))
        );
        assert_eq!(
            check(json!("2026-12-04T10:00:00Z")),
            Ok(FeedStart::AtOrAfterMs(1_796_378_400_000))
        );
        assert_eq!(
            check(json!("2026-12-04T12:00:00+02:00")),
            Ok(FeedStart::AtOrAfterMs(1_796_378_400_000))
        );
        assert_eq!(
            check(json!("3650d")),
            Ok(FeedStart::AtOrAfterMs(NOW - MAX_SINCE_AGE_MS))
        );
        for wrong in [
            json!("3651d"),
            json!("yesterday"),
            json!("1w"),
            json!("-1d"),
            json!("d"),
            json!("99999999d"),
            json!("2026-12-04"),
            json!("x".repeat(10_000)),
            json!(-1),
            json!(1.5),
            json!(true),
        ] {
            let error = check(wrong.clone()).expect_err("refused");
            assert!(error.0.contains("`since`"), "{wrong}: {error}");
            assert!(error.0.contains("RFC 3339"), "{wrong}: {error}");
            assert!(error.0.len() < 400, "{wrong}: {error}");
        }
    }

    #[test]
    fn a_command_line_since_is_digits_for_a_sequence_and_text_for_a_time() {
        assert_eq!(Since::from_command_line("17"), Ok(Since::Sequence(17)));
        assert_eq!(
            Since::from_command_line("12h"),
            Ok(Since::Time("12h".into()))
        );
        assert!(Since::from_command_line("soon").is_err());
        assert!(Since::from_command_line("").is_err());
    }
}
