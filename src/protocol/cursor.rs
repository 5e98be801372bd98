//! The opaque page cursors of the socket: keyset cursors for lists, offsets for search.

const CURSOR_PREFIX: &str = "k1.";
const SEARCH_CURSOR_PREFIX: &str = "s1.";

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

/// Decodes a cursor made by `encode_search_cursor`; `None` when it is not one.
pub fn decode_search_cursor(cursor: &str) -> Option<usize> {
    cursor.strip_prefix(SEARCH_CURSOR_PREFIX)?.parse().ok()
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
    }
}
