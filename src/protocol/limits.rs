//! The socket's bounds and defaults: line and page sizes, search and change limits, the
//! longest keys, URIs, names and cursors a client may send, the default highlight; and the one
//! cut of a text to a byte bound on a character boundary (`cut_at_char_boundary`).

/// The longest request line the socket accepts; longer ones get an error and the connection closes.
pub const MAX_LINE_BYTES: usize = 1 << 20;
/// Entries per page of `resources/list` and `resources/templates/list`.
pub const PAGE_SIZE: usize = 500;
/// Search pages reach this deep at most; a cursor past it is not one we made.
pub const MAX_SEARCH_OFFSET: usize = 1_000_000;
pub const DEFAULT_SEARCH_LIMIT: usize = 20;
pub const MAX_SEARCH_LIMIT: usize = 1000;
pub const DEFAULT_CHANGES_LIMIT: usize = 1000;
pub const MAX_CHANGES_LIMIT: usize = 10_000;
/// The longest highlight marker a search may ask for, in bytes (each of the two).
pub const MAX_HIGHLIGHT_BYTES: usize = 32;
/// The longest raw (FTS5) search query, in bytes; a longer plain query is cut to this (the
/// store uses at most its first 32 words anyway).
pub const MAX_QUERY_BYTES: usize = 4 << 10;
/// The longest search cursor a client may send back (an offset and a fingerprint; ours are far
/// shorter).
pub const MAX_CURSOR_BYTES: usize = 1 << 10;
/// The longest key an entry may have: a URI, a URI template, a tool's or prompt's name (or the
/// key a followed mirror gives it). A walk leaves out an entry with a longer one (counted in
/// `lastWalk.skipped`), so every stored entry can be asked for by its key and every list
/// cursor fits `MAX_LIST_CURSOR_BYTES`.
pub const MAX_KEY_BYTES: usize = MAX_URI_BYTES;
/// The longest list cursor a client may send back. A list cursor is the last key of its page
/// (with its server and kind) in hex, so its bound follows the keys' bound: a fixed 1 KiB
/// refused the next page after any URI over about 500 bytes.
pub const MAX_LIST_CURSOR_BYTES: usize = 16 + 2 * (MAX_NAME_BYTES + MAX_KEY_BYTES + 16);
/// The longest URI a client may ask about (`resources/read`, `catalog/resource`).
pub const MAX_URI_BYTES: usize = 64 << 10;
/// The longest server name, MIME type or protocol version a client may send.
pub const MAX_NAME_BYTES: usize = 1 << 10;
/// The markers around matched words in snippets unless the caller chooses others.
pub const DEFAULT_HIGHLIGHT: (&str, &str) = ("\u{ab}", "\u{bb}");

/// The longest prefix of `text` of at most `limit` bytes that ends on a character boundary.
pub fn cut_at_char_boundary(text: &str, limit: usize) -> &str {
    if text.len() <= limit {
        return text;
    }
    let mut end = limit;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}
