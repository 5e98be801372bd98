//! A hit's snippet: the words a query matched, marked in a window of the first field holding one.

use super::*;

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

/// The first of title, description, name and URI that holds a matched word, cut to a window
/// of `SNIPPET_WORDS` words from just before the first match, matches between the markers.
pub(super) fn snippet(
    hit: &Hit,
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
