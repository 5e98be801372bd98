//! `catalog/search`'s params turned into the store's and the index's requests, with the
//! defaults and caps every caller gets (the daemon and the CLI reading the database alike).

use crate::protocol::{
    cut_at_char_boundary, decode_index_cursor, decode_kinds_search_cursor, decode_search_cursor,
    page_limit, InvalidParams, Kind, SearchParams, DEFAULT_HIGHLIGHT, DEFAULT_SEARCH_LIMIT,
    MAX_QUERY_BYTES, MAX_SEARCH_LIMIT, MAX_SEARCH_OFFSET,
};
use std::collections::BTreeSet;

use crate::answer::invalid_params;
use crate::protocol::uri_flags::{flags_of_listing, UriFlagFilter};
use crate::protocol::{self as wire, ErrorObject};
use crate::store::{self, SearchRequest};

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
        let entry_kinds: Vec<Kind> = kinds
            .iter()
            .copied()
            .filter(|kind| matches!(kind, Kind::Tool | Kind::Prompt))
            .collect();
        let mut request = self.into_request()?;
        let mut index = request.clone();
        index.kinds = kinds;
        index.offset = index_offset.unwrap_or(0);
        let entries = (!entry_kinds.is_empty()).then(|| SearchRequest {
            kinds: entry_kinds,
            // One more than the page shows, to know whether more follow.
            limit: request.limit + 1,
            offset: entry_offset,
            ..request.clone()
        });
        request.offset = resource_offset;
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
    /// SQLite's tool and prompt part; `None` when neither is searched.
    pub entries: Option<SearchRequest>,
    pub limit: usize,
}

impl SearchParams {
    /// What the answer says when a plain query is longer than `MAX_QUERY_BYTES`: how many of
    /// its words were not searched, and the first of them. `None` when every word counts.
    pub fn cut_words_note(&self) -> Option<String> {
        if self.raw.unwrap_or(false) || self.query.len() <= MAX_QUERY_BYTES {
            return None;
        }
        let end = cut_at_char_boundary(&self.query, MAX_QUERY_BYTES).len();
        // A word the cut splits counts as dropped: only its start was searched.
        let start = self.query[..end]
            .rfind(|letter: char| !letter.is_alphanumeric())
            .map_or(0, |position| position + 1);
        let dropped: Vec<&str> = self.query[start..]
            .split(|letter: char| !letter.is_alphanumeric())
            .filter(|word| !word.is_empty())
            .collect();
        let shown: Vec<String> = dropped
            .iter()
            .take(5)
            .map(|word| word.chars().take(32).collect())
            .collect();
        Some(format!(
            "the query is longer than {MAX_QUERY_BYTES} bytes: its last {} words were not searched, from \"{}\"{}",
            dropped.len(),
            shown.join(" "),
            if dropped.len() > shown.len() { " …" } else { "" }
        ))
    }

    /// The store's request, with the defaults and caps every caller gets (the daemon and the
    /// CLI reading the database alike).
    pub fn into_request(self) -> Result<SearchRequest, InvalidParams> {
        let limit = page_limit(self.limit, DEFAULT_SEARCH_LIMIT, MAX_SEARCH_LIMIT)?;
        let raw = self.raw.unwrap_or(false);
        let mut query = self.query;
        if query.len() > MAX_QUERY_BYTES {
            // Raw syntax cut anywhere could mean something else; a long paste of plain words
            // is cut, and the answer says which words were left out (`cut_words_note`).
            if raw {
                return Err(InvalidParams(format!(
                    "`query`: a raw query of {} bytes is longer than the limit of {MAX_QUERY_BYTES} bytes",
                    query.len()
                )));
            }
            let end = cut_at_char_boundary(&query, MAX_QUERY_BYTES).len();
            query.truncate(end);
        }
        let mut request = SearchRequest::new(query, limit);
        request.kinds = vec![Kind::Resource];
        request.server = self.server;
        request.mime_type = self.mime_type;
        request.raw = raw;
        request.mode = self.mode;
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

/// Whether a hit passes the request's `uriFlags` filter (every hit when there is none). Like
/// the view, it filters the ranked page: a page may hold fewer hits than `limit`, and the
/// cursor goes on past what it left out.
pub(in crate::answer) fn has_uri_flags(
    filters: Option<&BTreeSet<UriFlagFilter>>,
    hit: &wire::SearchHit,
) -> bool {
    filters.map_or(true, |filters| {
        let flags = flags_of_listing(hit.kind, hit.uri.as_deref().unwrap_or_default());
        UriFlagFilter::keeps(filters, &flags)
    })
}

/// A search's params read once, for the daemon and the offline CLI alike.
pub(in crate::answer) enum ParsedSearch {
    /// Tools, prompts or templates among the kinds.
    Kinds(Box<KindsSearch>),
    /// Resources alone; `sqlite_cursor` when its cursor is SQLite's (it stays with SQLite:
    /// the two rank differently).
    Resources {
        request: Box<store::SearchRequest>,
        sqlite_cursor: bool,
    },
}

impl ParsedSearch {
    /// Searches the listings of `servers` only, each listing (`SearchRequest::servers`).
    pub(super) fn within(&mut self, servers: &BTreeSet<String>) {
        let requests: Vec<&mut store::SearchRequest> = match self {
            ParsedSearch::Kinds(search) => {
                let KindsSearch {
                    index,
                    resources,
                    entries,
                    ..
                } = search.as_mut();
                std::iter::once(index)
                    .chain(resources.as_mut())
                    .chain(entries.as_mut())
                    .collect()
            }
            ParsedSearch::Resources { request, .. } => vec![request.as_mut()],
        };
        for request in requests {
            request.servers = Some(servers.clone());
        }
    }
}

pub(in crate::answer) fn parsed(params: SearchParams) -> Result<ParsedSearch, ErrorObject> {
    if params.searches_entries() {
        return Ok(ParsedSearch::Kinds(Box::new(
            params.into_kinds_request().map_err(invalid_params)?,
        )));
    }
    let sqlite_cursor = params.cursor.as_deref().map(wire::is_index_cursor) == Some(false);
    Ok(ParsedSearch::Resources {
        request: Box::new(params.into_request().map_err(invalid_params)?),
        sqlite_cursor,
    })
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
