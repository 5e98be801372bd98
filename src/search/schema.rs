//! The search index's fields, its word analyzer, and the mapping from entries of every kind to documents and back.

use tantivy::schema::{
    Field, IndexRecordOption, Schema, TextFieldIndexing, TextOptions, Value, STORED,
};
use tantivy::termdict::TermStreamer;
use tantivy::tokenizer::{
    AsciiFoldingFilter, LowerCaser, RemoveLongFilter, SimpleTokenizer, TextAnalyzer, Token,
    TokenFilter, TokenStream, Tokenizer,
};
use tantivy::{InvertedIndexReader, Searcher, TantivyDocument, Term};

use super::{Entry, SearchError};
use crate::protocol::{cut_at_char_boundary, Kind};

/// Bumped whenever the fields, the analyzer or what goes into them change: an index with
/// another version is rebuilt from the store. 2: every kind (templates, tools, prompts). 3: the
/// parts of camelCase words, and the server's name among the words. 4: one `kinds` term per
/// kind (not per set of kinds), no `uri_exact` (the group term is the URI's), no `group` for
/// tools and prompts (their key is their group): 4 terms fewer a resource, 13 fewer filter terms.
/// 5: no `group` field: a listing's key starts with its group (`kind \0 identity \0 server`),
/// and a group's listings are the key terms after its prefix: one distinct term fewer a
/// resource or template (BENCHMARKS.md, "a document 3x cheaper").
pub const SCHEMA_VERSION: u32 = 5;
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
/// `unicode61 remove_diacritics 2` finds, so the two searches agree on what a word is; a
/// camelCase word also yields its parts (`getStockPrice`: `get`, `stock`, `price`, then
/// `getstockprice`), which SQLite's index does not.
pub fn analyzer() -> TextAnalyzer {
    TextAnalyzer::builder(SimpleTokenizer::default())
        .filter(RemoveLongFilter::limit(MAX_WORD_BYTES))
        .filter(CamelCaseParts)
        .filter(LowerCaser)
        .filter(AsciiFoldingFilter)
        .build()
}

/// The words as they stand in the text, one per run of letters and digits, without the parts
/// of camelCase words: the spans a snippet marks never overlap.
pub fn snippet_analyzer() -> TextAnalyzer {
    TextAnalyzer::builder(SimpleTokenizer::default())
        .filter(RemoveLongFilter::limit(MAX_WORD_BYTES))
        .filter(LowerCaser)
        .filter(AsciiFoldingFilter)
        .build()
}

/// The byte offsets where a camelCase word's parts start after the first: before an upper-case
/// letter that follows a lower-case letter or a digit (`getStock`), and before the last of a
/// run of upper-case letters followed by a lower-case one (`HTMLParser`: `HTML`, `Parser`).
fn camel_case_cuts(word: &str) -> Vec<usize> {
    // Every cut is before an upper-case letter after the first: most words have none, and are
    // looked at without allocating (a first load indexes some 20 words an entry).
    if !word.chars().skip(1).any(char::is_uppercase) {
        return Vec::new();
    }
    let letters: Vec<(usize, char)> = word.char_indices().collect();
    let mut cuts = Vec::new();
    for position in 1..letters.len() {
        let (offset, letter) = letters[position];
        let before = letters[position - 1].1;
        let after = letters.get(position + 1).map(|(_, letter)| *letter);
        let starts_word = letter.is_uppercase()
            && (before.is_lowercase()
                || before.is_ascii_digit()
                || (before.is_uppercase() && after.is_some_and(char::is_lowercase)));
        if starts_word {
            cuts.push(offset);
        }
    }
    cuts
}

/// A filter adding the parts of a camelCase word before the word itself (so a query's last
/// word, the one matched as a prefix, stays the whole word).
#[derive(Clone, Copy)]
struct CamelCaseParts;

impl TokenFilter for CamelCaseParts {
    type Tokenizer<T: Tokenizer> = CamelCasePartsFilter<T>;

    fn transform<T: Tokenizer>(self, tokenizer: T) -> CamelCasePartsFilter<T> {
        CamelCasePartsFilter {
            inner: tokenizer,
            pending: Vec::new(),
        }
    }
}

#[derive(Clone)]
struct CamelCasePartsFilter<T> {
    inner: T,
    /// The tokens still to give out, in reverse order.
    pending: Vec<Token>,
}

impl<T: Tokenizer> Tokenizer for CamelCasePartsFilter<T> {
    type TokenStream<'a> = CamelCasePartsStream<'a, T::TokenStream<'a>>;

    fn token_stream<'a>(&'a mut self, text: &'a str) -> Self::TokenStream<'a> {
        self.pending.clear();
        CamelCasePartsStream {
            tail: self.inner.token_stream(text),
            pending: &mut self.pending,
            current: Token::default(),
            from_tail: false,
        }
    }
}

struct CamelCasePartsStream<'a, T> {
    tail: T,
    pending: &'a mut Vec<Token>,
    current: Token,
    /// The token is the tail's own (a word without parts, most words): given out as it is,
    /// not copied.
    from_tail: bool,
}

impl<T: TokenStream> TokenStream for CamelCasePartsStream<'_, T> {
    fn advance(&mut self) -> bool {
        if let Some(next) = self.pending.pop() {
            self.current = next;
            self.from_tail = false;
            return true;
        }
        if !self.tail.advance() {
            return false;
        }
        let token = self.tail.token();
        let cuts = camel_case_cuts(&token.text);
        if cuts.is_empty() {
            self.from_tail = true;
            return true;
        }
        self.from_tail = false;
        // The whole word last; the parts (each spanning the whole word) before it.
        self.pending.push(token.clone());
        let mut end = token.text.len();
        for start in cuts.iter().rev().copied().chain([0]) {
            let mut part = token.clone();
            part.text = token.text[start..end].to_string();
            self.pending.push(part);
            end = start;
        }
        self.current = self.pending.pop().unwrap_or_default();
        true
    }

    fn token(&self) -> &Token {
        match self.from_tail {
            true => self.tail.token(),
            false => &self.current,
        }
    }

    fn token_mut(&mut self) -> &mut Token {
        match self.from_tail {
            true => self.tail.token_mut(),
            false => &mut self.current,
        }
    }
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
    /// `kind \0 identity \0 server` (the identity's NULs escaped): one document per listing,
    /// the handle for deleting it. Its start, up to the server, is the listing's group: the
    /// listings the merged view chooses one of, every server's listing of one URI or URI
    /// template, found as the key terms that start with it (`group_terms`); also the exact-URI
    /// lookup. A tool or prompt is its own group, since each server's is a different one.
    pub key: Field,
    pub server: Field,
    pub uri: Field,
    pub name: Field,
    pub name_exact: Field,
    pub title: Field,
    pub description: Field,
    pub mime_type: Field,
    pub kind: Field,
    /// The entry's kind with its server (`s:server\0tool`), and the kind alone when this
    /// listing wins (`w:tool`). A search of one kind filters on one such term in place of the
    /// server or `wins` filter: the query keeps as many terms as a search of every kind, a pure
    /// intersection (block-max pruning). A search of two or three kinds filters on any of
    /// their terms (a union, scored alike): rarer, and cheaper than a term for every set of
    /// kinds in every document (14 a resource, which cost a first load a fifth of its
    /// indexing time).
    pub kinds: Field,
    /// "1" when this listing is the one the merged catalog shows for its URI.
    pub wins: Field,
    /// "1" when more than one server lists this URI.
    pub shared: Field,
    /// Every searchable word: name and title twice (they outrank URI and description), then
    /// URI (or URI template), description, and a tool's input properties or a prompt's
    /// arguments (names and descriptions).
    /// And the server's name, once.
    pub all: Field,
}

impl Fields {
    pub fn new() -> Fields {
        let mut builder = Schema::builder();
        // Filters take part in block-max intersections, which need term frequencies.
        let filter_only = TextOptions::default().set_indexing_options(
            TextFieldIndexing::default()
                .set_tokenizer("raw")
                .set_index_option(IndexRecordOption::WithFreqs)
                .set_fieldnorms(false),
        );
        let filter = filter_only.clone().set_stored();
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
        let name = builder.add_text_field("name", STORED);
        let name_exact = builder.add_text_field("name_exact", lookup.clone());
        let title = builder.add_text_field("title", STORED);
        let description = builder.add_text_field("description", STORED);
        let mime_type = builder.add_text_field("mime_type", filter.clone());
        let kind = builder.add_text_field("kind", filter.clone());
        let kinds = builder.add_text_field("kinds", filter_only);
        let wins = builder.add_text_field("wins", filter);
        let shared = builder.add_text_field("shared", lookup.set_stored());
        let all = builder.add_text_field("all", words);
        Fields {
            schema: builder.build(),
            key,
            server,
            uri,
            name,
            name_exact,
            title,
            description,
            mime_type,
            kind,
            kinds,
            wins,
            shared,
            all,
        }
    }

    pub fn register_analyzer(index: &tantivy::Index) {
        index.tokenizers().register(WORDS, analyzer());
    }

    /// The listing of `identity` (a URI, a URI template, a name) of `kind` by `server`.
    pub fn key_term(&self, kind: Kind, server: &str, identity: &str) -> Term {
        Term::from_field_text(self.key, &key(kind, server, identity))
    }

    /// The key terms of every listing the merged view chooses among with the listing of
    /// `identity` by `server` that `searcher`'s segments hold (a term of deleted documents
    /// only matches nothing). A tool or prompt is alone in its group: its own key.
    pub fn group_terms(
        &self,
        searcher: &Searcher,
        kind: Kind,
        server: &str,
        identity: &str,
    ) -> Result<Vec<Term>, SearchError> {
        if matches!(kind, Kind::Tool | Kind::Prompt) {
            return Ok(vec![self.key_term(kind, server, identity)]);
        }
        let range = group_range(kind, identity);
        let mut keys: Vec<String> = Vec::new();
        for segment in searcher.segment_readers() {
            let terms = segment.inverted_index(self.key)?;
            let mut stream = terms_between(&terms, &range)?;
            while stream.advance() {
                // Every key was written from a `String`.
                let Ok(key) = std::str::from_utf8(stream.key()) else {
                    continue;
                };
                if !keys.iter().any(|known| known == key) {
                    keys.push(key.to_string());
                }
            }
        }
        Ok(keys
            .iter()
            .map(|key| Term::from_field_text(self.key, key))
            .collect())
    }

    pub fn kind_term(&self, kind: Kind) -> Term {
        Term::from_field_text(self.kind, kind.as_str())
    }

    /// The filter terms of a search of `kinds` on `server` (or the merged view), any of which
    /// a listing holds; empty when every kind is searched, and the server or `wins` term
    /// filters alone.
    pub fn kinds_terms(&self, kinds: &[Kind], server: Option<&str>) -> Vec<Term> {
        let mut wanted: Vec<Kind> = kinds.to_vec();
        wanted.sort();
        wanted.dedup();
        if wanted.len() >= Kind::ALL.len() {
            return Vec::new();
        }
        wanted
            .into_iter()
            .map(|kind| Term::from_field_text(self.kinds, &scope(kind, server)))
            .collect()
    }

    /// The listings of a resource or a template at exactly `uri`, by any server.
    pub fn uri_terms(&self, searcher: &Searcher, uri: &str) -> Result<Vec<Term>, SearchError> {
        let mut terms = self.group_terms(searcher, Kind::Resource, "", uri)?;
        terms.extend(self.group_terms(searcher, Kind::Template, "", uri)?);
        Ok(terms)
    }

    /// The exact-name key: names match whatever their case.
    pub fn name_term(&self, name: &str) -> Term {
        Term::from_field_text(self.name_exact, &key_text(name.trim().to_lowercase()))
    }

    pub fn flag_term(&self, field: Field) -> Term {
        Term::from_field_text(field, "1")
    }

    pub fn document(&self, entry: &Entry, flags: Flags) -> TantivyDocument {
        let mut document = TantivyDocument::default();
        document.add_text(self.key, key(entry.kind, &entry.server, entry.identity()));
        document.add_text(self.server, &entry.server);
        if !entry.uri.is_empty() {
            document.add_text(self.uri, &entry.uri);
        }
        document.add_text(self.name, &entry.name);
        document.add_text(self.name_exact, key_text(entry.name.trim().to_lowercase()));
        if let Some(title) = &entry.title {
            document.add_text(self.title, title);
        }
        if let Some(description) = &entry.description {
            document.add_text(self.description, description);
        }
        if let Some(mime_type) = &entry.mime_type {
            document.add_text(self.mime_type, mime_type);
        }
        document.add_text(self.kind, entry.kind.as_str());
        document.add_text(self.kinds, scope(entry.kind, Some(&entry.server)));
        if flags.wins {
            document.add_text(self.kinds, scope(entry.kind, None));
        }
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
            entry.inputs.as_deref().unwrap_or(""),
            entry.server.as_str(),
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

    /// The entry and flags a stored document was made from; `inputs` is indexed, not stored,
    /// so it comes back empty (only resources and templates are ever written again from
    /// their stored fields: a tool or prompt is alone in its group).
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
            // Written by `document` from a `Kind`, so it parses; a resource otherwise.
            kind: text(self.kind)
                .and_then(|kind| kind.parse().ok())
                .unwrap_or(Kind::Resource),
            inputs: None,
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

/// A listing's key: its group, then its server.
fn key(kind: Kind, server: &str, identity: &str) -> String {
    let mut key = group_text(kind, identity);
    key.push('\0');
    key.push_str(server);
    key
}

/// The start of the key of every listing of `identity` of `kind`: `kind \0 identity`, with
/// the identity's NULs escaped (so a key holds no NUL but the two that end its kind and its
/// group, and no other group's keys start with this one's), and a long one hashed.
fn group_text(kind: Kind, identity: &str) -> String {
    let escaped = match identity.contains(['\0', '\u{1}']) {
        true => identity
            .replace('\u{1}', "\u{1}\u{1}")
            .replace('\0', "\u{1}0"),
        false => identity.to_string(),
    };
    key_text(format!("{kind}\0{escaped}"))
}

/// The key terms of every listing of `identity` of `kind` are at least the first bytes and
/// below the second.
fn group_range(kind: Kind, identity: &str) -> (Vec<u8>, Vec<u8>) {
    group_bounds(group_text(kind, identity).as_bytes())
}

/// The key terms of every listing of `group` (as `group_of_key` gives it) are at least the
/// first bytes and below the second.
pub fn group_bounds(group: &[u8]) -> (Vec<u8>, Vec<u8>) {
    let mut first = group.to_vec();
    first.push(0);
    let mut after = group.to_vec();
    after.push(1);
    (first, after)
}

/// A segment's terms from the first bytes of `range` (included) to its second (excluded).
pub fn terms_between<'a>(
    terms: &'a InvertedIndexReader,
    (first, after): &(Vec<u8>, Vec<u8>),
) -> Result<TermStreamer<'a>, SearchError> {
    Ok(terms
        .terms()
        .range()
        .ge(first)
        .lt(after)
        .into_stream()
        .map_err(tantivy::TantivyError::from)?)
}

/// The group a key term starts with: up to its second NUL (the first ends its kind).
pub fn group_of_key(key: &[u8]) -> &[u8] {
    let mut nuls = key.iter().enumerate().filter(|(_, byte)| **byte == 0);
    match nuls.nth(1) {
        Some((end, _)) => &key[..end],
        None => key,
    }
}

/// The bytes every key term of a listing of `kind` starts with, and the first bytes after all
/// of them.
pub fn kind_range(kind: Kind) -> (Vec<u8>, Vec<u8>) {
    let first = format!("{kind}\0").into_bytes();
    let mut after = first.clone();
    if let Some(last) = after.last_mut() {
        *last += 1;
    }
    (first, after)
}

/// A kind with a server, or in the merged view (`None`).
fn scope(kind: Kind, server: Option<&str>) -> String {
    match server {
        Some(server) => key_text(format!("s:{server}\0{kind}")),
        None => format!("w:{kind}"),
    }
}

/// `text` itself when short, else its start and a hash of the whole (FNV-1a, stable forever).
fn key_text(text: String) -> String {
    if text.len() <= MAX_KEY_BYTES {
        return text;
    }
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in text.as_bytes() {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    format!(
        "{}#{hash:016x}#{}",
        cut_at_char_boundary(&text, MAX_KEY_BYTES - 64),
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
    fn camel_case_words_yield_their_parts_then_the_whole_word() {
        let words = |text: &str| -> Vec<String> {
            words_with_spans(&mut analyzer(), text)
                .into_iter()
                .map(|(word, _, _)| word)
                .collect()
        };
        assert_eq!(
            words("getStockPrice now"),
            ["get", "stock", "price", "getstockprice", "now"]
        );
        assert_eq!(words("HTMLParser"), ["html", "parser", "htmlparser"]);
        assert_eq!(words("mp3Player"), ["mp3", "player", "mp3player"]);
        assert_eq!(words("NASA nasa Nasa"), ["nasa", "nasa", "nasa"]);
        let spans = words_with_spans(&mut snippet_analyzer(), "getStockPrice now");
        assert_eq!(spans.len(), 2);
    }

    #[test]
    fn a_search_of_some_kinds_filters_on_a_term_of_each_kind() {
        let fields = Fields::new();
        let values = |terms: Vec<Term>| -> Vec<String> {
            terms
                .iter()
                .filter_map(|term| term.value().as_str().map(str::to_string))
                .collect()
        };
        // The same terms whatever the order asked in, each kind once.
        let asked = values(fields.kinds_terms(&[Kind::Prompt, Kind::Tool], None));
        let again = values(fields.kinds_terms(&[Kind::Tool, Kind::Prompt, Kind::Tool], None));
        assert_eq!(asked, again);
        assert_eq!(asked, ["w:tool", "w:prompt"]);
        let on_server = values(fields.kinds_terms(&[Kind::Tool], Some("fx")));
        assert_eq!(on_server, ["s:fx\0tool"]);
        assert!(fields.kinds_terms(Kind::ALL, None).is_empty());
        assert!(fields.kinds_terms(&[], Some("fx")).is_empty());
        // A winning tool holds the merged view's term and its server's, a losing one only its
        // server's; a tool has no group field (its key is its group).
        let entry = Entry {
            kind: Kind::Tool,
            server: "fx".into(),
            uri: String::new(),
            name: "t".into(),
            title: None,
            description: None,
            mime_type: None,
            inputs: None,
        };
        let terms = |flags: Flags| -> Vec<String> {
            fields
                .document(&entry, flags)
                .get_all(fields.kinds)
                .filter_map(|value| value.as_str().map(str::to_string))
                .collect()
        };
        let wins = terms(Flags {
            wins: true,
            shared: false,
        });
        assert_eq!(wins, ["s:fx\0tool", "w:tool"]);
        assert_eq!(terms(Flags::default()), ["s:fx\0tool"]);
    }

    #[test]
    fn a_key_starts_with_its_group_and_no_other_group_reaches_into_it() {
        let key =
            |kind: Kind, server: &str, identity: &str| key(kind, server, identity).into_bytes();
        let within = |key: &[u8], (first, after): (Vec<u8>, Vec<u8>)| {
            first.as_slice() <= key && key < after.as_slice()
        };
        let listing = key(Kind::Resource, "fx", "file:///a");
        assert_eq!(listing, b"resource\0file:///a\0fx");
        assert_eq!(group_of_key(&listing), b"resource\0file:///a");
        assert!(within(&listing, group_range(Kind::Resource, "file:///a")));
        assert!(within(&listing, kind_range(Kind::Resource)));
        assert!(!within(&listing, group_range(Kind::Template, "file:///a")));
        assert!(!within(&listing, group_range(Kind::Resource, "file:///")));
        // An identity holding a NUL (or the escape's own byte) stays inside its own group.
        for odd in ["file:///a\0fx", "file:///a\u{1}0fx", "file:///a\0", "\u{1}"] {
            let listing = key(Kind::Resource, "fy", odd);
            assert!(
                within(&listing, group_range(Kind::Resource, odd)),
                "{odd:?}"
            );
            assert!(
                !within(&listing, group_range(Kind::Resource, "file:///a")),
                "{odd:?}"
            );
            assert_eq!(
                listing.iter().filter(|byte| **byte == 0).count(),
                2,
                "{odd:?}"
            );
        }
        assert_ne!(
            group_text(Kind::Resource, "a\0b"),
            group_text(Kind::Resource, "a\u{1}0b")
        );
        // A long identity's group is hashed; its keys still start with it.
        let long = format!("file:///{}", "u".repeat(2000));
        let listing = key(Kind::Resource, "fx", &long);
        assert!(listing.len() <= MAX_KEY_BYTES + 3);
        assert!(within(&listing, group_range(Kind::Resource, &long)));
    }

    #[test]
    fn long_keys_are_hashed_and_distinct() {
        let a = format!("{}a", "u".repeat(2000));
        let b = format!("{}b", "u".repeat(2000));
        assert!(key_text(a.clone()).len() <= MAX_KEY_BYTES);
        assert_ne!(key_text(a), key_text(b));
        assert_eq!(key_text("short".into()), "short");
        let wide = "\u{e9}".repeat(1000);
        assert!(key_text(wide).len() <= MAX_KEY_BYTES);
    }
}
