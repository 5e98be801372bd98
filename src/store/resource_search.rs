//! SQLite's FTS5 search of resources: the request, resources' statement through the one FTS5
//! search of every kind (`full_text_search`), a bounded page of ranked hits, and their snippets.

use std::time::Instant;

use rusqlite::{params, Connection, OptionalExtension};

use super::full_text_search::{self, FullTextQuery};
use super::snippet::{snippet, SNIPPET_WORDS};
use super::{SearchHit, StoreError};
use crate::protocol::DEFAULT_HIGHLIGHT;

/// A `catalog/search` request, after the API has checked its params: the one request every
/// engine reads (SQLite's resource and entry searches, the search index, the semantic index).
#[derive(Debug, Clone)]
pub struct SearchRequest {
    pub query: String,
    pub server: Option<String>,
    /// Without `server`: search the listings of these servers only (a view's), every listing,
    /// winning or not; the caller keeps each key's winner among them. `None`: every server,
    /// the merged catalog's winner of each key.
    pub servers: Option<std::collections::BTreeSet<String>>,
    pub mime_type: Option<String>,
    /// The kinds searched; every kind when empty. SQLite's resource search finds resources
    /// only, its entry search tools and prompts only.
    pub kinds: Vec<crate::protocol::Kind>,
    /// Use the query as raw FTS5 syntax instead of plain words.
    pub raw: bool,
    pub limit: usize,
    /// How many ranked hits to skip: the position a search cursor encodes.
    pub offset: usize,
    /// The markers put around matched words in snippets.
    pub highlight: (String, String),
    /// When set, the query is cancelled (`StoreError::SearchTimedOut`) once this passes.
    pub deadline: Option<Instant>,
    /// The ranking asked for (`catalog/search`'s `mode`); the daemon's default when `None`.
    /// SQLite ranks by words only.
    pub mode: Option<crate::protocol::SearchMode>,
}

impl SearchRequest {
    pub fn new(query: impl Into<String>, limit: usize) -> SearchRequest {
        SearchRequest {
            query: query.into(),
            server: None,
            servers: None,
            mime_type: None,
            kinds: Vec::new(),
            raw: false,
            limit,
            offset: 0,
            highlight: (DEFAULT_HIGHLIGHT.0.into(), DEFAULT_HIGHLIGHT.1.into()),
            deadline: None,
            mode: None,
        }
    }
}

/// FTS5's own snippets (of raw queries) keep as many words as ours.
const SNIPPET_TOKENS: i64 = SNIPPET_WORDS as i64;
/// The most of a hit's title, description or snippet a search answer carries; the entry
/// itself (`catalog/resource`) has the whole text.
pub const MAX_HIT_TEXT_BYTES: usize = 1 << 10;
/// A search page stops growing past this many bytes of hits; the cursor continues after the
/// last hit it carries.
pub const MAX_SEARCH_PAGE_BYTES: usize = 4 << 20;
/// One page of ranked hits and the offset of the next page, if there is one; cancelled with
/// `StoreError::SearchTimedOut` when the request's deadline passes. Through the one FTS5
/// search of every kind (`full_text_search`).
pub fn search(
    connection: &Connection,
    request: &SearchRequest,
) -> Result<(Vec<SearchHit>, Option<usize>), StoreError> {
    let query = FullTextQuery {
        text: &request.query,
        raw: request.raw,
        deadline: request.deadline,
    };
    let page = full_text_search::search(connection, query, |query, blame| {
        resources_page(connection, request, query, blame)
    })?;
    Ok(page.unwrap_or((Vec::new(), None)))
}

/// `search`, and the full-text backlog read in the same snapshot, so the answer's note says
/// the index is behind exactly when the rows it searched were. (Read apart, a batch of the
/// backlog committed between the two could make the last rows look indexed, or a large swap
/// committed between them could bring rows that were not.) A database no daemon of this
/// version migrated has no backlog table, so nothing behind.
pub fn search_noting_backlog(
    connection: &Connection,
    request: &SearchRequest,
) -> Result<super::FullTextPage, StoreError> {
    let snapshot = connection.unchecked_transaction()?;
    let (hits, next) = search(&snapshot, request)?;
    let behind = super::writer::full_text::full_text_backlog(&snapshot).unwrap_or(0);
    snapshot.commit()?;
    Ok(super::FullTextPage {
        hits,
        next,
        note: super::full_text_note(behind),
    })
}

/// A request's `servers` as the JSON array its statements read with `json_each`.
pub(super) fn servers_json(request: &SearchRequest) -> Option<String> {
    let servers = request.servers.as_ref()?;
    Some(serde_json::to_string(servers).unwrap_or_else(|_| "[]".to_string()))
}

/// Resources' statement: `resources_fts`, the server and MIME type filters, the merged view
/// (a URI once, from the server that wins it), ties by row id; then the page's snippets.
fn resources_page(
    connection: &Connection,
    request: &SearchRequest,
    query: &str,
    blame: &dyn Fn(rusqlite::Error) -> StoreError,
) -> Result<(Vec<SearchHit>, Option<usize>), StoreError> {
    // Ranking happens in the inner query, so only the top `limit` rows pay for the joins.
    let mut statement = connection
        .prepare_cached(
            // Long texts are read cut (a hit carries at most MAX_HIT_TEXT_BYTES of each, and
            // a snippet comes from the first few thousand characters), so a huge entry costs
            // a page no memory.
            "SELECT s.name, r.uri, substr(r.name, 1, 4096), substr(r.title, 1, 4096),
                    substr(r.description, 1, 4096), substr(r.mime_type, 1, 4096), hits.rank, r.id
             FROM (SELECT f.rowid AS id, f.rank AS rank FROM resources_fts f
                   JOIN resources fr ON fr.id = f.rowid
                   JOIN servers fs ON fs.id = fr.server_id
                   WHERE resources_fts MATCH ?1
                     AND (?2 IS NULL OR fs.name = ?2)
                     AND (?3 IS NULL OR fr.mime_type = ?3)
                     AND (?2 IS NOT NULL OR ?6 IS NULL
                          OR fs.name IN (SELECT value FROM json_each(?6)))
                     -- Without a server filter, search the merged catalog: a URI listed by
                     -- several servers is found once, from the server that wins it.
                     AND (?2 IS NOT NULL OR ?6 IS NOT NULL OR NOT EXISTS (
                         SELECT 1 FROM resources r2 JOIN servers s2 ON s2.id = r2.server_id
                         WHERE r2.uri = fr.uri AND r2.server_id != fr.server_id
                           AND (s2.priority < fs.priority
                                OR (s2.priority = fs.priority AND s2.name < fs.name))))
                   -- Ties in rank go by row id, so pages are slices of one order.
                   ORDER BY f.rank, f.rowid LIMIT ?4 OFFSET ?5) hits
             JOIN resources r ON r.id = hits.id JOIN servers s ON s.id = r.server_id
             ORDER BY hits.rank, hits.id",
        )
        .map_err(blame)?;
    let rows = statement
        .query_map(
            params![
                query,
                request.server,
                request.mime_type,
                (request.limit + 1) as i64,
                request.offset as i64,
                servers_json(request)
            ],
            |row| {
                Ok((
                    SearchHit {
                        kind: crate::protocol::Kind::Resource,
                        server: row.get(0)?,
                        uri: row.get(1)?,
                        name: row.get(2)?,
                        title: row.get(3)?,
                        description: row.get(4)?,
                        mime_type: row.get(5)?,
                        score: full_text_search::score(row.get(6)?),
                        snippet: None,
                    },
                    row.get::<_, i64>(7)?,
                ))
            },
        )
        .map_err(blame)?;
    let mut hits = rows.collect::<Result<Vec<_>, _>>().map_err(blame)?;
    let mut next = (hits.len() > request.limit).then_some(request.offset + request.limit);
    hits.truncate(request.limit);
    let kept = hits_within_page_bytes(&hits);
    if kept < hits.len() {
        hits.truncate(kept);
        next = Some(request.offset + kept);
    }
    Ok((
        with_snippets(connection, request, query, hits, blame)?,
        next,
    ))
}

/// The page's hits with their snippets, each hit's texts bounded.
fn with_snippets(
    connection: &Connection,
    request: &SearchRequest,
    query: &str,
    hits: Vec<(SearchHit, i64)>,
    blame: &dyn Fn(rusqlite::Error) -> StoreError,
) -> Result<Vec<SearchHit>, StoreError> {
    // Snippets only for the rows returned. For plain words they are built here from the hit's
    // own fields: asking FTS5 per hit re-runs the match (and re-expands a prefix) every time,
    // which profiled at 100 ms and more per hit for common prefixes. Raw FTS5 syntax can mean
    // anything, so FTS5 builds those.
    if !request.raw {
        let terms = snippet_terms(&request.query);
        let page = hits
            .into_iter()
            .map(|(mut hit, _)| {
                hit.snippet = snippet_from_fields(&hit, &terms, &request.highlight);
                bound_hit_text(&mut hit);
                hit
            })
            .collect();
        return Ok(page);
    }
    let mut snippet = connection
        .prepare_cached(
            "SELECT snippet(resources_fts, -1, ?3, ?4, '\u{2026}', ?5) FROM resources_fts
             WHERE resources_fts MATCH ?1 AND rowid = ?2",
        )
        .map_err(blame)?;
    let mut page = Vec::with_capacity(hits.len());
    for (mut hit, id) in hits {
        hit.snippet = snippet
            .query_row(
                params![
                    query,
                    id,
                    request.highlight.0,
                    request.highlight.1,
                    SNIPPET_TOKENS
                ],
                |row| row.get::<_, Option<String>>(0),
            )
            .optional()
            .map_err(blame)?
            .flatten();
        bound_hit_text(&mut hit);
        page.push(hit);
    }
    Ok(page)
}

/// `text` cut to `MAX_HIT_TEXT_BYTES` at a character boundary, ending in "…" when cut.
fn bound_text(text: &mut String) {
    if text.len() <= MAX_HIT_TEXT_BYTES {
        return;
    }
    let end = crate::protocol::cut_at_char_boundary(text, MAX_HIT_TEXT_BYTES).len();
    text.truncate(end);
    text.push('\u{2026}');
}

/// A hit's free text (name, title, description, snippet) bounded for the answer.
fn bound_hit_text(hit: &mut SearchHit) {
    bound_text(&mut hit.name);
    for text in [
        &mut hit.title,
        &mut hit.description,
        &mut hit.snippet,
        &mut hit.mime_type,
    ]
    .into_iter()
    .flatten()
    {
        bound_text(text);
    }
}

/// How many of the leading `hits` fit in `MAX_SEARCH_PAGE_BYTES` (always at least one), counting
/// each hit's bounded text and its whole URI, which is an identifier and never cut.
fn hits_within_page_bytes(hits: &[(SearchHit, i64)]) -> usize {
    let mut total = 0;
    for (index, (hit, _)) in hits.iter().enumerate() {
        let text = |field: &Option<String>| field.as_ref().map_or(0, |text| text.len());
        let bytes = hit.uri.len()
            + hit.server.len()
            + hit.name.len().min(MAX_HIT_TEXT_BYTES)
            + text(&hit.title).min(MAX_HIT_TEXT_BYTES)
            + text(&hit.description).min(MAX_HIT_TEXT_BYTES)
            + text(&hit.mime_type).min(MAX_HIT_TEXT_BYTES)
            // The snippet is made later; it is bounded like the other texts.
            + MAX_HIT_TEXT_BYTES;
        total += bytes;
        if total > MAX_SEARCH_PAGE_BYTES && index > 0 {
            return index;
        }
    }
    hits.len()
}

/// The words of a plain query as the index tokenizes them (letters and digits, lowercased);
/// the last one also matches as a prefix, as in `fts_query`.
struct SnippetTerms {
    whole: Vec<String>,
    prefix: Option<String>,
}

fn snippet_terms(query: &str) -> SnippetTerms {
    let mut whole: Vec<String> = word_spans(query)
        .map(|(start, end)| query[start..end].to_lowercase())
        .collect();
    let prefix = whole.pop();
    SnippetTerms { whole, prefix }
}

/// Byte spans of the runs of letters and digits in `text`.
fn word_spans(text: &str) -> impl Iterator<Item = (usize, usize)> + '_ {
    let mut chars = text.char_indices().peekable();
    std::iter::from_fn(move || {
        let (start, _) = chars.find(|(_, c)| c.is_alphanumeric())?;
        let mut end = text.len();
        while let Some(&(index, c)) = chars.peek() {
            if !c.is_alphanumeric() {
                end = index;
                break;
            }
            chars.next();
        }
        Some((start, end))
    })
}

/// The first of title, description, name and URI that holds a query word, through the one
/// snippet builder (`store::snippet`), the words split as FTS5's tokenizer splits them.
fn snippet_from_fields(
    hit: &SearchHit,
    terms: &SnippetTerms,
    highlight: &(String, String),
) -> Option<String> {
    let matches = |word: &str| {
        let word = word.to_lowercase();
        terms.whole.contains(&word)
            || terms
                .prefix
                .as_ref()
                .is_some_and(|prefix| word.starts_with(prefix.as_str()))
    };
    let fields = [
        hit.title.as_deref(),
        hit.description.as_deref(),
        Some(hit.name.as_str()),
        Some(hit.uri.as_str()),
    ];
    snippet(fields.into_iter().flatten(), highlight, |text| {
        word_spans(text)
            .map(|(start, end)| (start, end, matches(&text[start..end])))
            .collect()
    })
}

#[cfg(test)]
mod tests {
    use super::super::full_text_search::fts_query;
    use super::*;

    /// An in-memory database with the real schema and a few resources of server `docs`.
    fn catalog() -> Connection {
        let mut connection = Connection::open_in_memory().expect("open");
        super::super::schema::migrate(std::path::Path::new(":memory:"), &mut connection)
            .expect("migrate");
        connection
            .execute_batch(
                "INSERT INTO servers (id, name) VALUES (1, 'docs');
                 INSERT INTO resources (id, server_id, uri, name, title, description, mime_type, raw) VALUES
                   (1, 1, 'file:///guide/readme.md', 'readme', 'Read me first', 'How to start', 'text/markdown', '{}'),
                   (2, 1, 'file:///api/errors.md', 'errors', 'Error codes', 'Every (odd) error: -32602 and NEAR misses', 'text/plain', '{}'),
                   (3, 1, 'file:///caf\u{e9}/men\u{fc}.txt', 'men\u{fc}', 'Caf\u{e9} men\u{fc}', 'Gr\u{fc}\u{df}e aus K\u{f6}ln', 'text/plain', '{}');
                 INSERT INTO resources_fts (resources_fts) VALUES ('rebuild');",
            )
            .expect("fill");
        connection
    }

    #[test]
    fn hostile_queries_never_reach_fts5_as_syntax() {
        let connection = catalog();
        let long = "readme ".repeat(10_000);
        let hostile = [
            "\"",
            "\"\"",
            "'",
            "-",
            "-readme",
            "read-me",
            ":",
            "title:readme",
            "*",
            "read*",
            "(",
            ")",
            "(readme",
            "NEAR",
            "NEAR(readme errors)",
            "AND",
            "OR NOT",
            "readme AND",
            "^readme",
            "{uri}: x",
            "",
            "   ",
            long.as_str(),
            "\u{fc}",
            "caf\u{e9} \u{1f600}",
            "\u{2163}",
            "\0",
            "a\"b\"c",
        ];
        for query in hostile {
            let request = SearchRequest::new(query, 10);
            if let Err(error) = search(&connection, &request) {
                panic!("{query:?} failed: {error}");
            }
        }
        let found = |query: &str| {
            search(&connection, &SearchRequest::new(query, 10))
                .expect("search")
                .0
                .into_iter()
                .map(|hit| hit.uri)
                .collect::<Vec<_>>()
        };
        assert_eq!(found("(odd"), vec!["file:///api/errors.md"]);
        assert_eq!(found("NEAR"), vec!["file:///api/errors.md"]);
        assert_eq!(found("-32602"), vec!["file:///api/errors.md"]);
        assert_eq!(found("cafe"), vec!["file:///caf\u{e9}/men\u{fc}.txt"]);
        assert_eq!(found("K\u{f6}ln"), vec!["file:///caf\u{e9}/men\u{fc}.txt"]);
        assert_eq!(found("rea"), vec!["file:///guide/readme.md"]);
        let mut raw = SearchRequest::new("NEAR(", 10);
        raw.raw = true;
        assert!(matches!(
            search(&connection, &raw),
            Err(StoreError::InvalidQuery(_))
        ));
    }

    #[test]
    fn snippets_highlight_and_cursors_page() {
        let connection = catalog();
        let mut request = SearchRequest::new("error", 10);
        request.highlight = ("<".into(), ">".into());
        let (hits, next) = search(&connection, &request).expect("search");
        assert_eq!(next, None);
        let snippet = hits[0].snippet.clone().expect("a snippet");
        assert!(snippet.to_lowercase().contains("<error"), "{snippet}");
        let mut first = SearchRequest::new("file", 2);
        let (page, next) = search(&connection, &first).expect("search");
        assert_eq!((page.len(), next), (2, Some(2)));
        first.offset = 2;
        let (rest, next) = search(&connection, &first).expect("search");
        assert_eq!((rest.len(), next), (1, None));
    }

    #[test]
    fn hostile_text_becomes_safe_fts() {
        assert_eq!(fts_query("  "), None);
        assert_eq!(fts_query("( - :"), None);
        assert_eq!(fts_query("readme"), Some("\"readme\"*".into()));
        assert_eq!(fts_query("say \"hi"), Some("\"say\" \"\"\"hi\"*".into()));
    }
    #[test]
    fn search_answers_cut_long_texts_and_pages_by_bytes() {
        let connection = catalog();
        // 10 entries whose descriptions are 600 KiB each: a page of all of them would be 6 MiB.
        let description = format!("needle {}", "hay ".repeat(150_000));
        for index in 0..10 {
            connection
                .execute(
                    "INSERT INTO resources (server_id, uri, name, description, raw)
                     VALUES (1, ?1, 'big', ?2, '{}')",
                    params![format!("file:///big/{index}"), description],
                )
                .expect("insert");
        }
        connection
            .execute_batch("INSERT INTO resources_fts (resources_fts) VALUES ('rebuild');")
            .expect("rebuild");
        let (hits, next) =
            search(&connection, &SearchRequest::new("needle", 1000)).expect("search");
        assert_eq!(
            hits.len(),
            10,
            "texts are read cut, so all ten fit: {next:?}"
        );
        for hit in &hits {
            let kept = hit.description.as_deref().expect("description");
            assert!(kept.len() <= MAX_HIT_TEXT_BYTES + 3 && kept.ends_with('\u{2026}'));
            assert!(hit
                .snippet
                .as_deref()
                .is_some_and(|snippet| snippet.len() <= MAX_HIT_TEXT_BYTES + 3));
        }
        // Long URIs are never cut, so they are what a page is counted by.
        let uri_bytes = MAX_SEARCH_PAGE_BYTES / 3;
        let hits: Vec<(SearchHit, i64)> = (0..5)
            .map(|index| {
                let hit = SearchHit {
                    kind: crate::protocol::Kind::Resource,
                    server: "docs".into(),
                    uri: format!("file:///{index}/{}", "u".repeat(uri_bytes)),
                    name: "n".into(),
                    title: None,
                    description: None,
                    mime_type: None,
                    score: 1.0,
                    snippet: None,
                };
                (hit, index)
            })
            .collect();
        assert_eq!(hits_within_page_bytes(&hits), 2);
        assert_eq!(hits_within_page_bytes(&hits[..1]), 1);
    }

    #[test]
    fn a_search_past_its_deadline_is_cancelled_and_the_connection_is_clean_after() {
        let connection = catalog();
        // Enough rows that the query takes more steps than one look at the deadline.
        connection
            .execute_batch(
                "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 5000)
                 INSERT INTO resources (server_id, uri, name, raw)
                 SELECT 1, 'file:///many/' || i, 'reading ' || i, '{}' FROM n;
                 INSERT INTO resources_fts (resources_fts) VALUES ('rebuild');",
            )
            .expect("fill");
        let mut request = SearchRequest::new("read*", 10);
        request.raw = true;
        request.deadline = Some(Instant::now());
        assert!(matches!(
            search(&connection, &request),
            Err(StoreError::SearchTimedOut)
        ));
        request.deadline = None;
        let (hits, _) = search(&connection, &request).expect("the handler is gone");
        assert_eq!(hits.len(), 10);
    }
}
