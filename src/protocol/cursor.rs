//! The opaque page cursors of the socket: keyset cursors for lists, offsets for search.

const CURSOR_PREFIX: &str = "k1.";
const SEARCH_CURSOR_PREFIX: &str = "s1.";
/// Pages of the derived search index, whose ranking differs from SQLite's: a cursor stays
/// with the engine that made it.
const INDEX_CURSOR_PREFIX: &str = "i1.";
const KINDS_SEARCH_CURSOR_PREFIX: &str = "m1.";

/// Encodes a keyset position (the last key of a page) as an opaque cursor.
pub fn encode_cursor(key: &str) -> String {
    let mut cursor = String::with_capacity(CURSOR_PREFIX.len() + key.len() * 2);
    cursor.push_str(CURSOR_PREFIX);
    for byte in key.as_bytes() {
        cursor.push_str(&format!("{byte:02x}"));
    }
    cursor
}

/// Decodes a cursor made by `encode_cursor`; `None` when it is not one.
pub fn decode_cursor(cursor: &str) -> Option<String> {
    let hex = cursor.strip_prefix(CURSOR_PREFIX)?;
    if hex.len() % 2 != 0 {
        return None;
    }
    let bytes = (0..hex.len())
        .step_by(2)
        .map(|index| u8::from_str_radix(hex.get(index..index + 2)?, 16).ok())
        .collect::<Option<Vec<u8>>>()?;
    String::from_utf8(bytes).ok()
}

/// Encodes a position in a ranked result list as an opaque search cursor.
pub fn encode_search_cursor(offset: usize) -> String {
    format!("{SEARCH_CURSOR_PREFIX}{offset}")
}

/// Encodes a position in the search index's ranked result list.
pub fn encode_index_cursor(offset: usize) -> String {
    format!("{INDEX_CURSOR_PREFIX}{offset}")
}

/// Decodes a cursor made by `encode_search_cursor` or `encode_index_cursor`; `None` when it is
/// neither.
pub fn decode_search_cursor(cursor: &str) -> Option<usize> {
    cursor
        .strip_prefix(SEARCH_CURSOR_PREFIX)
        .or_else(|| cursor.strip_prefix(INDEX_CURSOR_PREFIX))?
        .parse()
        .ok()
}

/// Decodes a cursor made by `encode_index_cursor` only.
pub fn decode_index_cursor(cursor: &str) -> Option<usize> {
    cursor.strip_prefix(INDEX_CURSOR_PREFIX)?.parse().ok()
}

/// True for a cursor made by `encode_index_cursor`.
pub fn is_index_cursor(cursor: &str) -> bool {
    cursor.starts_with(INDEX_CURSOR_PREFIX)
}

/// Encodes a position in a search of several kinds: how many resource hits and how many
/// tool and prompt hits the pages so far showed.
pub fn encode_kinds_search_cursor(resources: usize, entries: usize) -> String {
    format!("{KINDS_SEARCH_CURSOR_PREFIX}{resources}.{entries}")
}

/// Decodes a cursor made by `encode_kinds_search_cursor`; `None` when it is not one.
pub fn decode_kinds_search_cursor(cursor: &str) -> Option<(usize, usize)> {
    let (resources, entries) = cursor
        .strip_prefix(KINDS_SEARCH_CURSOR_PREFIX)?
        .split_once('.')?;
    Some((resources.parse().ok()?, entries.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_round_trip_and_reject_garbage() {
        let cursor = encode_cursor("file:///tmp/a b/ü");
        assert_eq!(decode_cursor(&cursor).as_deref(), Some("file:///tmp/a b/ü"));
        assert_eq!(decode_cursor("nonsense"), None);
        assert_eq!(decode_cursor("k1.zz"), None);
        assert_eq!(decode_cursor("k1.abc"), None);
        assert_eq!(decode_search_cursor(&encode_search_cursor(40)), Some(40));
        assert_eq!(decode_search_cursor("k1.00"), None);
        assert_eq!(decode_search_cursor(&encode_index_cursor(7)), Some(7));
        assert!(is_index_cursor(&encode_index_cursor(7)));
        assert!(!is_index_cursor(&encode_search_cursor(7)));
        let both = encode_kinds_search_cursor(3, 17);
        assert_eq!(decode_kinds_search_cursor(&both), Some((3, 17)));
        assert_eq!(decode_kinds_search_cursor("m1.3"), None);
        assert_eq!(decode_kinds_search_cursor("s1.3"), None);
    }
}
