//! Turns what a person typed into index queries (AND, then typo-tolerant AND, then OR) and builds the page.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::ops::Bound;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tantivy::collector::TopDocs;
use tantivy::query::{
    BooleanQuery, EnableScoring, Explanation, FuzzyTermQuery, InvertedIndexRangeQuery, Occur,
    Query, Scorer, TermQuery, Weight,
};
use tantivy::schema::IndexRecordOption;
use tantivy::{DocAddress, DocId, DocSet, Score, Searcher, SegmentReader, TantivyDocument, Term};

use super::schema::{analyzer, snippet_analyzer, words_with_spans, Fields};
use super::SearchError;
use crate::protocol::MatchMode;

/// The longest highlight marker a caller may choose.
pub const MAX_MARKER_BYTES: usize = 32;
/// Queries of at most this many words also try one typo per long word when the exact words
/// find nothing.
const MAX_TYPO_QUERY_WORDS: usize = 8;
/// The most words a prefix or a typo expands to, each scored as a term of its own; a prefix
/// with more becomes one match-only clause.
const MAX_EXPANSIONS: usize = 64;
/// The most combinations of expanded words searched one by one as pure intersections (which
/// rank the top k without scoring every match).
const MAX_COMBINATIONS: usize = 16;
/// Below this many candidate documents one plain query that scores them all is cheaper.
const FEW_CANDIDATES: u64 = 20_000;
/// The most exact name or URI matches put first.
const MAX_EXACT: usize = 100;
/// Words this long or longer tolerate one typo when the exact words find nothing.
const TYPO_MIN_CHARS: usize = 5;
/// Words longer than this tolerate no typo (nobody types them; their automata cost most).
const TYPO_MAX_CHARS: usize = 24;
/// Words in a snippet.
const SNIPPET_WORDS: usize = 12;
/// How many documents pass between two looks at the clock.
const DEADLINE_CHECK_EVERY: u32 = 1024;

/// A search as the caller asks it.
#[derive(Debug, Clone)]
pub struct SearchQuery {
    pub text: String,
    pub server: Option<String>,
    pub mime_type: Option<String>,
    /// The kinds searched; every kind when empty.
    pub kinds: Vec<crate::protocol::Kind>,
    pub limit: usize,
    /// How many ranked hits to skip: the position a cursor encodes.
    pub offset: usize,
    /// Put around matched words in snippets; at most `MAX_MARKER_BYTES` each.
    pub highlight: (String, String),
    /// The search gives up after this long, waiting for a slot included.
    pub time_limit: Duration,
}

impl SearchQuery {
    pub fn new(text: impl Into<String>, limit: usize) -> SearchQuery {
        SearchQuery {
            text: text.into(),
            server: None,
            mime_type: None,
            kinds: Vec::new(),
            limit,
            offset: 0,
            highlight: ("\u{ab}".into(), "\u{bb}".into()),
            time_limit: Duration::from_secs(2),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Hit {
    pub server: String,
    pub uri: String,
    pub name: String,
    pub title: Option<String>,
    pub description: Option<String>,
    pub mime_type: Option<String>,
    pub kind: crate::protocol::Kind,
    pub score: f32,
    /// The query equals the entry's name or URI.
    pub exact: bool,
    pub snippet: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Page {
    pub hits: Vec<Hit>,
    /// The offset of the next page, when there is one.
    pub next_offset: Option<usize>,
    pub mode: MatchMode,
    /// The store generation the index answered from.
    pub generation: u64,
}

/// What one typed word may match.
#[derive(Debug, Clone)]
enum Clause {
    /// Any of these index words (with their document counts).
    Terms(Vec<(String, u64)>),
    /// Any index word starting with this, when there are too many to list.
    Prefix(String),
}

impl Clause {
    fn is_empty(&self) -> bool {
        matches!(self, Clause::Terms(terms) if terms.is_empty())
    }

    /// An upper bound of the documents the clause matches.
    fn documents(&self) -> u64 {
        match self {
            Clause::Terms(terms) => terms.iter().map(|(_, count)| count).sum(),
            Clause::Prefix(_) => u64::MAX,
        }
    }
}

/// Which words of a document a snippet marks.
#[derive(Default)]
struct Matcher {
    words: HashSet<String>,
    prefixes: Vec<String>,
}

impl Matcher {
    fn add(&mut self, clause: &Clause) {
        match clause {
            Clause::Terms(terms) => self
                .words
                .extend(terms.iter().map(|(term, _)| term.clone())),
            Clause::Prefix(prefix) => self.prefixes.push(prefix.clone()),
        }
    }

    fn matches(&self, word: &str) -> bool {
        self.words.contains(word)
            || self
                .prefixes
                .iter()
                .any(|prefix| word.starts_with(prefix.as_str()))
    }
}

pub fn run(
    searcher: &Searcher,
    fields: &Fields,
    query: &SearchQuery,
    deadline: Instant,
    generation: u64,
) -> Result<Page, SearchError> {
    for marker in [&query.highlight.0, &query.highlight.1] {
        if marker.len() > MAX_MARKER_BYTES {
            return Err(SearchError::InvalidQuery(format!(
                "a highlight marker is at most {MAX_MARKER_BYTES} bytes"
            )));
        }
    }
    let mut words: Vec<String> = words_with_spans(&mut analyzer(), &query.text)
        .into_iter()
        .map(|(word, _, _)| word)
        .collect();
    let empty = Page {
        hits: Vec::new(),
        next_offset: None,
        mode: MatchMode::All,
        generation,
    };
    let Some(last) = words.pop() else {
        return Ok(empty);
    };
    let mut seen = HashSet::new();
    words.retain(|word| seen.insert(word.clone()));
    // Every distinct word once, in the order typed (the last one too).
    let mut typed: Vec<String> = words.clone();
    if !seen.contains(&last) {
        typed.push(last.clone());
    }

    let mut filters = Vec::new();
    // Some kinds: one term for the kinds with the server or the merged view.
    match (
        fields.kinds_term(&query.kinds, query.server.as_deref()),
        &query.server,
    ) {
        (Some(kinds), _) => filters.push(kinds),
        (None, Some(server)) => filters.push(Term::from_field_text(fields.server, server)),
        // The merged catalog: one listing per URI, the winner's.
        (None, None) => filters.push(fields.flag_term(fields.wins)),
    }
    if let Some(mime_type) = &query.mime_type {
        filters.push(Term::from_field_text(fields.mime_type, mime_type));
    }
    let search = Search {
        searcher,
        fields,
        filters,
        deadline,
        expired: Arc::new(AtomicBool::new(false)),
        time_limit: query.time_limit,
    };

    let exact = search.exact(query.text.trim())?;
    let wanted = query.offset + query.limit + 1 + exact.len();

    // 1. Every word; the last one as a prefix.
    // A question, not a search box's few words: no typo stage, and its words are looked up
    // only until one is in no entry (a pasted blob is hundreds of words).
    let question = words.len() + 1 > MAX_TYPO_QUERY_WORDS;
    let mut clauses: Vec<Clause> = Vec::with_capacity(words.len() + 1);
    let mut missing = false;
    for word in &words {
        let clause = search.word(word)?;
        missing |= clause.is_empty();
        clauses.push(clause);
        if missing && question {
            break;
        }
    }
    if !(missing && question) {
        clauses.push(search.prefix(&last)?);
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
        tolerant.push(search.with_typos(&last, &last_clause, true)?);
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
    if search.expired.load(Ordering::Relaxed) {
        return Err(SearchError::TimedOut(query.time_limit));
    }

    let top_score = ranked.first().map(|(score, _)| *score).unwrap_or(0.0);
    let exact_set: HashSet<DocAddress> = exact.iter().copied().collect();
    let ordered: Vec<(Score, DocAddress, bool)> = exact
        .iter()
        .map(|address| (top_score + 1.0, *address, true))
        .chain(
            ranked
                .into_iter()
                .filter(|(_, address)| !exact_set.contains(address))
                .map(|(score, address)| (score, address, false)),
        )
        .collect();
    let end = query.offset + query.limit;
    let next_offset = (ordered.len() > end).then_some(end);
    let mut matcher = Matcher::default();
    for clause in &clauses {
        matcher.add(clause);
    }
    let mut hits = Vec::new();
    for (score, address, exact) in ordered.into_iter().skip(query.offset).take(query.limit) {
        let document: TantivyDocument = searcher.doc(address)?;
        let (entry, _) = fields.entry(&document);
        let mut hit = Hit {
            server: entry.server,
            uri: entry.uri,
            name: entry.name,
            title: entry.title,
            description: entry.description,
            mime_type: entry.mime_type,
            kind: entry.kind,
            score,
            exact,
            snippet: None,
        };
        hit.snippet = snippet(&hit, &matcher, &query.highlight);
        hits.push(hit);
    }
    Ok(Page {
        hits,
        next_offset,
        mode,
        generation,
    })
}

/// Words too common in English questions to say what is wanted ("how do I get the price of
/// a stock"), left out of the any-word stage: a shortened form of the usual English lists.
const STOPWORDS: &[&str] = &[
    "a", "about", "above", "after", "again", "all", "also", "am", "an", "and", "any", "are", "as",
    "at", "be", "been", "before", "being", "below", "between", "both", "but", "by", "can", "could",
    "did", "do", "does", "doing", "during", "each", "few", "for", "from", "further", "had", "has",
    "have", "having", "he", "her", "here", "hers", "him", "his", "how", "i", "if", "in", "into",
    "is", "it", "its", "itself", "just", "me", "more", "most", "my", "myself", "no", "nor", "not",
    "of", "off", "on", "once", "only", "or", "other", "our", "ours", "out", "over", "own",
    "please", "same", "she", "should", "so", "some", "such", "than", "that", "the", "their",
    "theirs", "them", "then", "there", "these", "they", "this", "those", "through", "to", "too",
    "under", "until", "up", "very", "was", "we", "were", "what", "when", "where", "which", "while",
    "who", "whom", "why", "will", "with", "would", "you", "your", "yours",
];

fn is_stopword(word: &str) -> bool {
    STOPWORDS.binary_search(&word).is_ok()
}

/// The first byte string after every one that starts with `prefix` (its last byte below 0xFF
/// incremented, the 0xFF bytes after it dropped); `None` when there is none.
fn prefix_end(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xFF {
            end.push(last + 1);
            return Some(end);
        }
    }
    None
}

fn sorted(mut hits: Vec<(Score, DocAddress)>) -> Vec<(Score, DocAddress)> {
    hits.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
    hits
}

struct Search<'a> {
    searcher: &'a Searcher,
    fields: &'a Fields,
    filters: Vec<Term>,
    deadline: Instant,
    expired: Arc<AtomicBool>,
    time_limit: Duration,
}

impl Search<'_> {
    fn check_time(&self) -> Result<(), SearchError> {
        if self.expired.load(Ordering::Relaxed) || Instant::now() >= self.deadline {
            return Err(SearchError::TimedOut(self.time_limit));
        }
        Ok(())
    }

    fn term(&self, word: &str) -> Term {
        Term::from_field_text(self.fields.all, word)
    }

    fn word(&self, word: &str) -> Result<Clause, SearchError> {
        let count = self.searcher.doc_freq(&self.term(word))?;
        Ok(Clause::Terms(if count > 0 {
            vec![(word.to_string(), count)]
        } else {
            Vec::new()
        }))
    }

    /// Every index word starting with `prefix`, or `Clause::Prefix` when there are too many.
    fn prefix(&self, prefix: &str) -> Result<Clause, SearchError> {
        let mut terms: BTreeMap<String, u64> = BTreeMap::new();
        for segment in self.searcher.segment_readers() {
            let inverted = segment.inverted_index(self.fields.all)?;
            let mut stream = inverted
                .terms()
                .range()
                .ge(prefix.as_bytes())
                .into_stream()
                .map_err(tantivy::TantivyError::from)?;
            while stream.advance() {
                let key = stream.key();
                if !key.starts_with(prefix.as_bytes()) {
                    break;
                }
                let term = String::from_utf8_lossy(key).into_owned();
                *terms.entry(term).or_default() += u64::from(stream.value().doc_freq);
                if terms.len() > MAX_EXPANSIONS {
                    return Ok(Clause::Prefix(prefix.to_string()));
                }
            }
        }
        Ok(Clause::Terms(terms.into_iter().collect()))
    }

    /// `clause` widened by the index words one edit away from `word` (or, for the last word,
    /// starting one edit away from it), when `word` is long enough to tolerate a typo.
    fn with_typos(&self, word: &str, clause: &Clause, prefix: bool) -> Result<Clause, SearchError> {
        let Clause::Terms(exact) = clause else {
            return Ok(clause.clone());
        };
        if !(TYPO_MIN_CHARS..=TYPO_MAX_CHARS).contains(&word.chars().count()) {
            return Ok(clause.clone());
        }
        let mut terms: BTreeMap<String, u64> = exact.iter().cloned().collect();
        let term = self.term(word);
        let fuzzy = if prefix {
            FuzzyTermQuery::new_prefix(term, 1, true)
        } else {
            FuzzyTermQuery::new(term, 1, true)
        };
        for segment in self.searcher.segment_readers() {
            let inverted = segment.inverted_index(self.fields.all)?;
            let mut stream = inverted
                .terms()
                .search(fuzzy.automaton()?)
                .into_stream()
                .map_err(tantivy::TantivyError::from)?;
            while stream.advance() {
                let term = String::from_utf8_lossy(stream.key()).into_owned();
                *terms.entry(term).or_default() += u64::from(stream.value().doc_freq);
            }
        }
        // Keep the commonest when a prefix with a typo opens up too many words.
        let mut terms: Vec<(String, u64)> = terms.into_iter().collect();
        if terms.len() > MAX_EXPANSIONS {
            terms.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
            terms.truncate(MAX_EXPANSIONS);
        }
        Ok(Clause::Terms(terms))
    }

    fn filter_queries(&self) -> Vec<(Occur, Box<dyn Query>)> {
        self.filters
            .iter()
            .map(|term| {
                (
                    Occur::Must,
                    Box::new(TermQuery::new(term.clone(), IndexRecordOption::WithFreqs))
                        as Box<dyn Query>,
                )
            })
            .collect()
    }

    /// Entries whose name (any case) or URI is exactly `text`, in index order.
    fn exact(&self, text: &str) -> Result<Vec<DocAddress>, SearchError> {
        if text.is_empty() {
            return Ok(Vec::new());
        }
        let either = BooleanQuery::new(vec![
            (
                Occur::Should,
                Box::new(TermQuery::new(
                    self.fields.name_term(text),
                    IndexRecordOption::Basic,
                )) as Box<dyn Query>,
            ),
            (
                Occur::Should,
                Box::new(TermQuery::new(
                    self.fields.uri_term(text),
                    IndexRecordOption::Basic,
                )),
            ),
        ]);
        let mut clauses = self.filter_queries();
        clauses.push((Occur::Must, Box::new(either)));
        let found = self.searcher.search(
            &BooleanQuery::new(clauses),
            &TopDocs::with_limit(MAX_EXACT).order_by_score(),
        )?;
        let mut addresses: Vec<DocAddress> =
            found.into_iter().map(|(_, address)| address).collect();
        addresses.sort();
        Ok(addresses)
    }

    /// The top `wanted` documents matching every clause and every filter, best first.
    ///
    /// A query whose clauses are single words is one intersection of terms, which tantivy
    /// ranks with block-max pruning. A clause of several words (a prefix, a typo) breaks that;
    /// when the candidates are many and the combinations few, each combination runs as its
    /// own pure intersection and a document keeps its best score; otherwise one query scores
    /// every candidate.
    fn conjunction(
        &self,
        clauses: &[Clause],
        wanted: usize,
    ) -> Result<Vec<(Score, DocAddress)>, SearchError> {
        self.check_time()?;
        let single = |clause: &Clause| matches!(clause, Clause::Terms(terms) if terms.len() == 1);
        let combinations = clauses
            .iter()
            .try_fold(1usize, |product, clause| match clause {
                Clause::Terms(terms) => product.checked_mul(terms.len()),
                Clause::Prefix(_) => None,
            });
        let candidates = clauses.iter().map(Clause::documents).min().unwrap_or(0);
        let split = !clauses.iter().all(single)
            && candidates > FEW_CANDIDATES
            && combinations.is_some_and(|count| count <= MAX_COMBINATIONS);
        if !split {
            let mut parts = self.filter_queries();
            for clause in clauses {
                parts.push((Occur::Must, self.clause_query(clause)?));
            }
            let pruned = clauses.iter().all(single);
            return self.top(Box::new(BooleanQuery::new(parts)), pruned, wanted);
        }
        let mut best: HashMap<DocAddress, Score> = HashMap::new();
        let mut combination: Vec<usize> = vec![0; clauses.len()];
        loop {
            let mut parts = self.filter_queries();
            for (clause, choice) in clauses.iter().zip(&combination) {
                if let Clause::Terms(terms) = clause {
                    parts.push((
                        Occur::Must,
                        Box::new(TermQuery::new(
                            self.term(&terms[*choice].0),
                            IndexRecordOption::WithFreqs,
                        )),
                    ));
                }
            }
            for (score, address) in self.top(Box::new(BooleanQuery::new(parts)), true, wanted)? {
                let kept = best.entry(address).or_insert(score);
                *kept = kept.max(score);
            }
            // The next combination, like an odometer.
            let mut position = 0;
            loop {
                let Some(Clause::Terms(terms)) = clauses.get(position) else {
                    let mut all: Vec<(Score, DocAddress)> = best
                        .into_iter()
                        .map(|(address, score)| (score, address))
                        .collect();
                    all = sorted(all);
                    all.truncate(wanted);
                    return Ok(all);
                };
                combination[position] += 1;
                if combination[position] < terms.len() {
                    break;
                }
                combination[position] = 0;
                position += 1;
            }
        }
    }

    /// The top `wanted` documents matching any of `terms` and every filter, by the sum of
    /// their words' scores, best first: one query, so a page is a slice of one order.
    fn disjunction(
        &self,
        terms: &[(String, u64)],
        wanted: usize,
    ) -> Result<Vec<(Score, DocAddress)>, SearchError> {
        match terms {
            [] => Ok(Vec::new()),
            [_] => self.conjunction(&[Clause::Terms(terms.to_vec())], wanted),
            _ => {
                let mut parts = self.filter_queries();
                parts.push((
                    Occur::Must,
                    self.clause_query(&Clause::Terms(terms.to_vec()))?,
                ));
                self.top(Box::new(BooleanQuery::new(parts)), false, wanted)
            }
        }
    }

    fn clause_query(&self, clause: &Clause) -> Result<Box<dyn Query>, SearchError> {
        Ok(match clause {
            Clause::Terms(terms) if terms.len() == 1 => Box::new(TermQuery::new(
                self.term(&terms[0].0),
                IndexRecordOption::WithFreqs,
            )),
            Clause::Terms(terms) => Box::new(BooleanQuery::new(
                terms
                    .iter()
                    .map(|(term, _)| {
                        (
                            Occur::Should,
                            Box::new(TermQuery::new(
                                self.term(term),
                                IndexRecordOption::WithFreqs,
                            )) as Box<dyn Query>,
                        )
                    })
                    .collect(),
            )),
            // Every index word in [prefix, the first text after all it starts): the words a
            // regex `prefix.*` matches, scored alike, without building an automaton per search
            // (a tenth of the daemon's time in the selective mix went to compiling it).
            Clause::Prefix(prefix) => {
                let lower = Bound::Included(Term::from_field_text(self.fields.all, prefix));
                let upper = match prefix_end(prefix.as_bytes()) {
                    Some(end) => Bound::Excluded(Term::from_field_bytes(self.fields.all, &end)),
                    None => Bound::Unbounded,
                };
                Box::new(InvertedIndexRangeQuery::new(lower, upper))
            }
        })
    }

    fn top(
        &self,
        query: Box<dyn Query>,
        pruned: bool,
        wanted: usize,
    ) -> Result<Vec<(Score, DocAddress)>, SearchError> {
        self.check_time()?;
        let limited = DeadlineQuery {
            inner: query,
            pruned,
            deadline: self.deadline,
            expired: self.expired.clone(),
        };
        let found = self.searcher.search(
            &limited,
            &TopDocs::with_limit(wanted.max(1)).order_by_score(),
        )?;
        if self.expired.load(Ordering::Relaxed) {
            return Err(SearchError::TimedOut(self.time_limit));
        }
        Ok(sorted(found))
    }
}

/// A query that stops when its deadline passes, noting so in `expired`.
#[derive(Debug)]
struct DeadlineQuery {
    inner: Box<dyn Query>,
    /// An intersection or union of single terms, which tantivy ranks with block-max pruning.
    pruned: bool,
    deadline: Instant,
    expired: Arc<AtomicBool>,
}

impl Clone for DeadlineQuery {
    fn clone(&self) -> DeadlineQuery {
        DeadlineQuery {
            inner: self.inner.box_clone(),
            pruned: self.pruned,
            deadline: self.deadline,
            expired: self.expired.clone(),
        }
    }
}

impl Query for DeadlineQuery {
    fn weight(&self, enable_scoring: EnableScoring<'_>) -> tantivy::Result<Box<dyn Weight>> {
        Ok(Box::new(DeadlineWeight {
            inner: self.inner.weight(enable_scoring)?,
            pruned: self.pruned,
            deadline: self.deadline,
            expired: self.expired.clone(),
        }))
    }
}

struct DeadlineWeight {
    inner: Box<dyn Weight>,
    pruned: bool,
    deadline: Instant,
    expired: Arc<AtomicBool>,
}

impl DeadlineWeight {
    fn passed(&self, calls: &mut u32) -> bool {
        *calls += 1;
        if *calls % DEADLINE_CHECK_EVERY == 0 && Instant::now() >= self.deadline {
            self.expired.store(true, Ordering::Relaxed);
        }
        self.expired.load(Ordering::Relaxed)
    }
}

impl Weight for DeadlineWeight {
    fn scorer(&self, reader: &SegmentReader, boost: Score) -> tantivy::Result<Box<dyn Scorer>> {
        self.inner.scorer(reader, boost)
    }

    fn explain(&self, reader: &SegmentReader, doc: DocId) -> tantivy::Result<Explanation> {
        self.inner.explain(reader, doc)
    }

    /// A pruned query (block-max WAND) passes every candidate that may enter the top k
    /// through the callback; past the deadline the callback raises the bar beyond any score,
    /// which ends the pruned loops at once.
    fn for_each_pruning(
        &self,
        threshold: Score,
        reader: &SegmentReader,
        callback: &mut dyn FnMut(DocId, Score) -> Score,
    ) -> tantivy::Result<()> {
        if self.expired.load(Ordering::Relaxed) {
            return Ok(());
        }
        let mut calls = 0u32;
        if self.pruned {
            return self
                .inner
                .for_each_pruning(threshold, reader, &mut |doc, score| {
                    if self.passed(&mut calls) {
                        return Score::MAX;
                    }
                    callback(doc, score)
                });
        }
        // A query that scores every match calls back only for the few that enter the top k,
        // so its scorer is driven here, where every document passes the clock.
        let mut scorer = self.inner.scorer(reader, 1.0)?;
        let mut threshold = threshold;
        let mut doc = scorer.doc();
        while doc != tantivy::TERMINATED {
            if self.passed(&mut calls) {
                return Ok(());
            }
            let score = scorer.score();
            if score > threshold {
                threshold = callback(doc, score);
            }
            doc = scorer.advance();
        }
        Ok(())
    }
}

/// The first of title, description, name and URI that holds a matched word, cut to a window
/// of `SNIPPET_WORDS` words from just before the first match, matches between the markers.
fn snippet(hit: &Hit, matcher: &Matcher, highlight: &(String, String)) -> Option<String> {
    let mut analyzer = snippet_analyzer();
    let fields = [
        hit.title.as_deref(),
        hit.description.as_deref(),
        Some(hit.name.as_str()),
        Some(hit.uri.as_str()),
    ];
    for text in fields.into_iter().flatten() {
        let words = words_with_spans(&mut analyzer, text);
        let Some(first) = words.iter().position(|(word, _, _)| matcher.matches(word)) else {
            continue;
        };
        let from = first.saturating_sub(2);
        let to = (from + SNIPPET_WORDS).min(words.len());
        let mut snippet = String::new();
        if from > 0 {
            snippet.push('\u{2026}');
        }
        // Neighbouring matches share one pair of markers.
        let mut cursor = words[from].1;
        let mut open = false;
        for (word, start, end) in &words[from..to] {
            let matched = matcher.matches(word);
            if open && !matched {
                snippet.push_str(&highlight.1);
                open = false;
            }
            snippet.push_str(&text[cursor..*start]);
            if matched && !open {
                snippet.push_str(&highlight.0);
                open = true;
            }
            snippet.push_str(&text[*start..*end]);
            cursor = *end;
        }
        if open {
            snippet.push_str(&highlight.1);
        }
        if to < words.len() {
            snippet.push('\u{2026}');
        } else {
            snippet.push_str(&text[cursor..]);
        }
        return Some(snippet);
    }
    None
}

#[cfg(test)]
mod prefix_tests {
    use super::{prefix_end, STOPWORDS};

    #[test]
    fn stopwords_are_sorted_for_binary_search() {
        assert!(STOPWORDS.windows(2).all(|pair| pair[0] < pair[1]));
    }

    /// The range `[prefix, prefix_end)` holds exactly the byte strings starting with `prefix`.
    #[test]
    fn the_end_of_a_prefix_range_is_the_next_byte_string() {
        assert_eq!(prefix_end(b"0123"), Some(b"0124".to_vec()));
        assert_eq!(prefix_end(b"a\xff\xff"), Some(b"b".to_vec()));
        assert_eq!(prefix_end(b"\xff"), None);
        assert_eq!(prefix_end(b""), None);
        let end = prefix_end("caf\u{e9}".as_bytes()).expect("an end");
        for word in ["caf\u{e9}", "caf\u{e9}s", "caf\u{e9}\u{10ffff}"] {
            assert!(word.as_bytes() < end.as_slice(), "{word}");
        }
        assert!("caf\u{ea}".as_bytes() >= end.as_slice());
    }
}
