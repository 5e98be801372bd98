//! The one FTS5 search every kind goes through. Resources and templates keep their own table
//! (`resources_fts`) and tools and prompts share `entries_fts` (one table per kind would cost a
//! migration of a million rows for no gain in what a search does); each kind's search brings
//! its statement as data (its FTS5 table, its filters, its columns, its tie order), and this
//! does the rest alike for all: what a person typed made a safe MATCH (`fts_query`) or the
//! caller's raw FTS5 syntax, the deadline, who is to blame for an error, and the score.

use std::time::Instant;

use rusqlite::Connection;

use super::StoreError;

/// The most words of a typed query that take part in a search; a query pasted from a whole
/// document would otherwise cost a phrase per word.
const MAX_QUERY_WORDS: usize = 32;
/// The longest word that takes part in a search.
const MAX_WORD_CHARS: usize = 256;
/// SQLite virtual machine steps between two looks at a search's deadline (a look costs one
/// clock read; at 10,000 a 300 ms limit was overrun by 700 ms in a debug build, at 1,000 by 60).
const DEADLINE_CHECK_STEPS: i32 = 1_000;

/// A search of one kind's FTS5 table, as asked.
#[derive(Debug, Clone, Copy)]
pub(super) struct FullTextQuery<'a> {
    /// What a person typed, or raw FTS5 syntax when `raw`.
    pub text: &'a str,
    pub raw: bool,
    /// When set, the search is cancelled (`StoreError::SearchTimedOut`) once this passes.
    pub deadline: Option<Instant>,
}

/// Turns what a person typed into a safe FTS5 query: every word is a quoted phrase and
/// the last one also matches as a prefix. `None` when nothing searchable is left.
pub fn fts_query(text: &str) -> Option<String> {
    let words: Vec<String> = text
        .split_whitespace()
        .filter(|word| word.chars().any(char::is_alphanumeric))
        .take(MAX_QUERY_WORDS)
        .map(|word| word.chars().take(MAX_WORD_CHARS).collect())
        .collect();
    let last = words.len().checked_sub(1)?;
    let terms: Vec<String> = words
        .iter()
        .enumerate()
        .map(|(index, word)| {
            let quoted = format!("\"{}\"", word.replace('"', "\"\""));
            if index == last {
                format!("{quoted}*")
            } else {
                quoted
            }
        })
        .collect();
    Some(terms.join(" "))
}

/// A hit's score from FTS5's bm25 `rank`, which is lower for better matches: hits carry a
/// score where higher is better.
pub(super) fn score(rank: f64) -> f64 {
    -rank
}

/// Runs one kind's search: `statement` gets the MATCH expression and the blame for a SQLite
/// error (a raw query's syntax errors are the caller's, anything else ours) and returns the
/// kind's page. `None` when nothing searchable was typed. Under a deadline the connection
/// stops at it (the handler belongs to this search only: it is removed before the pooled
/// connection serves anyone else, whatever the outcome).
pub(super) fn search<T>(
    connection: &Connection,
    query: FullTextQuery<'_>,
    statement: impl FnOnce(&str, &dyn Fn(rusqlite::Error) -> StoreError) -> Result<T, StoreError>,
) -> Result<Option<T>, StoreError> {
    let matched = match query.raw {
        true => Some(query.text.to_string()),
        false => fts_query(query.text),
    };
    let Some(matched) = matched else {
        return Ok(None);
    };
    let blame = |error: rusqlite::Error| {
        let interrupted =
            error.sqlite_error_code() == Some(rusqlite::ErrorCode::OperationInterrupted);
        match query.raw && !interrupted {
            true => StoreError::InvalidQuery(error.to_string()),
            false => StoreError::Sql(error),
        }
    };
    let Some(deadline) = query.deadline else {
        return statement(&matched, &blame).map(Some);
    };
    connection.progress_handler(
        DEADLINE_CHECK_STEPS,
        Some(move || Instant::now() >= deadline),
    );
    let outcome = statement(&matched, &blame);
    connection.progress_handler(0, None::<fn() -> bool>);
    match outcome {
        Err(error) if Instant::now() >= deadline && error.is_interrupted() => {
            Err(StoreError::SearchTimedOut)
        }
        other => other.map(Some),
    }
}
