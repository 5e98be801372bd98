//! A hit's snippet: the words a query matched, marked in a window of the first field holding one.

use std::collections::HashSet;

use super::stages::Clause;
use crate::search::schema::{snippet_analyzer, words_with_spans};

/// Which words of a document a snippet marks.
#[derive(Default)]
pub(super) struct Matcher {
    words: HashSet<String>,
    prefixes: Vec<String>,
}

impl Matcher {
    pub(super) fn add(&mut self, clause: &Clause) {
        match clause {
            Clause::Terms(terms) => self
                .words
                .extend(terms.iter().map(|(term, _)| term.clone())),
            Clause::Prefix(prefix) => self.prefixes.push(prefix.clone()),
        }
    }

    pub(super) fn matches(&self, word: &str) -> bool {
        self.words.contains(word)
            || self
                .prefixes
                .iter()
                .any(|prefix| word.starts_with(prefix.as_str()))
    }
}

/// The first of title, description, name and URI that holds a matched word, through the one
/// snippet builder (`store::snippet`), the words split by the index's own snippet analyzer.
pub(super) fn snippet(
    hit: &crate::store::SearchHit,
    matcher: &Matcher,
    highlight: &(String, String),
) -> Option<String> {
    let mut analyzer = snippet_analyzer();
    let fields = [
        hit.title.as_deref(),
        hit.description.as_deref(),
        Some(hit.name.as_str()),
        Some(hit.uri.as_str()),
    ];
    crate::store::snippet::snippet(fields.into_iter().flatten(), highlight, |text| {
        words_with_spans(&mut analyzer, text)
            .into_iter()
            .map(|(word, start, end)| (start, end, matcher.matches(&word)))
            .collect()
    })
}
