//! One search over the index: `run` turns a request into the query stages and returns a `Page` of hits.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tantivy::{DocAddress, Score, Searcher, TantivyDocument, Term};

use super::snippet::{snippet, Matcher};
use super::stages::{is_stopword, Clause, Search};
use crate::protocol::MatchMode;
use crate::search::schema::{analyzer, words_with_spans, Fields};
use crate::search::SearchError;
use crate::store::{SearchHit, SearchRequest};

/// The longest highlight marker a caller may choose.
pub const MAX_MARKER_BYTES: usize = 32;
/// Queries of at most this many words also try one typo per long word when the exact words
/// find nothing.
const MAX_TYPO_QUERY_WORDS: usize = 8;
#[derive(Debug, Clone, PartialEq)]
pub struct Page {
    pub hits: Vec<SearchHit>,
    /// The offset of the next page, when there is one.
    pub next_offset: Option<usize>,
    pub mode: MatchMode,
    /// The store generation the index answered from.
    pub generation: u64,
}

/// What the stages found: the ranked documents, the clauses that matched and how.
struct Staged {
    ranked: Vec<(Score, DocAddress)>,
    clauses: Vec<Clause>,
    mode: MatchMode,
}

/// The top `wanted` documents by the three stages, with the clauses that matched (for
/// snippets) and how the words matched: every word with the last one a prefix; then, for a
/// search box's few words that found nothing (not even an `exact` name), long words with one
/// typo; then any of the words typed.
fn ranked_by_stages(
    search: &Search<'_>,
    words: &[String],
    last: &str,
    typed: &[String],
    exact: &[DocAddress],
    wanted: usize,
) -> Result<Staged, SearchError> {
    // 1. Every word; the last one as a prefix.
    // A question, not a search box's few words: no typo stage, and its words are looked up
    // only until one is in no entry (a pasted blob is hundreds of words).
    let question = words.len() + 1 > MAX_TYPO_QUERY_WORDS;
    let mut clauses: Vec<Clause> = Vec::with_capacity(words.len() + 1);
    let mut missing = false;
    for word in words {
        let clause = search.word(word)?;
        missing |= clause.is_empty();
        clauses.push(clause);
        if missing && question {
            break;
        }
    }
    if !(missing && question) {
        clauses.push(search.prefix(last)?);
    }
    let mut mode = MatchMode::All;
    let mut ranked = if missing || clauses.iter().any(Clause::is_empty) {
        Vec::new()
    } else {
        search.conjunction(&clauses, wanted)?
    };
    // 2. Every word, long words with one typo: for what a person types in a search box, not
    // for a question, whose every word would open up a typo automaton.
    if ranked.is_empty() && exact.is_empty() && !question {
        let mut tolerant: Vec<Clause> = words
            .iter()
            .zip(&clauses)
            .map(|(word, clause)| search.with_typos(word, clause, false))
            .collect::<Result<_, _>>()?;
        let last_clause = clauses.last().cloned().unwrap_or(Clause::Terms(Vec::new()));
        tolerant.push(search.with_typos(last, &last_clause, true)?);
        let typos_found = tolerant
            .iter()
            .zip(&clauses)
            .any(|(tolerant, exact)| tolerant.documents() != exact.documents());
        if typos_found {
            clauses = tolerant;
            if !clauses.iter().any(Clause::is_empty) {
                ranked = search.conjunction(&clauses, wanted)?;
                mode = MatchMode::Typo;
            }
        }
    }
    // 3. Any word: one ranked disjunction of the exact words typed (no typos, no prefix),
    // stopwords and one-character words left out unless every word is one, so the order of
    // the hits is one order whatever page is asked for.
    if ranked.is_empty() && exact.is_empty() && typed.len() > 1 {
        // One letter or digit says as little as a stopword ("a", "b", the parts of `x2Y`).
        let content: Vec<&String> = typed
            .iter()
            .filter(|word| !is_stopword(word) && word.chars().count() > 1)
            .collect();
        let chosen: Vec<&String> = if content.is_empty() {
            typed.iter().collect()
        } else {
            content
        };
        let mut terms = Vec::new();
        for word in chosen {
            if let Clause::Terms(found) = search.word(word)? {
                terms.extend(found);
            }
        }
        ranked = search.disjunction(&terms, wanted)?;
        clauses = terms
            .into_iter()
            .map(|term| Clause::Terms(vec![term]))
            .collect();
        // "Any word" only says something when it found something.
        if !ranked.is_empty() {
            mode = MatchMode::Any;
        }
    }
    Ok(Staged {
        ranked,
        clauses,
        mode,
    })
}

/// Which listings a request searches, as any of these terms: one server's listings; else the
/// listings of the servers named in `servers`, each listing, winning or not (the caller keeps
/// each key's winner among them); else the merged catalog's, the winner of each URI. A search
/// of some kinds has a term of each kind with the server or the merged view.
fn server_filter(fields: &Fields, request: &SearchRequest) -> Vec<Term> {
    let one = |server: Option<&str>| {
        let kinds = fields.kinds_terms(&request.kinds, server);
        if !kinds.is_empty() {
            return kinds;
        }
        vec![match server {
            Some(server) => Term::from_field_text(fields.server, server),
            None => fields.flag_term(fields.wins),
        }]
    };
    match (&request.server, &request.servers) {
        (Some(server), _) => one(Some(server)),
        (None, Some(servers)) => servers
            .iter()
            .flat_map(|server| one(Some(server)))
            .collect(),
        (None, None) => one(None),
    }
}

/// One page of `request`'s hits from `searcher`, given up at `deadline` (`time_limit` after
/// the search began, for the error).
pub fn run(
    searcher: &Searcher,
    fields: &Fields,
    request: &SearchRequest,
    deadline: Instant,
    time_limit: Duration,
    generation: u64,
) -> Result<Page, SearchError> {
    check_markers(&request.highlight)?;
    let empty = Page {
        hits: Vec::new(),
        next_offset: None,
        mode: MatchMode::All,
        generation,
    };
    let Some(QueryWords { words, last, typed }) = query_words(&request.query) else {
        return Ok(empty);
    };

    let mut filters = vec![server_filter(fields, request)];
    if let Some(mime_type) = &request.mime_type {
        filters.push(vec![Term::from_field_text(fields.mime_type, mime_type)]);
    }
    let search = Search {
        searcher,
        fields,
        filters,
        deadline,
        expired: Arc::new(AtomicBool::new(false)),
        time_limit,
    };

    let exact = search.exact(request.query.trim())?;
    let wanted = request.offset + request.limit + 1 + exact.len();

    let Staged {
        ranked,
        clauses,
        mode,
    } = ranked_by_stages(&search, &words, &last, &typed, &exact, wanted)?;
    if search.expired.load(Ordering::Relaxed) {
        return Err(SearchError::TimedOut(time_limit));
    }

    let ordered = exact_first(&exact, ranked);
    let end = request.offset + request.limit;
    let next_offset = (ordered.len() > end).then_some(end);
    let page = ordered.into_iter().skip(request.offset).take(request.limit);
    let hits = page_hits(searcher, fields, page, &clauses, &request.highlight)?;
    Ok(Page {
        hits,
        next_offset,
        mode,
        generation,
    })
}

/// Refuses a highlight marker longer than `MAX_MARKER_BYTES`.
fn check_markers(highlight: &(String, String)) -> Result<(), SearchError> {
    for marker in [&highlight.0, &highlight.1] {
        if marker.len() > MAX_MARKER_BYTES {
            return Err(SearchError::InvalidQuery(format!(
                "a highlight marker is at most {MAX_MARKER_BYTES} bytes"
            )));
        }
    }
    Ok(())
}

/// A query's words as the index folds them: the distinct words before the last, the last
/// (searched as a prefix), and every distinct word once in the order typed.
struct QueryWords {
    words: Vec<String>,
    last: String,
    typed: Vec<String>,
}

/// `query`'s words, or `None` when it has none.
fn query_words(query: &str) -> Option<QueryWords> {
    let mut words: Vec<String> = words_with_spans(&mut analyzer(), query)
        .into_iter()
        .map(|(word, _, _)| word)
        .collect();
    let last = words.pop()?;
    let mut seen = HashSet::new();
    words.retain(|word| seen.insert(word.clone()));
    // Every distinct word once, in the order typed (the last one too).
    let mut typed: Vec<String> = words.clone();
    if !seen.contains(&last) {
        typed.push(last.clone());
    }
    Some(QueryWords { words, last, typed })
}

/// The ranked documents with the `exact` name or URI matches first, whatever their score.
fn exact_first(exact: &[DocAddress], ranked: Vec<(Score, DocAddress)>) -> Vec<(Score, DocAddress)> {
    let top_score = ranked.first().map(|(score, _)| *score).unwrap_or(0.0);
    let exact_set: HashSet<DocAddress> = exact.iter().copied().collect();
    exact
        .iter()
        .map(|address| (top_score + 1.0, *address))
        .chain(
            ranked
                .into_iter()
                .filter(|(_, address)| !exact_set.contains(address)),
        )
        .collect()
}

/// The hits of one page of documents, each with its snippet of the matched `clauses`.
fn page_hits(
    searcher: &Searcher,
    fields: &Fields,
    page: impl Iterator<Item = (Score, DocAddress)>,
    clauses: &[Clause],
    highlight: &(String, String),
) -> Result<Vec<SearchHit>, SearchError> {
    let mut matcher = Matcher::default();
    for clause in clauses {
        matcher.add(clause);
    }
    let mut hits = Vec::new();
    for (score, address) in page {
        let document: TantivyDocument = searcher.doc(address)?;
        let (entry, _) = fields.entry(&document);
        let mut hit = SearchHit {
            server: entry.server,
            uri: entry.uri,
            name: entry.name,
            title: entry.title,
            description: entry.description,
            mime_type: entry.mime_type,
            kind: entry.kind,
            score: f64::from(score),
            snippet: None,
        };
        hit.snippet = snippet(&hit, &matcher, highlight);
        hits.push(hit);
    }
    Ok(hits)
}
