//! The first stage: `daemon.toml` deserialized as written, every value with its place in the
//! file, and TOML errors turned into `ConfigError`s that never quote a value.

use std::collections::BTreeMap;
use std::fmt;

use serde::Deserialize;
use toml::Spanned;

use super::source::SourceFile;
use super::ConfigError;

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawConfig {
    #[serde(default)]
    pub daemon: RawDaemon,
    #[serde(default)]
    pub servers: BTreeMap<Spanned<String>, Spanned<RawServer>>,
    #[serde(default)]
    pub http: RawHttp,
    #[serde(default)]
    pub search: super::search::RawSearch,
    #[serde(default)]
    pub nats: super::nats::RawNats,
}

/// The `[http]` table as written.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawHttp {
    pub listen: Option<Spanned<String>>,
    pub metrics_listen: Option<Spanned<String>>,
    #[serde(default)]
    pub tokens: BTreeMap<String, Spanned<RawToken>>,
    #[serde(default)]
    pub allowed_origins: Vec<String>,
    pub max_body: Option<Spanned<String>>,
    pub max_streams: Option<Spanned<i64>>,
    pub max_sessions: Option<Spanned<i64>>,
    #[serde(default)]
    pub allowed_hosts: Vec<Spanned<String>>,
    pub max_connections: Option<Spanned<i64>>,
    pub max_connections_per_peer: Option<Spanned<i64>>,
    pub body_timeout: Option<Spanned<String>>,
    pub write_stall_timeout: Option<Spanned<String>>,
    pub session_idle_timeout: Option<Spanned<String>>,
    pub max_sessions_per_client: Option<Spanned<i64>>,
    pub max_streams_per_client: Option<Spanned<i64>>,
    pub hide_flagged_uris: Option<bool>,
}

/// One `[http] tokens` value: the token file's path, or a table with the path and the view
/// (`{ file = "...", servers = [...], kinds = [...], mutate = true }`).
#[derive(Default)]
pub(super) struct RawToken {
    pub file: String,
    pub servers: Option<Vec<String>>,
    pub kinds: Option<Vec<String>>,
    pub mutate: bool,
    pub hide_flagged_uris: Option<bool>,
}

impl<'de> Deserialize<'de> for RawToken {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct TokenVisitor;

        impl<'de> serde::de::Visitor<'de> for TokenVisitor {
            type Value = RawToken;

            fn expecting(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
                formatter
                    .write_str("a token file's path, or a table { file, servers, kinds, mutate, hide_flagged_uris }")
            }

            fn visit_str<E: serde::de::Error>(self, file: &str) -> Result<RawToken, E> {
                Ok(RawToken {
                    file: file.to_string(),
                    ..RawToken::default()
                })
            }

            fn visit_map<M: serde::de::MapAccess<'de>>(
                self,
                mut map: M,
            ) -> Result<RawToken, M::Error> {
                let mut token = RawToken::default();
                let mut file = None;
                while let Some(key) = map.next_key::<String>()? {
                    match key.as_str() {
                        "file" => file = Some(map.next_value::<String>()?),
                        "servers" => token.servers = Some(map.next_value()?),
                        "kinds" => token.kinds = Some(map.next_value()?),
                        "mutate" => token.mutate = map.next_value()?,
                        "hide_flagged_uris" => token.hide_flagged_uris = Some(map.next_value()?),
                        other => {
                            return Err(serde::de::Error::unknown_field(
                                other,
                                &["file", "servers", "kinds", "mutate", "hide_flagged_uris"],
                            ))
                        }
                    }
                }
                token.file = file.ok_or_else(|| serde::de::Error::missing_field("file"))?;
                Ok(token)
            }
        }

        deserializer.deserialize_any(TokenVisitor)
    }
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawDaemon {
    pub database: Option<Spanned<String>>,
    pub socket: Option<Spanned<String>>,
    pub resync_interval: Option<Spanned<String>>,
    pub request_timeout: Option<Spanned<String>>,
    pub connect_timeout: Option<Spanned<String>>,
    pub max_pages: Option<Spanned<i64>>,
    pub max_items: Option<Spanned<i64>>,
    pub max_entry_bytes: Option<Spanned<i64>>,
    pub max_pages_without_new: Option<Spanned<i64>>,
    pub max_template_bytes: Option<Spanned<i64>>,
    pub max_template_expressions: Option<Spanned<i64>>,
    pub poll_interval: Option<Spanned<String>>,
    pub poll_floor: Option<Spanned<String>>,
    pub ping_interval: Option<Spanned<String>>,
    pub debounce: Option<Spanned<String>>,
    pub min_walk_interval: Option<Spanned<String>>,
    pub upstream_load_wait: Option<Spanned<String>>,
    pub keep_removed: Option<bool>,
    pub log_level: Option<Spanned<String>>,
    pub search_timeout: Option<Spanned<String>>,
    pub max_concurrent_searches: Option<Spanned<i64>>,
    pub max_clients: Option<Spanned<i64>>,
    pub history: Option<bool>,
    pub history_versions_per_key: Option<Spanned<i64>>,
    pub history_max_age: Option<Spanned<String>>,
    pub history_max_bytes: Option<Spanned<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawServer {
    pub url: Option<Spanned<String>>,
    pub command: Option<Spanned<String>>,
    #[serde(default)]
    pub args: Vec<String>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    pub cwd: Option<Spanned<String>>,
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    pub bearer_token_env: Option<Spanned<String>>,
    pub bearer_token_file: Option<Spanned<String>>,
    pub priority: Option<i64>,
    pub resync_interval: Option<Spanned<String>>,
    pub request_timeout: Option<Spanned<String>>,
    pub connect_timeout: Option<Spanned<String>>,
    pub max_pages: Option<Spanned<i64>>,
    pub max_items: Option<Spanned<i64>>,
    pub max_entry_bytes: Option<Spanned<i64>>,
    pub read_cache: Option<Spanned<String>>,
    pub poll_interval: Option<Spanned<String>>,
    pub ping_interval: Option<Spanned<String>>,
    pub era: Option<Spanned<String>>,
    pub protocol_version: Option<Spanned<String>>,
    /// The kinds to mirror: `["resources", "tools", "prompts"]`; every declared kind by default.
    pub mirror: Option<Spanned<Vec<String>>>,
    pub share: Option<bool>,
    /// A server followed through a NATS JetStream key-value bucket instead of MCP.
    pub nats: Option<Spanned<String>>,
    pub bucket: Option<Spanned<String>>,
    pub history: Option<bool>,
}

/// The longest fragment of the file an error may quote as the key at fault.
const MAX_QUOTED_KEY_LENGTH: usize = 80;

/// Deserializes the file; a TOML error names the line, and the key when the fault is one.
pub(super) fn parse(source: &SourceFile) -> Result<RawConfig, ConfigError> {
    toml::from_str(source.text).map_err(|error| ConfigError {
        file: source.path.to_path_buf(),
        line: error.span().map(|span| source.line_of(&span)),
        key: error.span().and_then(|span| key_at(source.text, span)),
        message: without_string_values(error.message().trim()),
    })
}

/// The fragment at `span` when it is a key (followed by `=`, `.` or `]`): a value is never
/// quoted back, since it may be a token or a header value.
fn key_at(text: &str, span: std::ops::Range<usize>) -> Option<String> {
    let followed_by_key_end = text
        .get(span.end..)
        .map(str::trim_start)
        .is_some_and(|rest| rest.starts_with(['=', '.', ']']));
    if !followed_by_key_end {
        return None;
    }
    let fragment = text.get(span.clone())?.trim();
    let quotable =
        !fragment.is_empty() && !fragment.contains('\n') && fragment.len() < MAX_QUOTED_KEY_LENGTH;
    if !quotable {
        return None;
    }
    // The key's whole path, as the other problems name it (`daemon.no_such`): the table
    // header above it, unless the fragment is a header's own name.
    let line_start = text[..span.start]
        .rfind('\n')
        .map_or(0, |newline| newline + 1);
    let in_header = text[line_start..span.start].trim_start().starts_with('[');
    match table_above(&text[..line_start]) {
        Some(table) if !in_header => Some(format!("{table}.{fragment}")),
        _ => Some(fragment.to_string()),
    }
}

/// The name of the last `[table]` (or `[[array]]`) header in `text`, if any.
fn table_above(text: &str) -> Option<&str> {
    text.lines().rev().find_map(|line| {
        let header = line.trim().strip_prefix('[')?;
        let header = header.strip_prefix('[').unwrap_or(header);
        let end = header.find(']')?;
        let name = header[..end].trim();
        (!name.is_empty()).then_some(name)
    })
}

/// serde quotes a string of the wrong type (`invalid type: string "…", expected a map`), and
/// that string may be a secret in the wrong place (`headers = "X-Key: …"`): drop its text.
fn without_string_values(message: &str) -> String {
    const MARKER: &str = "string \"";
    let mut kept = String::with_capacity(message.len());
    let mut rest = message;
    while let Some(start) = rest.find(MARKER) {
        kept.push_str(&rest[..start]);
        kept.push_str("a string");
        let quoted = &rest[start + MARKER.len()..];
        // The value is Debug-escaped, so its closing quote is the first one not after a `\`.
        let mut escaped = false;
        let end = quoted.char_indices().find_map(|(index, character)| {
            let closes = character == '"' && !escaped;
            escaped = character == '\\' && !escaped;
            closes.then_some(index)
        });
        rest = match end {
            Some(end) => &quoted[end + 1..],
            None => "",
        };
    }
    kept.push_str(rest);
    kept
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn string_values_are_dropped_from_messages() {
        assert_eq!(
            without_string_values(r#"invalid type: string "X-Key: s\"ecret", expected a map"#),
            "invalid type: a string, expected a map"
        );
        assert_eq!(
            without_string_values("unknown field `bogus`, expected one of `url`"),
            "unknown field `bogus`, expected one of `url`"
        );
    }

    #[test]
    fn a_key_is_named_with_its_table() {
        let text = "[daemon]\nno_such = 1\n\n[servers.a]\nbogus = 2\n";
        let start = text.find("no_such").unwrap();
        assert_eq!(
            key_at(text, start..start + 7).as_deref(),
            Some("daemon.no_such")
        );
        let start = text.find("bogus").unwrap();
        assert_eq!(
            key_at(text, start..start + 5).as_deref(),
            Some("servers.a.bogus")
        );
        let start = text.find("servers.a").unwrap();
        assert_eq!(key_at(text, start..start + 9).as_deref(), Some("servers.a"));
        assert_eq!(key_at("top = 1\n", 0..3).as_deref(), Some("top"));
    }
}
