//! `catalog/search`'s hits as the socket answers them: one shape for every engine, and the
//! merge of SQLite's resource page with its tool and prompt hits by score.

use crate::answer::{internal, invalid};
use crate::protocol::{self as wire, encode_search_cursor, ErrorObject};
use crate::store::{self, FullTextPage, StoreError};

/// A store error of a search as the caller sees it: FTS5 syntax it got wrong is its params.
pub fn searched(error: StoreError) -> ErrorObject {
    match error {
        StoreError::InvalidQuery(_) => invalid(error.to_string()),
        other => internal(other),
    }
}

/// SQLite's resource hits as the socket answers them, with the cursor to the next page.
pub fn search_result(hits: Vec<store::SearchHit>, next: Option<usize>) -> wire::SearchResult {
    wire::SearchResult {
        results: hits
            .into_iter()
            .map(|hit| wire::SearchHit {
                meta: Some(hit_meta(&hit)),
                // Tools and prompts have no URI.
                uri: matches!(hit.kind, wire::Kind::Resource | wire::Kind::Template)
                    .then_some(hit.uri),
                kind: hit.kind,
                server: hit.server,
                name: hit.name,
                title: hit.title,
                mime_type: hit.mime_type,
                description: hit.description,
                score: hit.score,
                snippet: hit.snippet,
            })
            .collect(),
        next_cursor: next.map(encode_search_cursor),
        engine: Some(wire::SearchEngine::Sqlite),
        match_mode: None,
        note: None,
        mode: Some(wire::SearchMode::Lexical),
    }
}

/// A hit's `_meta`: its origin, and the URI flags its entry carries (the same pure function
/// of its URI, or its template's expansion base, that marked the entry as it entered).
fn hit_meta(hit: &store::SearchHit) -> serde_json::Value {
    use wire::uri_flags::{flags_of_listing, URI_FLAGS_META_KEY};
    let mut meta = wire::origin_meta(&hit.server);
    let flags = flags_of_listing(hit.kind, &hit.uri);
    if let (false, Some(object)) = (flags.is_empty(), meta.as_object_mut()) {
        let names = flags.iter().map(|flag| flag.as_str().into()).collect();
        object.insert(URI_FLAGS_META_KEY.into(), serde_json::Value::Array(names));
    }
    meta
}

/// One page of a search of several kinds: the resource page (its hits and whether more
/// follow) and the tool and prompt hits (one more than `limit` when more follow), merged best
/// first. The cursor counts how many of each the pages so far showed, so each ranking
/// continues where it stopped. When the resource page ended early (cut by its byte bound),
/// the merged page stops there too, since an unseen resource could outrank what follows.
pub fn merge_search_pages(
    resources: Option<FullTextPage>,
    entries: Vec<store::SearchHit>,
    (resource_offset, entry_offset): (usize, usize),
    limit: usize,
) -> wire::SearchResult {
    let (resources, resources_follow, note) = match resources {
        Some(page) => (page.hits, page.next.is_some(), page.note),
        None => (Vec::new(), false, None),
    };
    let mut resources = resources.into_iter().peekable();
    let mut entries = entries.into_iter().peekable();
    let (mut shown_resources, mut shown_entries) = (0, 0);
    let mut results = Vec::with_capacity(limit);
    while results.len() < limit {
        let take_resource = match (resources.peek(), entries.peek()) {
            (Some(resource), Some(entry)) => resource.score >= entry.score,
            (Some(_), None) => true,
            // Resources past this page could outrank the next entry.
            (None, Some(_)) if resources_follow => break,
            (None, Some(_)) => false,
            (None, None) => break,
        };
        if take_resource {
            if let Some(hit) = resources.next() {
                shown_resources += 1;
                results.extend(search_result(vec![hit], None).results);
            }
        } else if let Some(hit) = entries.next() {
            shown_entries += 1;
            results.extend(search_result(vec![hit], None).results);
        }
    }
    let more = resources.peek().is_some() || resources_follow || entries.peek().is_some();
    wire::SearchResult {
        results,
        next_cursor: more.then(|| {
            wire::encode_kinds_search_cursor(
                resource_offset + shown_resources,
                entry_offset + shown_entries,
            )
        }),
        engine: Some(wire::SearchEngine::Sqlite),
        match_mode: None,
        note,
        mode: Some(wire::SearchMode::Lexical),
    }
}

/// Two notes as one, either or both absent.
pub(in crate::answer) fn joined_notes(
    first: Option<String>,
    second: Option<String>,
) -> Option<String> {
    match (first, second) {
        (Some(first), Some(second)) => Some(format!("{first}; {second}")),
        (first, second) => first.or(second),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::Kind;
    use crate::store::SearchHit;

    fn resource_page(hits: Vec<SearchHit>, next: Option<usize>) -> FullTextPage {
        FullTextPage {
            hits,
            next,
            note: None,
        }
    }

    fn resource(uri: &str, score: f64) -> SearchHit {
        SearchHit {
            kind: Kind::Resource,
            server: "docs".into(),
            uri: uri.into(),
            name: uri.into(),
            title: None,
            mime_type: None,
            description: None,
            score,
            snippet: None,
        }
    }

    fn tool(name: &str, score: f64) -> SearchHit {
        SearchHit {
            server: "fx".into(),
            kind: Kind::Tool,
            uri: String::new(),
            name: name.into(),
            title: None,
            mime_type: None,
            description: None,
            score,
            snippet: None,
        }
    }

    fn keys(result: &wire::SearchResult) -> Vec<String> {
        result
            .results
            .iter()
            .map(|hit| hit.uri.clone().unwrap_or_else(|| hit.name.clone()))
            .collect()
    }

    #[test]
    fn merged_pages_rank_by_score_and_count_each_side_in_the_cursor() {
        let page = merge_search_pages(
            Some(resource_page(
                vec![resource("r1", 9.0), resource("r2", 5.0)],
                Some(2),
            )),
            vec![tool("t1", 7.0), tool("t2", 1.0), tool("t3", 0.5)],
            (10, 20),
            2,
        );
        assert_eq!(keys(&page), ["r1", "t1"]);
        assert_eq!(page.results[1].kind, Kind::Tool);
        assert_eq!(page.results[1].uri, None);
        assert_eq!(
            page.next_cursor.as_deref(),
            Some(wire::encode_kinds_search_cursor(11, 21).as_str())
        );
        // Nothing follows on either side: no cursor.
        let last = merge_search_pages(
            Some(resource_page(vec![resource("r", 1.0)], None)),
            vec![],
            (0, 0),
            5,
        );
        assert_eq!(keys(&last), ["r"]);
        assert_eq!(last.next_cursor, None);
    }

    #[test]
    fn a_resource_page_cut_short_stops_the_merged_page_where_it_ends() {
        // The resource page carried one hit of the three asked for (its byte bound), and more
        // follow: a tool that ranks below that hit must wait, an unseen resource may outrank it.
        let page = merge_search_pages(
            Some(resource_page(vec![resource("r1", 9.0)], Some(1))),
            vec![tool("t1", 10.0), tool("t2", 1.0)],
            (0, 0),
            3,
        );
        assert_eq!(keys(&page), ["t1", "r1"]);
        assert_eq!(
            page.next_cursor.as_deref(),
            Some(wire::encode_kinds_search_cursor(1, 1).as_str())
        );
    }
}
