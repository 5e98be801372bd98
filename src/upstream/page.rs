//! One page of a paginated list parsed in a single pass: each item keeps its text as the server sent it.

use std::fmt;

use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::Value;

use super::McpError;
use crate::protocol::CacheScope;

/// One page of a paginated list: the raw items, the cursor to the next page, and the
/// server's caching hint (stateless era). Each item is its text as the server sent it.
#[derive(Debug)]
pub struct Page {
    pub items: Vec<Box<RawValue>>,
    pub next_cursor: Option<String>,
    pub ttl_ms: Option<u64>,
    /// The page's `cacheScope`; `public` when it declares none (the handshake era).
    pub cache_scope: crate::protocol::CacheScope,
}

/// Parses a list result (`resources/list`, `tools/list`, …) whose items are under `field`.
/// Only the top level is read into values; the list is split into its items' texts in the
/// same pass, with no `Value` built for any item.
pub(super) fn parse_page(method: &str, field: &str, result: &str) -> Result<Page, McpError> {
    let mut deserializer = serde_json::Deserializer::from_str(result);
    let parsed = ListResultSeed { field }
        .deserialize(&mut deserializer)
        .and_then(|parsed| deserializer.end().map(|()| parsed))
        .map_err(|_| McpError::Protocol(format!("the {method} result has no `{field}`")))?;
    // A missing resultType means complete; anything else (input_required) cannot be walked.
    if let Some(Value::String(kind)) = &parsed.result_type {
        if kind != "complete" {
            return Err(McpError::Protocol(format!(
                "{method} answered resultType `{}`, which a mirror cannot complete",
                crate::redact::truncate_server_text(kind)
            )));
        }
    }
    let items = match parsed.items {
        Some(Items(Some(items))) => items,
        Some(Items(None)) => {
            return Err(McpError::Protocol(format!(
                "`{field}` in the {method} result is not an array"
            )))
        }
        None => {
            return Err(McpError::Protocol(format!(
                "the {method} result has no `{field}`"
            )))
        }
    };
    let next_cursor = match parsed.next_cursor {
        None | Some(Value::Null) => None,
        Some(Value::String(cursor)) => Some(cursor),
        Some(other) => {
            return Err(McpError::Protocol(format!(
                "nextCursor is not a string: {}",
                crate::redact::truncate_server_text(&other.to_string())
            )))
        }
    };
    Ok(Page {
        items,
        next_cursor,
        ttl_ms: parsed.ttl_ms.as_ref().and_then(Value::as_u64),
        cache_scope: CacheScope::of_hint(parsed.cache_scope.as_ref()),
    })
}

/// The top level of a list result; a repeated key keeps its last value, as a `Value` would.
#[derive(Default)]
struct ListResult {
    items: Option<Items>,
    result_type: Option<Value>,
    next_cursor: Option<Value>,
    ttl_ms: Option<Value>,
    cache_scope: Option<Value>,
}

struct ListResultSeed<'f> {
    field: &'f str,
}

impl<'de> DeserializeSeed<'de> for ListResultSeed<'_> {
    type Value = ListResult;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<ListResult, D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for ListResultSeed<'_> {
    type Value = ListResult;

    fn expecting(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str("a list result object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<ListResult, A::Error> {
        let mut result = ListResult::default();
        while let Some(key) = map.next_key::<String>()? {
            match key.as_str() {
                key if key == self.field => result.items = Some(map.next_value()?),
                "resultType" => result.result_type = Some(map.next_value()?),
                "nextCursor" => result.next_cursor = Some(map.next_value()?),
                "ttlMs" => result.ttl_ms = Some(map.next_value()?),
                "cacheScope" => result.cache_scope = Some(map.next_value()?),
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(result)
    }
}

/// The items of a list, each as its text; `None` when the field is not an array.
struct Items(Option<Vec<Box<RawValue>>>);

impl<'de> Deserialize<'de> for Items {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Items, D::Error> {
        deserializer.deserialize_any(ItemsVisitor)
    }
}

struct ItemsVisitor;

impl<'de> Visitor<'de> for ItemsVisitor {
    type Value = Items;

    fn expecting(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str("a list of items")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Items, A::Error> {
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0));
        while let Some(item) = seq.next_element::<Box<RawValue>>()? {
            items.push(item);
        }
        Ok(Items(Some(items)))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Items, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(Items(None))
    }

    fn visit_bool<E>(self, _: bool) -> Result<Items, E> {
        Ok(Items(None))
    }

    fn visit_i64<E>(self, _: i64) -> Result<Items, E> {
        Ok(Items(None))
    }

    fn visit_u64<E>(self, _: u64) -> Result<Items, E> {
        Ok(Items(None))
    }

    fn visit_f64<E>(self, _: f64) -> Result<Items, E> {
        Ok(Items(None))
    }

    fn visit_str<E>(self, _: &str) -> Result<Items, E> {
        Ok(Items(None))
    }

    fn visit_unit<E>(self) -> Result<Items, E> {
        Ok(Items(None))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_page_keeps_each_item_as_sent_and_reads_its_cursor_and_hints() {
        let page = parse_page(
            "resources/list",
            "resources",
            r#"{"resources": [{"uri": "a://1",  "name": "one"}, {"name":"two","uri":"a://2"}],
                "nextCursor": "c2", "ttlMs": 5000, "cacheScope": "public", "other": {"x": [1]}}"#,
        )
        .expect("page");
        let texts: Vec<&str> = page.items.iter().map(|item| item.get()).collect();
        assert_eq!(
            texts,
            [
                r#"{"uri": "a://1",  "name": "one"}"#,
                r#"{"name":"two","uri":"a://2"}"#
            ]
        );
        assert_eq!(page.next_cursor.as_deref(), Some("c2"));
        assert_eq!(page.ttl_ms, Some(5000));
        assert_eq!(page.cache_scope, CacheScope::Public);
    }

    #[test]
    fn a_missing_or_wrong_list_or_cursor_is_a_protocol_error() {
        let error = |text: &str| {
            parse_page("tools/list", "tools", text)
                .expect_err(text)
                .to_string()
        };
        assert!(error(r#"{"resources": []}"#).contains("has no `tools`"));
        assert!(error(r#"{"tools": {"a": 1}}"#).contains("is not an array"));
        assert!(error(r#"{"tools": null}"#).contains("is not an array"));
        assert!(error(r#"{"tools": [], "nextCursor": 3}"#).contains("nextCursor is not a string"));
        assert!(
            error(r#"{"tools": [], "resultType": "input_required"}"#).contains("cannot complete")
        );
        assert!(error(r#"[1]"#).contains("has no `tools`"));
        let done = parse_page(
            "tools/list",
            "tools",
            r#"{"tools": [], "nextCursor": null}"#,
        )
        .expect("page");
        assert!(done.items.is_empty() && done.next_cursor.is_none());
    }
}
