//! The stages of a query: each typed word to a clause (its exact word, its prefix expansions
//! or one typo), then AND, typo-tolerant AND and one ranked OR of the words that are no
//! stopwords; the exact names first.

use std::collections::{BTreeMap, HashMap};
use std::ops::Bound;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tantivy::collector::TopDocs;
use tantivy::query::{
    BooleanQuery, ConstScoreQuery, FuzzyTermQuery, InvertedIndexRangeQuery, Occur, Query, TermQuery,
};
use tantivy::schema::IndexRecordOption;
use tantivy::{DocAddress, Score, Searcher, Term};

use super::deadline::DeadlineQuery;
use crate::search::schema::Fields;
use crate::search::SearchError;

/// The most words a prefix or a typo expands to, each scored as a term of its own; a prefix
/// with more becomes one match-only clause.
const MAX_EXPANSIONS: usize = 64;
/// The most combinations of expanded words searched one by one as pure intersections (which
/// rank the top k without scoring every match).
const MAX_COMBINATIONS: usize = 16;
/// Below this many candidate documents one plain query that scores them all is cheaper. Not
/// much above it: that query's union of a prefix's words reads every posting of each word over
/// the candidates' span. `topic-N doc` over 100,000 entries (2,700 candidates, `doc` three
/// words of up to 100,000 documents each) took 1.31 ms at p50 as one query and 0.42 ms split
/// (the fleet's follow-burst bench, Zen 4); at 20,000 (the bound until then) it was one query.
const FEW_CANDIDATES: u64 = 2_000;
/// The most exact name or URI matches put first.
const MAX_EXACT: usize = 100;
/// Words this long or longer tolerate one typo when the exact words find nothing.
const TYPO_MIN_CHARS: usize = 5;
/// Words longer than this tolerate no typo (nobody types them; their automata cost most).
const TYPO_MAX_CHARS: usize = 24;

/// What one typed word may match.
#[derive(Debug, Clone)]
pub(super) enum Clause {
    /// Any of these index words (with their document counts).
    Terms(Vec<(String, u64)>),
    /// Any index word starting with this, when there are too many to list.
    Prefix(String),
}

impl Clause {
    pub(super) fn is_empty(&self) -> bool {
        matches!(self, Clause::Terms(terms) if terms.is_empty())
    }

    /// An upper bound of the documents the clause matches.
    pub(super) fn documents(&self) -> u64 {
        match self {
            Clause::Terms(terms) => terms.iter().map(|(_, count)| count).sum(),
            Clause::Prefix(_) => u64::MAX,
        }
    }
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

pub(super) fn is_stopword(word: &str) -> bool {
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

pub(super) fn sorted(mut hits: Vec<(Score, DocAddress)>) -> Vec<(Score, DocAddress)> {
    hits.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
    hits
}

pub(super) struct Search<'a> {
    pub(super) searcher: &'a Searcher,
    pub(super) fields: &'a Fields,
    /// Every filter must match; a filter matches when any of its terms does.
    pub(super) filters: Vec<Vec<Term>>,
    pub(super) deadline: Instant,
    pub(super) expired: Arc<AtomicBool>,
    pub(super) time_limit: Duration,
}

impl Search<'_> {
    pub(super) fn check_time(&self) -> Result<(), SearchError> {
        if self.expired.load(Ordering::Relaxed) || Instant::now() >= self.deadline {
            return Err(SearchError::TimedOut(self.time_limit));
        }
        Ok(())
    }

    pub(super) fn term(&self, word: &str) -> Term {
        Term::from_field_text(self.fields.all, word)
    }

    pub(super) fn word(&self, word: &str) -> Result<Clause, SearchError> {
        let count = self.searcher.doc_freq(&self.term(word))?;
        Ok(Clause::Terms(if count > 0 {
            vec![(word.to_string(), count)]
        } else {
            Vec::new()
        }))
    }

    /// Every index word starting with `prefix`, or `Clause::Prefix` when there are too many.
    pub(super) fn prefix(&self, prefix: &str) -> Result<Clause, SearchError> {
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
    pub(super) fn with_typos(
        &self,
        word: &str,
        clause: &Clause,
        prefix: bool,
    ) -> Result<Clause, SearchError> {
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

    pub(super) fn filter_queries(&self) -> Vec<(Occur, Box<dyn Query>)> {
        self.filters
            .iter()
            .map(|terms| {
                let query: Box<dyn Query> = match terms.as_slice() {
                    [term] => Box::new(TermQuery::new(term.clone(), IndexRecordOption::WithFreqs)),
                    // Any of several servers: scored alike whichever server matched (each
                    // server's term has its own weight, and a listing must not rank by it).
                    terms => Box::new(ConstScoreQuery::new(
                        Box::new(BooleanQuery::new(
                            terms
                                .iter()
                                .map(|term| {
                                    (
                                        Occur::Should,
                                        Box::new(TermQuery::new(
                                            term.clone(),
                                            IndexRecordOption::Basic,
                                        ))
                                            as Box<dyn Query>,
                                    )
                                })
                                .collect(),
                        )),
                        0.0,
                    )),
                };
                (Occur::Must, query)
            })
            .collect()
    }

    /// Entries whose name (any case) or URI is exactly `text`, in index order.
    pub(super) fn exact(&self, text: &str) -> Result<Vec<DocAddress>, SearchError> {
        if text.is_empty() {
            return Ok(Vec::new());
        }
        let either = BooleanQuery::new(
            std::iter::once(self.fields.name_term(text))
                .chain(self.fields.uri_terms(self.searcher, text)?)
                .map(|term| {
                    (
                        Occur::Should,
                        Box::new(TermQuery::new(term, IndexRecordOption::Basic)) as Box<dyn Query>,
                    )
                })
                .collect(),
        );
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
    pub(super) fn conjunction(
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
    pub(super) fn disjunction(
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

    pub(super) fn clause_query(&self, clause: &Clause) -> Result<Box<dyn Query>, SearchError> {
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

    pub(super) fn top(
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

#[cfg(test)]
mod tests {
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
