//! One listed catalog entry made storable: its content hash, and the size bound that trims an oversized one.
//!
//! Every kind of entry (resources, templates, and later tools and prompts) goes through
//! `fit_entry`: the store compares entries by the hash it returns, never by their text, and
//! never stores an entry larger than `max_entry_bytes`. A listed resource whose text fits the
//! bound takes the short way, `whole_entry_hash`: it is stored as the server sent it and
//! hashed over those bytes, with no `Value` built (`walk::resource_row`). Two texts of one
//! entry (another key order, the hash of an older version) are told apart from a real change
//! by `same_entry`, which the store asks only when the hashes differ.

use serde_json::{Map, Value};
use xxhash_rust::xxh3::{xxh3_64, xxh3_64_with_seed};

/// Optional fields an oversized entry loses first, in this order; any other field the server
/// added goes next, largest first. The entry's key and `name` are kept (the name cut short if
/// it alone is too large).
const DROPPED_FIRST: &[&str] = &["description", "_meta", "annotations", "icons", "title"];

/// A listed entry ready for the store.
#[derive(Debug)]
pub struct FittedEntry {
    /// The object as stored: the server's whole object, or what is left of it when oversized.
    pub object: Map<String, Value>,
    /// `object` as JSON text.
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

/// Hashes a listed object and, when its JSON text is over `max_bytes`, drops its optional
/// fields until it fits. `key` names the field that identifies the entry (`uri`,
/// `uriTemplate`, ...). `None` when the item is not an object with a non-empty string key, or
/// when the key alone is over the bound: such an entry can be neither stored whole nor cut.
pub fn fit_entry(item: Value, key: &str, max_bytes: u64) -> Option<FittedEntry> {
    let Value::Object(mut object) = item else {
        return None;
    };
    match object.get(key) {
        Some(Value::String(text)) if !text.is_empty() => {}
        _ => return None,
    }
    let max_bytes = usize::try_from(max_bytes).unwrap_or(usize::MAX);
    let raw = json_text(&object);
    if raw.len() <= max_bytes {
        let hash = content_hash(raw.as_bytes());
        return Some(FittedEntry {
            object,
            raw,
            hash,
            oversized: false,
        });
    }
    // The bound is part of what was stored: a new bound must store the entry again.
    let hash = nonzero(xxh3_64_with_seed(raw.as_bytes(), max_bytes as u64));
    let mut size = raw.len();
    drop(raw);
    let mut droppable: Vec<String> = DROPPED_FIRST
        .iter()
        .filter(|field| object.contains_key(**field))
        .map(|field| field.to_string())
        .collect();
    let mut others: Vec<(usize, String)> = object
        .iter()
        .filter(|(field, _)| {
            field.as_str() != key
                && field.as_str() != "name"
                && !DROPPED_FIRST.contains(&field.as_str())
        })
        .map(|(field, value)| (json_text_len(value), field.clone()))
        .collect();
    others.sort_by_key(|(size, _)| std::cmp::Reverse(*size));
    droppable.extend(others.into_iter().map(|(_, field)| field));
    for field in droppable {
        if size <= max_bytes {
            break;
        }
        object.remove(&field);
        size = json_text(&object).len();
    }
    // JSON escapes make the text longer than the string; each round cuts at least the excess,
    // so a few rounds always converge.
    while size > max_bytes {
        let Some(Value::String(name)) = object.get_mut("name") else {
            break;
        };
        if name.is_empty() {
            break;
        }
        let mut cut = name.len().saturating_sub(size - max_bytes);
        while !name.is_char_boundary(cut) {
            cut -= 1;
        }
        name.truncate(cut);
        size = json_text(&object).len();
    }
    if size > max_bytes {
        return None;
    }
    let raw = json_text(&object);
    Some(FittedEntry {
        object,
        raw,
        hash,
        oversized: true,
    })
}

fn json_text(object: &Map<String, Value>) -> String {
    // Serializing a map of JSON values cannot fail (every key is a string).
    serde_json::to_string(object).unwrap_or_default()
}

fn json_text_len(value: &Value) -> usize {
    serde_json::to_string(value).map_or(0, |text| text.len())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_small_entry_is_kept_whole_with_the_hash_of_its_text() {
        let item = json!({"uri": "a://1", "name": "one", "description": "short"});
        let fitted = fit_entry(item.clone(), "uri", 1024).expect("fits");
        assert!(!fitted.oversized);
        assert_eq!(fitted.raw, item.to_string());
        assert_eq!(fitted.hash, content_hash(item.to_string().as_bytes()));
    }

    #[test]
    fn an_oversized_entry_loses_its_description_first_and_keeps_uri_and_name() {
        let item = json!({
            "uri": "a://1", "name": "one", "mimeType": "text/plain",
            "description": "x".repeat(5000), "_meta": {"k": "v"}
        });
        let fitted = fit_entry(item, "uri", 200).expect("fits after trimming");
        assert!(fitted.oversized);
        assert!(fitted.raw.len() <= 200);
        assert_eq!(fitted.object["uri"], "a://1");
        assert_eq!(fitted.object["name"], "one");
        assert_eq!(fitted.object["mimeType"], "text/plain");
        assert_eq!(fitted.object["_meta"], json!({"k": "v"}));
        assert!(fitted.object.get("description").is_none());
    }

    #[test]
    fn the_same_entry_hashes_the_same_and_a_changed_one_differently() {
        let item = json!({"uri": "a://1", "name": "one", "description": "y".repeat(5000)});
        let first = fit_entry(item.clone(), "uri", 200).expect("fits");
        let again = fit_entry(item, "uri", 200).expect("fits");
        assert_eq!(first.hash, again.hash);
        let changed = json!({"uri": "a://1", "name": "one", "description": "z".repeat(5000)});
        let changed = fit_entry(changed, "uri", 200).expect("fits");
        assert_ne!(
            first.hash, changed.hash,
            "trimmed fields still count in the hash"
        );
        let other_bound = fit_entry(
            json!({"uri": "a://1", "name": "one", "description": "y".repeat(5000)}),
            "uri",
            300,
        )
        .expect("fits");
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
        let fitted = fit_entry(
            json!({"uri": "a://1", "name": "é".repeat(4000)}),
            "uri",
            300,
        )
        .expect("fits with a shorter name");
        assert!(fitted.oversized && fitted.raw.len() <= 300);
        assert!(fit_entry(json!({"uri": "u".repeat(4000), "name": "n"}), "uri", 300).is_none());
        assert!(fit_entry(json!({"name": "no uri"}), "uri", 300).is_none());
        assert!(fit_entry(json!("not an object"), "uri", 300).is_none());
    }
}
