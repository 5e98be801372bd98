//! `catalog/search`: the params turned into the store's and the index's requests, with the
//! defaults and caps every caller gets; SQLite's answer on a `Reader` (the resource page and
//! the tool and prompt hits merged by score); and the hits shaped as the socket answers them.

use crate::protocol::{
    self as wire, decode_index_cursor, decode_kinds_search_cursor, decode_search_cursor,
    encode_search_cursor, page_limit, ErrorObject, InvalidParams, Kind, SearchParams,
    DEFAULT_HIGHLIGHT, DEFAULT_SEARCH_LIMIT, MAX_QUERY_BYTES, MAX_SEARCH_LIMIT, MAX_SEARCH_OFFSET,
};
use crate::store::{self, EntryHit, EntrySearch, FullTextPage, Reader, SearchRequest, StoreError};

use super::{internal, invalid, invalid_params};

impl SearchParams {
    /// A search of several kinds: the whole request as the search index takes it (every kind
    /// asked, the offset of an index cursor), and for SQLite the resource request (its offset
    /// the resource part of a SQLite cursor), the entry search, and the limit of the merged
    /// page.
    pub fn into_kinds_request(mut self) -> Result<KindsSearch, InvalidParams> {
        let cursor = self.cursor.take();
        let sqlite_cursor = cursor
            .as_deref()
            .and_then(decode_kinds_search_cursor)
            .map(|(resources, entries)| {
                if resources <= MAX_SEARCH_OFFSET && entries <= MAX_SEARCH_OFFSET {
                    Ok((resources, entries))
                } else {
                    Err(InvalidParams("invalid cursor".into()))
                }
            })
            .transpose()?;
        let index_offset = match (&cursor, sqlite_cursor) {
            (Some(cursor), None) => Some(
                decode_index_cursor(cursor)
                    .filter(|offset| *offset <= MAX_SEARCH_OFFSET)
                    .ok_or_else(|| InvalidParams("invalid cursor".into()))?,
            ),
            _ => None,
        };
        let (resource_offset, entry_offset) = sqlite_cursor.unwrap_or((0, 0));
        let kinds = self.kinds.take().unwrap_or_else(|| Kind::ALL.to_vec());
        let searches_resources = kinds.contains(&Kind::Resource);
        // Tools and prompts have no MIME type: a `mimeType` filter leaves only resources.
        let entries_match = self.mime_type.is_none();
        let mut request = self.into_request()?;
        let mut index = request.clone();
        index.kinds = kinds.clone();
        index.offset = index_offset.unwrap_or(0);
        request.offset = resource_offset;
        let entries = EntrySearch {
            query: request.query.clone(),
            raw: request.raw,
            kinds: kinds
                .iter()
                .copied()
                .filter(|kind| entries_match && matches!(kind, Kind::Tool | Kind::Prompt))
                .collect(),
            server: request.server.clone(),
            // One more than the page shows, to know whether more follow.
            limit: request.limit + 1,
            offset: entry_offset,
            deadline: None,
        };
        Ok(KindsSearch {
            limit: request.limit,
            index,
            sqlite_cursor: sqlite_cursor.is_some(),
            resources: searches_resources.then_some(request),
            entries,
        })
    }
}

/// A `catalog/search` of several kinds, paged as one ranking: by the search index in one
/// query, or by SQLite's two full-text indexes (resources; tools and prompts) merged.
#[derive(Debug, Clone)]
pub struct KindsSearch {
    /// The whole search as the index takes it: every kind asked, the index cursor's offset.
    pub index: SearchRequest,
    /// The cursor came from SQLite's merged ranking: the pages stay with SQLite.
    pub sqlite_cursor: bool,
    /// SQLite's resource part; `None` when resources are not searched.
    pub resources: Option<SearchRequest>,
    pub entries: EntrySearch,
    pub limit: usize,
}

impl SearchParams {
    /// The store's request, with the defaults and caps every caller gets (the daemon and the
    /// CLI reading the database alike).
    pub fn into_request(self) -> Result<SearchRequest, InvalidParams> {
        let limit = page_limit(self.limit, DEFAULT_SEARCH_LIMIT, MAX_SEARCH_LIMIT)?;
        let raw = self.raw.unwrap_or(false);
        let mut query = self.query;
        if query.len() > MAX_QUERY_BYTES {
            // Raw syntax cut anywhere could mean something else; plain words only ever use the
            // first few (`MAX_QUERY_WORDS` in the store), so a long paste is simply cut.
            if raw {
                return Err(InvalidParams(format!(
                    "`query`: a raw query of {} bytes is longer than the limit of {MAX_QUERY_BYTES} bytes",
                    query.len()
                )));
            }
            let mut end = MAX_QUERY_BYTES;
            while !query.is_char_boundary(end) {
                end -= 1;
            }
            query.truncate(end);
        }
        let mut request = SearchRequest::new(query, limit);
        request.server = self.server;
        request.mime_type = self.mime_type;
        request.raw = raw;
        if let Some(cursor) = self.cursor {
            request.offset = decode_search_cursor(&cursor)
                .filter(|offset| *offset <= MAX_SEARCH_OFFSET)
                .ok_or_else(|| InvalidParams("invalid cursor".into()))?;
        }
        request.highlight = self.highlight.unwrap_or_else(|| {
            (
                DEFAULT_HIGHLIGHT.0.to_string(),
                DEFAULT_HIGHLIGHT.1.to_string(),
            )
        });
        Ok(request)
    }
}

/// A store error of a search as the caller sees it: FTS5 syntax it got wrong is its params.
pub fn searched(error: StoreError) -> ErrorObject {
    match error {
        StoreError::InvalidQuery(_) => invalid(error.to_string()),
        other => internal(other),
    }
}

/// `catalog/search` answered by SQLite's full-text indexes alone, on one reader, without a
/// deadline: what the CLI answers from the database file when no daemon runs.
pub fn sqlite_search(
    reader: &Reader,
    params: SearchParams,
) -> Result<wire::SearchResult, ErrorObject> {
    if params.searches_entries() {
        let search = params.into_kinds_request().map_err(invalid_params)?;
        let offsets = (
            search
                .resources
                .as_ref()
                .map_or(0, |request| request.offset),
            search.entries.offset,
        );
        let resources = match &search.resources {
            Some(request) => Some(reader.search(request).map_err(searched)?),
            None => None,
        };
        let entries = match search.entries.kinds.is_empty() {
            true => Vec::new(),
            false => reader.search_entries(&search.entries).map_err(searched)?,
        };
        return Ok(merge_search_pages(
            resources,
            entries,
            offsets,
            search.limit,
        ));
    }
    let request = params.into_request().map_err(invalid_params)?;
    let page = reader.search(&request).map_err(searched)?;
    let mut result = search_result(page.hits, page.next);
    result.note = page.note;
    Ok(result)
}

/// SQLite's resource hits as the socket answers them, with the cursor to the next page.
pub fn search_result(hits: Vec<store::SearchHit>, next: Option<usize>) -> wire::SearchResult {
    wire::SearchResult {
        results: hits
            .into_iter()
            .map(|hit| wire::SearchHit {
                meta: Some(wire::origin_meta(&hit.server)),
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
    }
}

/// One page of a search of several kinds: the resource page (its hits and whether more
/// follow) and the tool and prompt hits (one more than `limit` when more follow), merged best
/// first. The cursor counts how many of each the pages so far showed, so each ranking
/// continues where it stopped. When the resource page ended early (cut by its byte bound),
/// the merged page stops there too, since an unseen resource could outrank what follows.
pub fn merge_search_pages(
    resources: Option<FullTextPage>,
    entries: Vec<EntryHit>,
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
            results.push(wire::SearchHit {
                kind: hit.kind,
                meta: Some(wire::origin_meta(&hit.server)),
                server: hit.server,
                uri: None,
                name: hit.name,
                title: hit.title,
                mime_type: None,
                description: hit.description,
                score: hit.score,
                snippet: None,
            });
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
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::parse_params;
    use serde_json::json;

    #[test]
    fn search_defaults_and_caps_are_the_same_for_everyone() {
        let request = parse_params::<SearchParams>(json!({"query": "a", "raw": null}))
            .expect("parse")
            .into_request()
            .expect("valid");
        assert_eq!(request.limit, DEFAULT_SEARCH_LIMIT);
        assert!(!request.raw);
        assert_eq!(
            request.highlight,
            (DEFAULT_HIGHLIGHT.0.into(), DEFAULT_HIGHLIGHT.1.into())
        );
        let capped = SearchParams {
            query: "a".into(),
            limit: Some(1_000_000),
            ..SearchParams::default()
        };
        assert_eq!(
            capped.into_request().expect("valid").limit,
            MAX_SEARCH_LIMIT
        );
        let deep = SearchParams {
            query: "a".into(),
            cursor: Some(crate::protocol::encode_search_cursor(MAX_SEARCH_OFFSET + 1)),
            ..SearchParams::default()
        };
        assert!(deep.into_request().is_err());
    }
}

#[cfg(test)]
mod kinds_tests {
    use super::*;
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

    fn tool(name: &str, score: f64) -> EntryHit {
        EntryHit {
            server: "fx".into(),
            kind: Kind::Tool,
            name: name.into(),
            title: None,
            description: None,
            score,
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
