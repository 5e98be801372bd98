//! The one snippet builder of both search engines (SQLite's FTS5 search and the derived index):
//! the first of a hit's fields that holds a matched word, cut to a window of words from just
//! before the first match, with each run of matched words between one pair of markers.
//!
//! Each engine brings its own word splitting and matching (the words its own tokenizer makes),
//! as `(start, end, matched)` byte spans of a field's words, so a snippet marks what the
//! engine matched.

/// Words kept in a snippet.
pub const SNIPPET_WORDS: usize = 12;

/// A word of a field: its byte span, and whether the query matched it.
pub type WordSpan = (usize, usize, bool);

/// The snippet of the first of `fields` (in order) whose `words` include a matched one:
/// `SNIPPET_WORDS` words from two before the first match, "…" where the field is cut,
/// neighbouring matches sharing one pair of `highlight` markers. `None` when no field matches.
pub fn snippet<'a>(
    fields: impl IntoIterator<Item = &'a str>,
    highlight: &(String, String),
    mut words: impl FnMut(&'a str) -> Vec<WordSpan>,
) -> Option<String> {
    for text in fields {
        let words = words(text);
        let Some(first) = words.iter().position(|&(_, _, matched)| matched) else {
            continue;
        };
        let from = first.saturating_sub(2);
        let to = (from + SNIPPET_WORDS).min(words.len());
        let mut snippet = String::new();
        if from > 0 {
            snippet.push('\u{2026}');
        }
        // Neighbouring matches share one pair of markers, as a matched phrase does in FTS5.
        let mut cursor = words[from].0;
        let mut open = false;
        for &(start, end, matched) in &words[from..to] {
            if open && !matched {
                snippet.push_str(&highlight.1);
                open = false;
            }
            snippet.push_str(&text[cursor..start]);
            if matched && !open {
                snippet.push_str(&highlight.0);
                open = true;
            }
            snippet.push_str(&text[start..end]);
            cursor = end;
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
mod tests {
    use super::*;

    fn spans(text: &str, matched: &[&str]) -> Vec<WordSpan> {
        let mut spans = Vec::new();
        let mut offset = 0;
        for word in text.split(' ') {
            spans.push((offset, offset + word.len(), matched.contains(&word)));
            offset += word.len() + 1;
        }
        spans
    }

    #[test]
    fn the_first_matching_field_in_a_window_with_shared_markers() {
        let marks = ("[".to_string(), "]".to_string());
        let fields = [
            "no match here",
            "one two three four five six seven eight nine ten eleven twelve thirteen fourteen",
        ];
        let text = snippet(fields, &marks, |text| {
            spans(text, &["four", "five", "seven"])
        });
        assert_eq!(
            text.as_deref(),
            Some("\u{2026}two three [four five] six [seven] eight nine ten eleven twelve thirteen\u{2026}")
        );
        let whole = snippet(["a b"], &marks, |text| spans(text, &["b"]));
        assert_eq!(whole.as_deref(), Some("a [b]"));
        assert_eq!(snippet(["a b"], &marks, |text| spans(text, &[])), None);
    }
}
