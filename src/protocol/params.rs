//! The params of every socket method, deserialized by serde (a wrong type or a missing field
//! is an error naming the field) and checked against the limits in one place.

use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize};

use super::cursor::decode_cursor;
use super::parse::InvalidParams;
use super::since::{FeedStart, Since};
use super::Kind;
use super::{
    DEFAULT_CHANGES_LIMIT, MAX_CHANGES_LIMIT, MAX_CURSOR_BYTES, MAX_HIGHLIGHT_BYTES, MAX_KEY_BYTES,
    MAX_LIST_CURSOR_BYTES, MAX_NAME_BYTES, MAX_URI_BYTES,
};

// Every string a client sends is bounded as it is parsed, so the error names the field
// (`-32602`) and nothing downstream ever sees an oversized value.

fn check_length<E: serde::de::Error>(text: &str, max: usize) -> Result<(), E> {
    match text.len() <= max {
        true => Ok(()),
        false => Err(E::custom(format!(
            "{} bytes is longer than the limit of {max} bytes",
            text.len()
        ))),
    }
}

pub(super) fn bounded<'de, D: Deserializer<'de>, const MAX: usize>(
    deserializer: D,
) -> Result<String, D::Error> {
    let text = String::deserialize(deserializer)?;
    check_length(&text, MAX)?;
    Ok(text)
}

pub(super) fn bounded_option<'de, D: Deserializer<'de>, const MAX: usize>(
    deserializer: D,
) -> Result<Option<String>, D::Error> {
    let text = Option::<String>::deserialize(deserializer)?;
    if let Some(text) = &text {
        check_length(text, MAX)?;
    }
    Ok(text)
}

fn bounded_markers<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<(String, String)>, D::Error> {
    let markers = Option::<(String, String)>::deserialize(deserializer)?;
    if let Some((open, close)) = &markers {
        if open.len() > MAX_HIGHLIGHT_BYTES || close.len() > MAX_HIGHLIGHT_BYTES {
            return Err(D::Error::custom(format!(
                "each marker may be at most {MAX_HIGHLIGHT_BYTES} bytes"
            )));
        }
    }
    Ok(markers)
}

/// Params of methods that take none (`ping`, `catalog/status`); whatever is sent is ignored.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NoParams {}

/// `initialize`: only the version matters to the mirror.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InitializeParams {
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "bounded_option::<_, MAX_NAME_BYTES>"
    )]
    pub protocol_version: Option<String>,
}

/// `resources/list`, `resources/templates/list`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListParams {
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "bounded_option::<_, MAX_LIST_CURSOR_BYTES>"
    )]
    pub cursor: Option<String>,
}

impl ListParams {
    /// The key the page starts after.
    pub fn after(&self) -> Result<Option<String>, InvalidParams> {
        match &self.cursor {
            None => Ok(None),
            Some(cursor) => decode_cursor(cursor)
                .map(Some)
                .ok_or_else(|| InvalidParams("invalid cursor".into())),
        }
    }
}

/// `resources/read`, `catalog/resource`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UriParams {
    #[serde(deserialize_with = "bounded::<_, MAX_URI_BYTES>")]
    pub uri: String,
}

/// `catalog/search`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SearchParams {
    /// Plain words (only the first `MAX_QUERY_BYTES` are used), or FTS5 syntax with `raw`
    /// (refused past `MAX_QUERY_BYTES`).
    pub query: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u64>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "bounded_option::<_, MAX_NAME_BYTES>"
    )]
    pub server: Option<String>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "bounded_option::<_, MAX_NAME_BYTES>"
    )]
    pub mime_type: Option<String>,
    /// Take `query` as FTS5 syntax.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub raw: Option<bool>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "bounded_option::<_, MAX_CURSOR_BYTES>"
    )]
    pub cursor: Option<String>,
    /// The markers put around matched words in snippets, each at most `MAX_HIGHLIGHT_BYTES`.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "bounded_markers"
    )]
    pub highlight: Option<(String, String)>,
    /// `resource`, `template`, `tool`, `prompt`: the kinds searched; every kind when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kinds: Option<Vec<Kind>>,
    /// `lexical`, `semantic` or `hybrid`; `hybrid` when absent and a model is configured,
    /// else `lexical`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<super::SearchMode>,
    /// Only entries carrying one of these URI flags (`none`: carrying no flag), as their
    /// `_meta["io.mcp-mirror/uri"]` says; every entry when absent. A set: a client repeating
    /// values costs the parse, never a longer check per hit (at most six values are kept).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uri_flags: Option<std::collections::BTreeSet<super::uri_flags::UriFlagFilter>>,
}

impl SearchParams {
    /// Whether this search goes beyond resources alone, so it takes `into_kinds_request`:
    /// `kinds` names anything but resources only, or is absent (every kind), except for a raw
    /// query, whose FTS5 syntax may name the resource index's columns, or with `mimeType`,
    /// which keeps to resources as before.
    pub fn searches_entries(&self) -> bool {
        match &self.kinds {
            None => !self.raw.unwrap_or(false) && self.mime_type.is_none(),
            Some(kinds) => kinds.iter().any(|kind| *kind != Kind::Resource),
        }
    }
}

/// A whole number of at least 1, capped at `max`; `default` when absent.
pub fn page_limit(
    requested: Option<u64>,
    default: usize,
    max: usize,
) -> Result<usize, InvalidParams> {
    match requested {
        None => Ok(default),
        Some(0) => Err(InvalidParams(
            "`limit` must be a whole number of at least 1".into(),
        )),
        Some(limit) => Ok(limit.min(max as u64) as usize),
    }
}

/// `catalog/changes`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChangesParams {
    /// After a sequence number, or from a time on (an RFC 3339 timestamp or an age such as
    /// `1d`); the whole kept feed when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<Since>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u64>,
    /// Only changes of these entry kinds (`resource`, `tool`, `prompt`); every kind when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kinds: Option<Vec<Kind>>,
}

impl ChangesParams {
    /// After a sequence number (a follower's cursor), the usual params.
    pub fn after(since: i64, limit: Option<u64>) -> ChangesParams {
        ChangesParams {
            since: Some(Since::Sequence(since)),
            limit,
            kinds: None,
        }
    }

    /// Where the read starts (a time resolved against `now_ms`) and the page size, checked
    /// and capped.
    pub fn checked(&self, now_ms: i64) -> Result<(Option<FeedStart>, usize), InvalidParams> {
        let start = match &self.since {
            None => None,
            Some(since) => Some(since.check(now_ms)?),
        };
        Ok((
            start,
            page_limit(self.limit, DEFAULT_CHANGES_LIMIT, MAX_CHANGES_LIMIT)?,
        ))
    }
}

/// `catalog/entries`: the kind (`resource` or `template`) and up to `MAX_KEYS` keys.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeysParams {
    pub kind: Kind,
    pub keys: Vec<String>,
}

/// The most keys one `catalog/entries` request may ask for.
pub const MAX_KEYS: usize = 1_000;

impl KeysParams {
    /// The keys, checked: at most `MAX_KEYS`, each within `MAX_KEY_BYTES` (a URI, a URI
    /// template, or a tool's or prompt's `<server>/<name>`).
    pub fn checked(self) -> Result<(Kind, Vec<String>), InvalidParams> {
        if self.keys.len() > MAX_KEYS {
            return Err(InvalidParams(format!(
                "keys: at most {MAX_KEYS} keys per request"
            )));
        }
        if self.keys.iter().any(|key| key.len() > MAX_KEY_BYTES) {
            return Err(InvalidParams(format!(
                "keys: a key is longer than {MAX_KEY_BYTES} bytes"
            )));
        }
        Ok((self.kind, self.keys))
    }
}

/// `catalog/watch`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WatchParams {
    /// After a sequence number, or from a time on (an RFC 3339 timestamp or an age such as
    /// `1h`), as `catalog/changes` takes it; from now on when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<Since>,
}

impl WatchParams {
    /// Where the watch starts, checked (a time resolved against `now_ms`); now when `None`.
    pub fn checked_since(&self, now_ms: i64) -> Result<Option<FeedStart>, InvalidParams> {
        self.since
            .as_ref()
            .map(|since| since.check(now_ms))
            .transpose()
    }
}

/// `catalog/refresh`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RefreshParams {
    /// One server; all when absent.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "bounded_option::<_, MAX_NAME_BYTES>"
    )]
    pub server: Option<String>,
    /// Answer after the walk committed (or failed) instead of when it is queued.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait: Option<bool>,
}

/// `catalog/list`: one server's own snapshot.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServerListParams {
    pub server: String,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "bounded_option::<_, MAX_LIST_CURSOR_BYTES>"
    )]
    pub cursor: Option<String>,
    /// Entries per page, at most `PAGE_SIZE` (the default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u64>,
}

impl ServerListParams {
    /// The URI the page starts after, and the page size.
    pub fn checked(&self) -> Result<(Option<String>, usize), InvalidParams> {
        let after = ListParams {
            cursor: self.cursor.clone(),
        }
        .after()?;
        Ok((
            after,
            page_limit(self.limit, super::PAGE_SIZE, super::PAGE_SIZE)?,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{parse_params, MAX_QUERY_BYTES};
    use serde_json::json;

    #[test]
    fn errors_name_the_field() {
        let missing = parse_params::<UriParams>(json!({})).expect_err("missing");
        assert!(missing.0.contains("`uri`"), "{missing}");
        let wrong = parse_params::<SearchParams>(json!({"query": "a", "limit": "ten"}))
            .expect_err("wrong type");
        assert!(wrong.0.starts_with("`limit`:"), "{wrong}");
        let markers = parse_params::<SearchParams>(json!({"query": "a", "highlight": ["<"]}))
            .expect_err("one marker");
        assert!(markers.0.starts_with("`highlight`"), "{markers}");
        let zero = parse_params::<SearchParams>(json!({"query": "a", "limit": 0}))
            .expect("parses")
            .into_request()
            .expect_err("zero");
        assert!(zero.0.contains("`limit`"), "{zero}");
        let negative = parse_params::<WatchParams>(json!({"since": -1}))
            .expect("parses")
            .checked_since(0)
            .expect_err("negative");
        assert!(negative.0.contains("`since`"), "{negative}");
    }

    #[test]
    fn every_client_string_is_bounded_and_the_error_names_it() {
        let marker = "x".repeat(400_000);
        let huge = parse_params::<SearchParams>(
            json!({"query": "a", "highlight": [marker, "]"], "limit": 1000}),
        )
        .expect_err("huge marker");
        assert!(huge.0.starts_with("`highlight`"), "{huge}");
        assert!(huge.0.len() < 200, "{huge}");
        let fits = parse_params::<SearchParams>(
            json!({"query": "a", "highlight": ["x".repeat(MAX_HIGHLIGHT_BYTES), "]"]}),
        );
        assert!(fits.is_ok());
        let cases = [
            json!({"query": "a", "cursor": "c".repeat(MAX_CURSOR_BYTES + 1)}),
            json!({"query": "a", "server": "s".repeat(MAX_NAME_BYTES + 1)}),
            json!({"query": "a", "mimeType": "m".repeat(MAX_NAME_BYTES + 1)}),
        ];
        for (params, field) in cases.into_iter().zip(["cursor", "server", "mimeType"]) {
            let error = parse_params::<SearchParams>(params).expect_err(field);
            assert!(error.0.starts_with(&format!("`{field}`")), "{error}");
        }
        let long = "q ".repeat(MAX_QUERY_BYTES);
        let raw = parse_params::<SearchParams>(json!({"query": long, "raw": true}))
            .expect("parses")
            .into_request()
            .expect_err("a long raw query");
        assert!(raw.0.starts_with("`query`"), "{raw}");
        let plain = parse_params::<SearchParams>(json!({"query": long})).expect("parses");
        let note = plain
            .cut_words_note()
            .expect("a note of the words left out");
        assert!(note.contains("its last 2048 words"), "{note}");
        assert!(note.contains("from \"q q q q q\" …"), "{note}");
        let short = parse_params::<SearchParams>(json!({"query": "q q"})).expect("parses");
        assert_eq!(short.cut_words_note(), None);
        let plain = plain.into_request().expect("a long plain query is cut");
        assert_eq!(plain.query.len(), MAX_QUERY_BYTES);
        let uri = parse_params::<UriParams>(json!({"uri": "u".repeat(MAX_URI_BYTES + 1)}))
            .expect_err("uri");
        assert!(uri.0.starts_with("`uri`"), "{uri}");
        let cursor =
            parse_params::<ListParams>(json!({"cursor": "c".repeat(MAX_LIST_CURSOR_BYTES + 1)}))
                .expect_err("cursor");
        assert!(cursor.0.starts_with("`cursor`"), "{cursor}");
        // A list cursor holds the longest key's page end.
        let longest = super::super::encode_cursor(&"k".repeat(MAX_KEY_BYTES));
        let params = parse_params::<ListParams>(json!({ "cursor": longest })).expect("parses");
        assert_eq!(
            params.after().expect("decodes").map(|key| key.len()),
            Some(MAX_KEY_BYTES)
        );
    }
}
