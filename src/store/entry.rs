//! One listed catalog entry made storable: its content hash, and the size bound that trims an oversized one.
//!
//! Every kind of entry (resources, templates, tools and prompts) goes through `fit_entry`: the
//! store compares entries by the hash it returns, never by their text, and never stores an
//! entry larger than `max_entry_bytes`. An entry within the bound is stored as the server sent
//! it and hashed over those bytes; a listed resource takes a shorter way still,
//! `whole_entry_hash`, with no `Value` built (`walk::resource_row`). An entry over the bound is
//! trimmed from its top-level fields as the server's text, never built into a tree: a 50 MB
//! input schema would cost several times its size as a `Value`. Two texts of one entry
//! (another key order, the hash of an older version) are told apart from a real change by
//! `same_entry`, which the store asks only when the hashes differ.

use std::borrow::Cow;
use std::collections::BTreeMap;

use serde_json::value::RawValue;
use serde_json::{Map, Value};
use xxhash_rust::xxh3::{xxh3_64, xxh3_64_with_seed};

use crate::protocol::uri_flags::{flags_of_listing, URI_FLAGS_META_KEY};
use crate::protocol::{Kind, OVERSIZED_META_KEY};

/// Optional fields an oversized entry loses first, in this order; any other field the server
/// added goes next, largest first. The entry's key and `name` are kept (the name cut short if
/// it alone is too large, unless it is the key).
const DROPPED_FIRST: &[&str] = &["description", "_meta", "annotations", "icons", "title"];

/// Fields MCP's schema requires of a kind besides its key and `name`, with the smallest valid
/// value that stands in for one trimmed away, so a trimmed entry still parses as its kind: a
/// tool whose `inputSchema` was dropped is listed with `{"type":"object"}`.
fn stand_ins(kind: Kind) -> &'static [(&'static str, &'static str)] {
    match kind {
        Kind::Tool => &[("inputSchema", r#"{"type":"object"}"#)],
        Kind::Resource | Kind::Template | Kind::Prompt => &[],
    }
}

/// A listed entry ready for the store.
#[derive(Debug)]
pub struct FittedEntry {
    /// The object as stored: the server's whole object, or what is left of it when oversized.
    pub object: Map<String, Value>,
    /// The entry as stored: the server's text, or the trimmed object's JSON text.
    pub raw: String,
    /// The hash of the entry as the server sent it (and of the bound, when it was trimmed):
    /// equal hashes mean an unchanged entry, whatever was trimmed.
    pub hash: i64,
    /// The server's entry was larger than the bound and lost fields.
    pub oversized: bool,
}

/// A 64-bit content hash as the store keeps it. XXH3 is specified, so stored hashes stay
/// valid across versions of the crate; 0 is never returned (it marks "not hashed yet").
pub fn content_hash(bytes: &[u8]) -> i64 {
    nonzero(xxh3_64(bytes))
}

fn nonzero(hash: u64) -> i64 {
    if hash == 0 {
        1
    } else {
        hash as i64
    }
}

/// The content hash of an entry whose text as listed is within `max_bytes`: such an entry is
/// stored as that text. `None` when it is over the bound (`fit_entry` then trims it).
pub fn whole_entry_hash(text: &str, max_bytes: u64) -> Option<i64> {
    (text.len() as u64 <= max_bytes).then(|| content_hash(text.as_bytes()))
}

/// True when two texts hold the same JSON value (object keys in any order, any spacing).
/// Texts that are not JSON are the same only byte for byte.
pub fn same_entry(stored: &str, listed: &str) -> bool {
    if stored == listed {
        return true;
    }
    match (
        serde_json::from_str::<Value>(stored),
        serde_json::from_str::<Value>(listed),
    ) {
        (Ok(stored), Ok(listed)) => stored == listed,
        _ => false,
    }
}

/// Makes a listed entry of `kind` (its JSON text) storable. Within `max_bytes` it is kept as
/// sent, but for its URI flags (`uri_flags`: a resource or template whose URI points at the
/// local machine or a private network gets `_meta["io.mcp-mirror/uri"]`; the key is ours, and
/// what a server wrote there is replaced). Over the bound it loses optional fields
/// (`DROPPED_FIRST`, then the largest) until it fits; a required field it lost gets its
/// stand-in (`stand_ins`), and its `_meta` says `"io.mcp-mirror/oversized": true` (and keeps
/// the URI flags), so what clients get is still valid JSON of its kind, and says it is not
/// whole. `None` when the item is not an object with a non-empty string key
/// (`Kind::identity_field`), or when the key alone is over the bound: such an entry can be
/// neither stored whole nor cut.
pub fn fit_entry(text: &str, kind: Kind, max_bytes: u64) -> Option<FittedEntry> {
    let key = kind.identity_field();
    let max_bytes = usize::try_from(max_bytes).unwrap_or(usize::MAX);
    if text.len() <= max_bytes {
        if let Some(whole) = fit_whole(text, kind, max_bytes)? {
            return Some(whole);
        }
        // The flags took it over the bound: it is trimmed below like any larger entry.
    }
    // Borrowed from `text`: the fields cost no copy of the entry.
    let borrowed: BTreeMap<String, &RawValue> = serde_json::from_str(text).ok()?;
    let mut fields: Fields<'_> = borrowed
        .into_iter()
        .map(|(field, value)| (field, Cow::Borrowed(value)))
        .collect();
    let flags = match fields
        .get(key)
        .map(|value| serde_json::from_str::<String>(value.get()))
    {
        Some(Ok(identity)) if !identity.is_empty() => uri_flags(kind, &identity),
        _ => return None,
    };
    // The bound is part of what was stored: a new bound must store the entry again.
    let hash = nonzero(xxh3_64_with_seed(text.as_bytes(), max_bytes as u64));
    // What the stand-ins, the marker and the URI flags may add, kept free while trimming (an
    // upper bound).
    let flags_text = flags.as_ref().map_or(0, |flags| {
        json_string(URI_FLAGS_META_KEY).len() + 2 + flags.to_string().len()
    });
    let marker = format!(r#","_meta":{{{}:true}}"#, json_string(OVERSIZED_META_KEY));
    let reserved = marker.len()
        + flags_text
        + stand_ins(kind)
            .iter()
            .map(|(field, value)| 1 + json_string(field).len() + 1 + value.len())
            .sum::<usize>();
    let target = max_bytes.saturating_sub(reserved);
    // `{}` and the commas between fields, and each field.
    let size = 2
        + fields.len().saturating_sub(1)
        + fields
            .iter()
            .map(|(field, value)| field_len(field, value))
            .sum::<usize>();
    let size = drop_fields(&mut fields, key, size, target);
    if cut_name(&mut fields, key, size, target)? > target {
        return None;
    }
    mark_oversized(&mut fields, kind, flags)?;
    let raw = serde_json::to_string(&fields).ok()?;
    if raw.len() > max_bytes {
        return None;
    }
    drop(fields);
    let Ok(Value::Object(object)) = serde_json::from_str::<Value>(&raw) else {
        return None;
    };
    Some(FittedEntry {
        object,
        raw,
        hash,
        oversized: true,
    })
}

/// An entry's top-level fields, each its JSON text, borrowed from the entry's text until one
/// is changed.
type Fields<'a> = BTreeMap<String, Cow<'a, RawValue>>;

/// A field's share of an object's text: its name, the colon and its value.
fn field_len(field: &str, value: &RawValue) -> usize {
    json_string(field).len() + 1 + value.get().len()
}

/// An entry within the bound as sent: kept as sent but for its URI flags. `None` when it is
/// not an object with a non-empty string key; `Some(None)` when its flags take it over the
/// bound.
fn fit_whole(text: &str, kind: Kind, max_bytes: usize) -> Option<Option<FittedEntry>> {
    let Ok(Value::Object(mut object)) = serde_json::from_str::<Value>(text) else {
        return None;
    };
    let flags = match object.get(kind.identity_field()) {
        Some(Value::String(identity)) if !identity.is_empty() => uri_flags(kind, identity),
        _ => return None,
    };
    // The text as sent, unless its flags change it: the parse above is the only one.
    let raw = match set_uri_flags(&mut object, flags, text) {
        false => text.to_string(),
        true => serde_json::to_string(&object).ok()?,
    };
    Some((raw.len() <= max_bytes).then(|| FittedEntry {
        object,
        hash: content_hash(raw.as_bytes()),
        raw,
        oversized: false,
    }))
}

/// Drops optional fields, `DROPPED_FIRST` and then the largest, until the entry's text
/// (`size`) is within `target`; never the key nor the name. Returns the size left.
fn drop_fields(fields: &mut Fields<'_>, key: &str, mut size: usize, target: usize) -> usize {
    let mut droppable: Vec<String> = DROPPED_FIRST
        .iter()
        .filter(|field| fields.contains_key(**field))
        .map(|field| field.to_string())
        .collect();
    let mut others: Vec<(usize, String)> = fields
        .iter()
        .filter(|(field, _)| {
            field.as_str() != key
                && field.as_str() != "name"
                && !DROPPED_FIRST.contains(&field.as_str())
        })
        .map(|(field, value)| (value.get().len(), field.clone()))
        .collect();
    others.sort_by_key(|(size, _)| std::cmp::Reverse(*size));
    droppable.extend(others.into_iter().map(|(_, field)| field));
    for field in droppable {
        if size <= target {
            break;
        }
        if let Some(value) = fields.remove(&field) {
            size -= field_len(&field, &value) + usize::from(!fields.is_empty());
        }
    }
    size
}

/// Cuts the name (when it is not the key) until the entry's text is within `target`, or the
/// name is empty. Returns the size left; `None` when the cut name cannot be written.
fn cut_name(fields: &mut Fields<'_>, key: &str, mut size: usize, target: usize) -> Option<usize> {
    // JSON escapes make the text longer than the string; each round cuts at least the excess,
    // so a few rounds always converge.
    while size > target && key != "name" {
        let Some(value) = fields.get("name") else {
            break;
        };
        let Ok(mut name) = serde_json::from_str::<String>(value.get()) else {
            break;
        };
        if name.is_empty() {
            break;
        }
        let before = field_len("name", value);
        let mut cut = name.len().saturating_sub(size - target);
        while !name.is_char_boundary(cut) {
            cut -= 1;
        }
        name.truncate(cut);
        let value = RawValue::from_string(serde_json::to_string(&name).ok()?).ok()?;
        size = size - before + field_len("name", &value);
        fields.insert("name".into(), Cow::Owned(value));
    }
    Some(size)
}

/// Marks a trimmed entry: a required field it lost gets its stand-in, and its `_meta` says
/// `"io.mcp-mirror/oversized": true` and holds its URI flags (ours alone).
fn mark_oversized(fields: &mut Fields<'_>, kind: Kind, flags: Option<Value>) -> Option<()> {
    for (field, value) in stand_ins(kind) {
        if !fields.contains_key(*field) {
            fields.insert(
                field.to_string(),
                Cow::Owned(RawValue::from_string(value.to_string()).ok()?),
            );
        }
    }
    let mut meta = match fields.remove("_meta") {
        Some(meta) => match serde_json::from_str::<Map<String, Value>>(meta.get()) {
            Ok(mut meta) => {
                meta.insert(OVERSIZED_META_KEY.into(), Value::Bool(true));
                meta
            }
            Err(_) => oversized_meta(),
        },
        None => oversized_meta(),
    };
    meta.remove(URI_FLAGS_META_KEY);
    if let Some(flags) = flags {
        meta.insert(URI_FLAGS_META_KEY.into(), flags);
    }
    fields.insert(
        "_meta".into(),
        Cow::Owned(RawValue::from_string(serde_json::to_string(&meta).ok()?).ok()?),
    );
    Some(())
}

/// The URI flags of an entry of `kind` keyed by `identity` (a resource's URI, a template's
/// expansion base), as their `_meta` value; `None` for other kinds and for unflagged URIs.
fn uri_flags(kind: Kind, identity: &str) -> Option<Value> {
    let flags = flags_of_listing(kind, identity);
    (!flags.is_empty()).then(|| {
        flags
            .iter()
            .map(|flag| Value::from(flag.as_str()))
            .collect()
    })
}

/// Sets `object`'s URI flags to `flags`, replacing (or removing) what its server wrote under
/// the key; whether that changed the object. `text` (the object as sent) spares the lookup
/// when the key is nowhere in it.
fn set_uri_flags(object: &mut Map<String, Value>, flags: Option<Value>, text: &str) -> bool {
    if flags.is_none() && !text.contains(URI_FLAGS_META_KEY) {
        return false;
    }
    let meta = object
        .entry("_meta")
        .or_insert_with(|| Value::Object(Map::new()));
    if !meta.is_object() {
        // A `_meta` that is not an object cannot carry our key; flags replace it (as the
        // oversized marker does).
        if flags.is_none() {
            return false;
        }
        *meta = Value::Object(Map::new());
    }
    let Value::Object(meta) = meta else {
        return false;
    };
    let claimed = meta.remove(URI_FLAGS_META_KEY);
    let changed = match flags {
        Some(flags) => {
            let changed = claimed.as_ref() != Some(&flags);
            meta.insert(URI_FLAGS_META_KEY.into(), flags);
            changed
        }
        None => claimed.is_some(),
    };
    if meta.is_empty() {
        object.remove("_meta");
    }
    changed
}

fn oversized_meta() -> Map<String, Value> {
    let mut meta = Map::new();
    meta.insert(OVERSIZED_META_KEY.into(), Value::Bool(true));
    meta
}

/// A string as JSON text (quoted and escaped).
fn json_string(text: &str) -> String {
    serde_json::to_string(text).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn fit(item: &Value, kind: Kind, max_bytes: u64) -> Option<FittedEntry> {
        fit_entry(&item.to_string(), kind, max_bytes)
    }

    #[test]
    fn a_small_entry_is_kept_as_sent_with_the_hash_of_its_text() {
        let sent = r#"{"uri": "a://1", "name": "one", "description": "short"}"#;
        let fitted = fit_entry(sent, Kind::Resource, 1024).expect("fits");
        assert!(!fitted.oversized);
        assert_eq!(fitted.raw, sent);
        assert_eq!(fitted.hash, content_hash(sent.as_bytes()));
    }

    #[test]
    fn uri_flags_are_set_from_the_uri_and_a_servers_claim_is_replaced() {
        let flagged = r#"{"uri": "http://0177.0.0.1/admin", "name": "a"}"#;
        let fitted = fit_entry(flagged, Kind::Resource, 1024).expect("fits");
        assert_eq!(
            fitted.object["_meta"],
            json!({URI_FLAGS_META_KEY: ["loopback"]})
        );
        assert_eq!(fitted.hash, content_hash(fitted.raw.as_bytes()));
        let claimed = json!({"uri": "https://example.com/x", "name": "b",
                             "_meta": {URI_FLAGS_META_KEY: ["loopback"], "k": 1}});
        let fitted = fit(&claimed, Kind::Resource, 1024).expect("fits");
        assert_eq!(fitted.object["_meta"], json!({"k": 1}));
        let hidden = json!({"uriTemplate": "file:///{path}", "name": "c",
                            "_meta": {URI_FLAGS_META_KEY: []}});
        let fitted = fit(&hidden, Kind::Template, 1024).expect("fits");
        assert_eq!(
            fitted.object["_meta"],
            json!({URI_FLAGS_META_KEY: ["local-file"]})
        );
        // An ordinary entry is stored as sent, and a tool has no URI to flag.
        let plain = r#"{"uri": "fixture://docs/1", "name": "d"}"#;
        assert_eq!(
            fit_entry(plain, Kind::Resource, 1024).expect("fits").raw,
            plain
        );
        let tool = r#"{"name": "t", "uri": "file:///x", "inputSchema": {"type": "object"}}"#;
        assert_eq!(fit_entry(tool, Kind::Tool, 1024).expect("fits").raw, tool);
    }

    #[test]
    fn an_oversized_entry_keeps_its_uri_flags_when_its_meta_is_dropped() {
        let item = json!({
            "uri": "file:///etc/shadow", "name": "one",
            "_meta": {"big": "y".repeat(5000), URI_FLAGS_META_KEY: ["local-file"]}
        });
        let fitted = fit(&item, Kind::Resource, 200).expect("fits after trimming");
        assert!(fitted.raw.len() <= 200, "{}", fitted.raw);
        assert_eq!(
            fitted.object["_meta"],
            json!({OVERSIZED_META_KEY: true, URI_FLAGS_META_KEY: ["local-file"]})
        );
    }

    #[test]
    fn an_oversized_entry_loses_its_description_first_and_keeps_uri_and_name() {
        let item = json!({
            "uri": "a://1", "name": "one", "mimeType": "text/plain",
            "description": "x".repeat(5000), "_meta": {"k": "v"}
        });
        let fitted = fit(&item, Kind::Resource, 200).expect("fits after trimming");
        assert!(fitted.oversized);
        assert!(fitted.raw.len() <= 200);
        assert_eq!(fitted.object["uri"], "a://1");
        assert_eq!(fitted.object["name"], "one");
        assert_eq!(fitted.object["mimeType"], "text/plain");
        assert_eq!(
            fitted.object["_meta"],
            json!({"k": "v", OVERSIZED_META_KEY: true})
        );
        assert!(fitted.object.get("description").is_none());
        assert_eq!(
            serde_json::from_str::<Value>(&fitted.raw).expect("json"),
            Value::Object(fitted.object)
        );
    }

    #[test]
    fn an_oversized_tool_keeps_a_valid_input_schema_and_says_it_was_trimmed() {
        let properties: Map<String, Value> = (0..2_000)
            .map(|index| (format!("p{index}"), json!({"type": "string"})))
            .collect();
        let tool = json!({
            "name": "big", "title": "Big", "description": "d".repeat(100),
            "inputSchema": {"type": "object", "properties": properties},
            "annotations": {"readOnlyHint": true}
        });
        let fitted = fit(&tool, Kind::Tool, 1024).expect("fits after trimming");
        assert!(
            fitted.oversized && fitted.raw.len() <= 1024,
            "{}",
            fitted.raw
        );
        assert_eq!(fitted.object["name"], "big");
        assert_eq!(fitted.object["inputSchema"], json!({"type": "object"}));
        // The same order as every kind: description, `_meta`, annotations, icons and title
        // go before the largest other field.
        assert!(fitted.object.get("title").is_none());
        assert_eq!(fitted.object["_meta"], json!({OVERSIZED_META_KEY: true}));
        // A tool whose name alone is over the bound cannot be cut: its name is its key.
        assert!(fit(
            &json!({"name": "n".repeat(4000), "inputSchema": {}}),
            Kind::Tool,
            300
        )
        .is_none());
    }

    #[test]
    fn the_same_entry_hashes_the_same_and_a_changed_one_differently() {
        let item = json!({"uri": "a://1", "name": "one", "description": "y".repeat(5000)});
        let first = fit(&item, Kind::Resource, 200).expect("fits");
        let again = fit(&item, Kind::Resource, 200).expect("fits");
        assert_eq!(first.hash, again.hash);
        let changed = json!({"uri": "a://1", "name": "one", "description": "z".repeat(5000)});
        let changed = fit(&changed, Kind::Resource, 200).expect("fits");
        assert_ne!(
            first.hash, changed.hash,
            "trimmed fields still count in the hash"
        );
        let other_bound = fit(&item, Kind::Resource, 300).expect("fits");
        assert_ne!(first.hash, other_bound.hash);
    }

    #[test]
    fn a_fitting_text_is_hashed_as_sent_and_reordered_keys_are_the_same_entry() {
        let sent = r#"{"uri": "a://1", "name": "one"}"#;
        assert_eq!(
            whole_entry_hash(sent, 1024),
            Some(content_hash(sent.as_bytes()))
        );
        assert_eq!(whole_entry_hash(sent, 10), None);
        assert!(same_entry(sent, r#"{"name":"one","uri":"a://1"}"#));
        assert!(!same_entry(sent, r#"{"name":"two","uri":"a://1"}"#));
        assert!(!same_entry("not json", "not json either"));
    }

    #[test]
    fn a_huge_name_is_cut_and_a_huge_key_refused() {
        let fitted = fit(
            &json!({"uri": "a://1", "name": "é".repeat(4000)}),
            Kind::Resource,
            300,
        )
        .expect("fits with a shorter name");
        assert!(fitted.oversized && fitted.raw.len() <= 300);
        assert!(fit(
            &json!({"uri": "u".repeat(4000), "name": "n"}),
            Kind::Resource,
            300
        )
        .is_none());
        assert!(fit(&json!({"name": "no uri"}), Kind::Resource, 300).is_none());
        assert!(fit(&json!("not an object"), Kind::Resource, 300).is_none());
    }
}
