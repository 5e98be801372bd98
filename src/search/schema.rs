//! The search index's fields, its word analyzer, and the mapping from entries to documents and back.

use tantivy::schema::{
    Field, IndexRecordOption, Schema, TextFieldIndexing, TextOptions, Value, STORED,
};
use tantivy::tokenizer::{
    AsciiFoldingFilter, LowerCaser, RemoveLongFilter, SimpleTokenizer, TextAnalyzer, TokenStream,
};
use tantivy::{TantivyDocument, Term};

use super::Entry;

/// Bumped whenever the fields, the analyzer or what goes into them change: an index with
/// another version is rebuilt from the store.
pub const SCHEMA_VERSION: u32 = 1;
/// The analyzer's name in tantivy's tokenizer registry.
const WORDS: &str = "mcp_words";
/// Words longer than this many bytes are not indexed (nobody types them).
const MAX_WORD_BYTES: usize = 255;
/// The most text of one entry that goes into the word index; the rest is stored, not searched.
pub const MAX_INDEXED_BYTES: usize = 1 << 20;
/// Exact-match keys longer than this are replaced by a prefix and a hash: tantivy drops terms
/// near 64 KiB, and a key that is dropped could never be deleted.
const MAX_KEY_BYTES: usize = 512;

/// Letters and digits, lowercased, diacritics removed: the same words SQLite's
/// `unicode61 remove_diacritics 2` finds, so the two searches agree on what a word is.
pub fn analyzer() -> TextAnalyzer {
    TextAnalyzer::builder(SimpleTokenizer::default())
        .filter(RemoveLongFilter::limit(MAX_WORD_BYTES))
        .filter(LowerCaser)
        .filter(AsciiFoldingFilter)
        .build()
}

/// The normalized words of `text` with their byte spans in it.
pub fn words_with_spans(analyzer: &mut TextAnalyzer, text: &str) -> Vec<(String, usize, usize)> {
    let mut stream = analyzer.token_stream(text);
    let mut words = Vec::new();
    while stream.advance() {
        let token = stream.token();
        words.push((token.text.clone(), token.offset_from, token.offset_to));
    }
    words
}

/// The field handles, built once per open index.
#[derive(Clone)]
pub struct Fields {
    pub schema: Schema,
    /// `server \0 uri`: one document per listing, the handle for deleting it.
    pub key: Field,
    pub server: Field,
    pub uri: Field,
    pub uri_exact: Field,
    pub name: Field,
    pub name_exact: Field,
    pub title: Field,
    pub description: Field,
    pub mime_type: Field,
    pub kind: Field,
    /// "1" when this listing is the one the merged catalog shows for its URI.
    pub wins: Field,
    /// "1" when more than one server lists this URI.
    pub shared: Field,
    /// Every searchable word: name and title twice (they outrank URI and description), then
    /// URI and description.
    pub all: Field,
}

impl Fields {
    pub fn new() -> Fields {
        let mut builder = Schema::builder();
        // Filters take part in block-max intersections, which need term frequencies.
        let filter = TextOptions::default()
            .set_indexing_options(
                TextFieldIndexing::default()
                    .set_tokenizer("raw")
                    .set_index_option(IndexRecordOption::WithFreqs)
                    .set_fieldnorms(false),
            )
            .set_stored();
        let lookup = TextOptions::default().set_indexing_options(
            TextFieldIndexing::default()
                .set_tokenizer("raw")
                .set_index_option(IndexRecordOption::Basic)
                .set_fieldnorms(false),
        );
        let words = TextOptions::default().set_indexing_options(
            TextFieldIndexing::default()
                .set_tokenizer(WORDS)
                .set_index_option(IndexRecordOption::WithFreqs),
        );
        let key = builder.add_text_field("key", lookup.clone());
        let server = builder.add_text_field("server", filter.clone());
        let uri = builder.add_text_field("uri", STORED);
        let uri_exact = builder.add_text_field("uri_exact", lookup.clone());
        let name = builder.add_text_field("name", STORED);
        let name_exact = builder.add_text_field("name_exact", lookup.clone());
        let title = builder.add_text_field("title", STORED);
        let description = builder.add_text_field("description", STORED);
        let mime_type = builder.add_text_field("mime_type", filter.clone());
        let kind = builder.add_text_field("kind", filter.clone());
        let wins = builder.add_text_field("wins", filter);
        let shared = builder.add_text_field("shared", lookup.set_stored());
        let all = builder.add_text_field("all", words);
        Fields {
            schema: builder.build(),
            key,
            server,
            uri,
            uri_exact,
            name,
            name_exact,
            title,
            description,
            mime_type,
            kind,
            wins,
            shared,
            all,
        }
    }

    pub fn register_analyzer(index: &tantivy::Index) {
        index.tokenizers().register(WORDS, analyzer());
    }

    pub fn key_term(&self, server: &str, uri: &str) -> Term {
        Term::from_field_text(self.key, &key_text(&format!("{server}\0{uri}")))
    }

    pub fn uri_term(&self, uri: &str) -> Term {
        Term::from_field_text(self.uri_exact, &key_text(uri))
    }

    /// The exact-name key: names match whatever their case.
    pub fn name_term(&self, name: &str) -> Term {
        Term::from_field_text(self.name_exact, &key_text(&name.trim().to_lowercase()))
    }

    pub fn flag_term(&self, field: Field) -> Term {
        Term::from_field_text(field, "1")
    }

    pub fn document(&self, entry: &Entry, flags: Flags) -> TantivyDocument {
        let mut document = TantivyDocument::default();
        document.add_text(
            self.key,
            key_text(&format!("{}\0{}", entry.server, entry.uri)),
        );
        document.add_text(self.server, &entry.server);
        document.add_text(self.uri, &entry.uri);
        document.add_text(self.uri_exact, key_text(&entry.uri));
        document.add_text(self.name, &entry.name);
        document.add_text(self.name_exact, key_text(&entry.name.trim().to_lowercase()));
        if let Some(title) = &entry.title {
            document.add_text(self.title, title);
        }
        if let Some(description) = &entry.description {
            document.add_text(self.description, description);
        }
        if let Some(mime_type) = &entry.mime_type {
            document.add_text(self.mime_type, mime_type);
        }
        document.add_text(self.kind, &entry.kind);
        document.add_text(self.wins, if flags.wins { "1" } else { "0" });
        document.add_text(self.shared, if flags.shared { "1" } else { "0" });
        let mut budget = MAX_INDEXED_BYTES;
        let title = entry.title.as_deref().unwrap_or("");
        let texts = [
            entry.name.as_str(),
            entry.name.as_str(),
            title,
            title,
            entry.uri.as_str(),
            entry.description.as_deref().unwrap_or(""),
        ];
        for text in texts {
            if text.is_empty() || budget == 0 {
                continue;
            }
            let text = cut_at_char_boundary(text, budget);
            budget -= text.len();
            document.add_text(self.all, text);
        }
        document
    }

    /// The entry and flags a stored document was made from.
    pub fn entry(&self, document: &TantivyDocument) -> (Entry, Flags) {
        let text = |field: Field| {
            document
                .get_first(field)
                .and_then(|value| value.as_str())
                .map(str::to_string)
        };
        let entry = Entry {
            server: text(self.server).unwrap_or_default(),
            uri: text(self.uri).unwrap_or_default(),
            name: text(self.name).unwrap_or_default(),
            title: text(self.title),
            description: text(self.description),
            mime_type: text(self.mime_type),
            kind: text(self.kind).unwrap_or_default(),
        };
        let flags = Flags {
            wins: text(self.wins).as_deref() == Some("1"),
            shared: text(self.shared).as_deref() == Some("1"),
        };
        (entry, flags)
    }
}

/// The merged-catalog flags of one listing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Flags {
    pub wins: bool,
    pub shared: bool,
}

fn cut_at_char_boundary(text: &str, max_bytes: usize) -> &str {
    if text.len() <= max_bytes {
        return text;
    }
    let mut end = max_bytes;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// `text` itself when short, else its start and a hash of the whole (FNV-1a, stable forever).
fn key_text(text: &str) -> String {
    if text.len() <= MAX_KEY_BYTES {
        return text.to_string();
    }
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in text.as_bytes() {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    format!(
        "{}#{hash:016x}#{}",
        cut_at_char_boundary(text, MAX_KEY_BYTES - 64),
        text.len()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_are_folded_like_fts5_unicode61() {
        let mut analyzer = analyzer();
        let words: Vec<String> =
            words_with_spans(&mut analyzer, "Caf\u{e9} K\u{f6}ln -32602 topic-7 doc_1")
                .into_iter()
                .map(|(word, _, _)| word)
                .collect();
        assert_eq!(words, ["cafe", "koln", "32602", "topic", "7", "doc", "1"]);
        let long = "x".repeat(300);
        assert!(words_with_spans(&mut analyzer, &long).is_empty());
    }

    #[test]
    fn long_keys_are_hashed_and_distinct() {
        let a = format!("{}a", "u".repeat(2000));
        let b = format!("{}b", "u".repeat(2000));
        assert!(key_text(&a).len() <= MAX_KEY_BYTES);
        assert_ne!(key_text(&a), key_text(&b));
        assert_eq!(key_text("short"), "short");
        let wide = "\u{e9}".repeat(1000);
        assert!(key_text(&wide).len() <= MAX_KEY_BYTES);
    }
}
