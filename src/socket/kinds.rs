//! The socket methods of every kind beside resources (`catalog/tools`, `/prompts`, `/tool`, `/prompt`, `/accept`, `/drift`, per-kind status), `catalog/search` of several kinds, and the MCP face's own tools, `search_catalog` and `describe_entry`.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::protocol::{
    self as wire, decode_cursor, encode_cursor, parse_params, ErrorObject, Kind, INVALID_PARAMS,
    ORIGIN_META_KEY, PAGE_SIZE, VIA_META_KEY,
};
use crate::socket::{DaemonContext, View};
use crate::store::{EntryHit, EntryListing, FullTextPage, Store, StoreError};

/// JSON-RPC's "resource not found" for a tool or prompt no server lists.
const NOT_FOUND: i64 = crate::protocol::RESOURCE_NOT_FOUND;
/// The separator between server and name inside a `catalog/tools` cursor.
const CURSOR_SEPARATOR: char = '\u{1f}';

fn internal(error: impl std::fmt::Display) -> ErrorObject {
    ErrorObject::new(crate::protocol::INTERNAL_ERROR, error.to_string())
}

fn invalid(message: impl Into<String>) -> ErrorObject {
    ErrorObject::new(INVALID_PARAMS, message.into())
}

/// A stored definition with its origin server in `_meta`.
fn with_origin(listing: &EntryListing) -> Value {
    let mut value: Value = serde_json::from_str(&listing.raw).unwrap_or(Value::Null);
    attribute(&mut value, &listing.server);
    value
}

/// Names `server` in an entry's `_meta`: as its origin, or, when it already names one (it came
/// from another mirror), as the mirror it came via, so the origin is kept.
fn attribute(value: &mut Value, server: &str) {
    let Value::Object(object) = value else {
        return;
    };
    let meta = object
        .entry("_meta")
        .or_insert_with(|| Value::Object(Default::default()));
    if let Value::Object(meta) = meta {
        let key = match meta.get(ORIGIN_META_KEY) {
            Some(Value::String(_)) => VIA_META_KEY,
            _ => ORIGIN_META_KEY,
        };
        meta.insert(key.into(), Value::String(server.to_string()));
    }
}

/// Where a `catalog/tools` (or `/prompts`) page starts: after this (server, name).
pub fn entries_after(
    params: &wire::EntriesParams,
) -> Result<Option<(String, String)>, ErrorObject> {
    let Some(cursor) = &params.cursor else {
        return Ok(None);
    };
    let key = decode_cursor(cursor).ok_or_else(|| invalid("invalid cursor"))?;
    let (server, name) = key
        .split_once(CURSOR_SEPARATOR)
        .ok_or_else(|| invalid("invalid cursor"))?;
    Ok(Some((server.to_string(), name.to_string())))
}

/// The stored rows of a page as the socket answers them, and the cursor to the next page.
pub fn entries_page_of(rows: &[EntryListing], more: bool) -> (Vec<Value>, Option<String>) {
    let next = match (more, rows.last()) {
        (true, Some(last)) => Some(encode_cursor(&format!(
            "{}{CURSOR_SEPARATOR}{}",
            last.server, last.name
        ))),
        _ => None,
    };
    (rows.iter().map(with_origin).collect(), next)
}

/// A page of one kind's entries the view sees, and the cursor to the next page (after the
/// last entry read, whatever the view left of the page).
pub(crate) async fn entries_page(
    store: &Store,
    kind: Kind,
    params: wire::EntriesParams,
    view: &View,
) -> Result<(Vec<Value>, Option<String>), ErrorObject> {
    let after = entries_after(&params)?;
    let (mut rows, more) = store
        .list_entries(kind, params.server, after, PAGE_SIZE)
        .await
        .map_err(internal)?;
    let (_, next) = entries_page_of(&rows[rows.len().saturating_sub(1)..], more);
    rows.retain(|row| view.sees(&row.server, kind));
    let (entries, _) = entries_page_of(&rows, false);
    Ok((entries, next))
}

/// One stored tool or prompt as `catalog/tool` answers; `NOT_FOUND` when there is none.
pub fn entry_details_of(
    kind: Kind,
    params: &wire::EntryParams,
    listing: Option<EntryListing>,
) -> Result<wire::EntryDetails, ErrorObject> {
    let listing = listing.ok_or_else(|| {
        ErrorObject::new(
            NOT_FOUND,
            format!(
                "server {} lists no {kind} named {}",
                params.server, params.name
            ),
        )
    })?;
    Ok(wire::EntryDetails {
        definition: serde_json::from_str(&listing.raw).map_err(internal)?,
        server: listing.server,
        kind,
        name: listing.name,
        stale: listing.stale,
        snapshot_at_ms: listing.snapshot_at_ms,
    })
}

/// One tool or prompt, whole; `NOT_FOUND` when the server does not list it, or the view does
/// not see it.
pub(crate) async fn entry_details(
    store: &Store,
    kind: Kind,
    params: wire::EntryParams,
    view: &View,
) -> Result<wire::EntryDetails, ErrorObject> {
    let listing = match view.sees(&params.server, kind) {
        true => store
            .entry(kind, &params.server, &params.name)
            .await
            .map_err(internal)?,
        false => None,
    };
    entry_details_of(kind, &params, listing)
}

/// `server`, when named, must be configured: the same "no server named" error (`notFound:
/// server`, exit 4 in the CLI) as `catalog/list` and `catalog/refresh` answer.
async fn known_server(store: &Store, server: Option<&str>) -> Result<(), ErrorObject> {
    let Some(server) = server else {
        return Ok(());
    };
    if store.server_exists(server).await.map_err(internal)? {
        return Ok(());
    }
    Err(
        ErrorObject::new(INVALID_PARAMS, format!("no server named {server}")).with_data(
            wire::ErrorData {
                not_found: Some("server".into()),
                server: Some(server.into()),
                ..wire::ErrorData::default()
            },
        ),
    )
}

pub async fn accept(
    store: &Store,
    params: wire::ServerParams,
) -> Result<wire::AcceptResult, ErrorObject> {
    known_server(store, params.server.as_deref()).await?;
    let accepted = store
        .accept(params.server)
        .await
        .map_err(|error| match error {
            StoreError::Walk(message) => invalid(message),
            other => internal(other),
        })?;
    Ok(wire::AcceptResult { accepted })
}

pub async fn drift(
    store: &Store,
    params: wire::ServerParams,
) -> Result<wire::DriftResult, ErrorObject> {
    known_server(store, params.server.as_deref()).await?;
    let rows = store.drift(params.server).await.map_err(internal)?;
    let drift = rows
        .into_iter()
        .map(|row| {
            let field = |definition: &Option<Value>, name: &str| {
                definition
                    .as_ref()
                    .and_then(|definition| definition.get(name))
                    .cloned()
            };
            let fields = row
                .fields
                .iter()
                .map(|name| {
                    let change = wire::FieldChange {
                        accepted: field(&row.accepted, name),
                        current: field(&row.current, name),
                    };
                    (name.clone(), change)
                })
                .collect();
            wire::DriftEntry {
                server: row.server,
                kind: row.kind,
                name: row.name,
                change: row.change,
                fields,
                accepted: row.accepted,
                current: row.current,
            }
        })
        .collect();
    Ok(wire::DriftResult { drift })
}

/// Fills each server's per-kind counts and drift into a status answer.
pub async fn add_kind_status(
    store: &Store,
    servers: &mut [wire::ServerStatus],
) -> Result<(), ErrorObject> {
    let mut counts = store.kind_counts().await.map_err(internal)?;
    for server in servers {
        let Some(kinds) = counts.remove(&server.name) else {
            continue;
        };
        server.kinds = kinds
            .into_iter()
            .map(|(kind, counts)| {
                let status = wire::KindStatus {
                    count: counts.entries,
                    snapshot_at_ms: counts.snapshot_at_ms,
                    drift: counts.drift.map(|drift| wire::DriftCount {
                        added: drift.added,
                        removed: drift.removed,
                        changed: drift.changed,
                    }),
                };
                (kind, status)
            })
            .collect::<BTreeMap<_, _>>();
    }
    Ok(())
}

/// The first line of a description, cut to `HIT_DESCRIPTION_CHARS`.
fn one_line(description: Option<String>) -> Option<String> {
    let line = description?
        .lines()
        .find(|line| !line.trim().is_empty())?
        .trim()
        .to_string();
    Some(line.chars().take(wire::HIT_DESCRIPTION_CHARS).collect())
}

/// `search_catalog`, the MCP face's search: the same path as `catalog/search` with `kinds`
/// (every kind when absent), best first.
pub(crate) async fn search_catalog(
    context: &DaemonContext,
    arguments: wire::SearchCatalogArguments,
    view: &View,
) -> Result<Vec<wire::CatalogHit>, ErrorObject> {
    let limit = arguments
        .limit
        .map(|limit| limit.clamp(1, wire::MAX_CATALOG_HITS as u64))
        .unwrap_or(wire::DEFAULT_CATALOG_HITS as u64);
    let params = wire::SearchParams {
        query: arguments.query,
        limit: Some(limit),
        server: arguments.server,
        kinds: Some(arguments.kinds.unwrap_or_else(|| Kind::ALL.to_vec())),
        mode: arguments.mode,
        ..wire::SearchParams::default()
    };
    let search = params
        .into_kinds_request()
        .map_err(|error| invalid(error.0))?;
    let result = search_kinds(search, context).await?;
    let mut hits = Vec::with_capacity(result.results.len());
    for hit in result.results {
        // A scoped client sees only what its view allows.
        if !view.sees(&hit.server, hit.kind) {
            continue;
        }
        // A tool's definition as its server listed it: what a host registers natively.
        let definition = match (arguments.definitions, hit.kind) {
            (Some(true), Kind::Tool | Kind::Prompt) => context
                .store
                .entry(hit.kind, &hit.server, &hit.name)
                .await
                .map_err(internal)?
                .as_ref()
                .map(with_origin),
            _ => None,
        };
        hits.push(wire::CatalogHit {
            kind: hit.kind,
            server: hit.server,
            name: hit.name,
            uri: hit.uri,
            title: hit.title,
            description: one_line(hit.description),
            score: hit.score,
            definition,
        });
    }
    Ok(hits)
}

/// `catalog/search` of several kinds: one ranked query of the derived search index, every
/// kind in it and the kinds an index filter, when the index can answer for the catalog as it
/// stands; else SQLite, whose resource and entry full-text indexes are merged by score (both
/// negated BM25), with the reason in `note`. A cursor stays with the engine that made it,
/// except that an index cursor is continued by SQLite when the index cannot answer.
pub async fn search_kinds(
    search: crate::answer::KindsSearch,
    context: &DaemonContext,
) -> Result<wire::SearchResult, ErrorObject> {
    let mut note = None;
    if let (Some(index), false, false) = (
        &context.search_index,
        search.sqlite_cursor,
        search.index.raw,
    ) {
        match crate::socket::ranked_search(index, context, &search.index).await? {
            Ok(answer) => {
                let mut result = crate::socket::search_result(answer.hits, None);
                result.next_cursor = answer.next.map(wire::encode_index_cursor);
                result.engine = Some(wire::SearchEngine::Index);
                result.match_mode = answer.mode;
                result.mode = Some(answer.search_mode);
                result.note = answer.note;
                return Ok(result);
            }
            Err(why) => note = Some(why),
        }
    }
    // SQLite with a share of the budget when the index's last commit can answer instead.
    let index = context
        .search_index
        .as_ref()
        .filter(|_| !search.sqlite_cursor && !search.index.raw);
    let request = search.index.clone();
    let sqlite = crate::socket::sqlite_within_share(index, context, |share| {
        let mut search = search;
        if let Some(resources) = &mut search.resources {
            resources.deadline = share;
        }
        sqlite_kinds_search(search, context)
    });
    match (sqlite.await?, index) {
        (Some(mut result), _) => {
            result.note = note;
            Ok(result)
        }
        (None, Some(index)) => {
            let answer = crate::socket::stale_search(index, context, &request).await?;
            let mut result = crate::socket::search_result(answer.hits, None);
            result.next_cursor = answer.next.map(wire::encode_index_cursor);
            result.engine = Some(wire::SearchEngine::Index);
            result.match_mode = answer.mode;
            result.mode = Some(answer.search_mode);
            result.note = answer.note;
            Ok(result)
        }
        (None, None) => Err(crate::socket::internal("no search engine answered")),
    }
}

/// The SQLite side of a search of several kinds: the resource page and the tool and prompt
/// hits merged into one page. An index cursor's position (the index was there for the page
/// before) is reached by merging from the start and leaving out what it had shown.
async fn sqlite_kinds_search(
    mut search: crate::answer::KindsSearch,
    context: &DaemonContext,
) -> Result<wire::SearchResult, ErrorObject> {
    let skip = if search.sqlite_cursor {
        0
    } else {
        search.index.offset
    };
    let limit = search.limit + skip;
    if let Some(request) = &mut search.resources {
        request.limit = limit;
    }
    search.entries.limit = limit + 1;
    let offsets = (
        search
            .resources
            .as_ref()
            .map_or(0, |request| request.offset),
        search.entries.offset,
    );
    let resources = match search.resources {
        Some(request) => Some(crate::socket::gated_search(request, context).await?),
        None => None,
    };
    let entries = gated_entry_search(search.entries, context).await?;
    let mut result = merge_search_pages(resources, entries, offsets, limit);
    result.results.drain(..skip.min(result.results.len()));
    Ok(result)
}

async fn gated_entry_search(
    mut search: crate::store::EntrySearch,
    context: &DaemonContext,
) -> Result<Vec<EntryHit>, ErrorObject> {
    if search.kinds.is_empty() {
        return Ok(Vec::new());
    }
    let permit = context
        .search_gate
        .acquire()
        .await
        .map_err(|error| ErrorObject::new(wire::BUSY, error.to_string()))?;
    search.deadline = Some(permit.deadline);
    context
        .store
        .search_entries(search)
        .await
        .map_err(|error| match error {
            StoreError::InvalidQuery(_) => invalid(error.to_string()),
            StoreError::SearchTimedOut => {
                permit.timed_out();
                let limit = context.search_gate.limits().timeout;
                ErrorObject::new(
                    wire::SEARCH_TIMED_OUT,
                    format!("the search ran longer than {limit:?} (search_timeout) and was cancelled; narrow the query"),
                )
            }
            other => internal(other),
        })
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
                results.extend(crate::socket::search_result(vec![hit], None).results);
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
        mode: Some(wire::SearchMode::Lexical),
    }
}

/// `tools/call` of the MCP face: the mirror's own two tools; any other name is an error.
pub(crate) async fn call_tool(
    context: &DaemonContext,
    params: wire::CallToolParams,
    view: &View,
) -> Result<wire::CallToolResult, ErrorObject> {
    let arguments = match params.arguments {
        Value::Null => Value::Object(Default::default()),
        other => other,
    };
    match params.name.as_str() {
        wire::SEARCH_CATALOG_TOOL => {
            let arguments: wire::SearchCatalogArguments =
                parse_params(arguments).map_err(|error| invalid(error.0))?;
            let hits = match search_catalog(context, arguments, view).await {
                Ok(hits) => hits,
                Err(error) if error.code == INVALID_PARAMS => {
                    return Ok(wire::CallToolResult::error(format!(
                        "invalid query: {}",
                        error.message
                    )))
                }
                Err(error) => return Err(error),
            };
            let text = if hits.is_empty() {
                "no matches".to_string()
            } else {
                hits.iter()
                    .map(|hit| {
                        let key = hit.uri.as_deref().unwrap_or(&hit.name);
                        let description = hit.description.as_deref().unwrap_or("");
                        format!("{} {}/{}: {description}", hit.kind, hit.server, key)
                    })
                    .collect::<Vec<_>>()
                    .join("\n")
            };
            let structured =
                serde_json::to_value(wire::SearchCatalogResult { hits }).map_err(internal)?;
            Ok(wire::CallToolResult::text(text, structured))
        }
        wire::DESCRIBE_ENTRY_TOOL => {
            let arguments: wire::DescribeEntryArguments =
                parse_params(arguments).map_err(|error| invalid(error.0))?;
            // An entry outside the view is as absent as one no server lists.
            let definition = match view.sees(&arguments.server, arguments.kind) {
                true => describe(&context.store, arguments).await?,
                false => None,
            };
            let Some(definition) = definition else {
                return Ok(wire::CallToolResult::error("no such entry".into()));
            };
            let text = serde_json::to_string_pretty(&definition).map_err(internal)?;
            Ok(wire::CallToolResult::text(text, definition))
        }
        other => Err(invalid(format!(
            "unknown tool {other}: this mirror offers only {} and {}; call other tools on their own servers",
            wire::SEARCH_CATALOG_TOOL,
            wire::DESCRIBE_ENTRY_TOOL
        ))),
    }
}

/// The whole definition of one entry of any kind, with its server in `_meta`.
async fn describe(
    store: &Store,
    arguments: wire::DescribeEntryArguments,
) -> Result<Option<Value>, ErrorObject> {
    match arguments.kind {
        Kind::Tool | Kind::Prompt => {
            let name = arguments
                .name
                .ok_or_else(|| invalid("`name` is required for a tool or prompt"))?;
            let listing = store
                .entry(arguments.kind, &arguments.server, &name)
                .await
                .map_err(internal)?;
            Ok(listing.as_ref().map(with_origin))
        }
        Kind::Resource | Kind::Template => {
            let uri = arguments
                .uri
                .ok_or_else(|| invalid("`uri` is required for a resource"))?;
            let listings = store.listings(&uri).await.map_err(internal)?;
            let listing = listings
                .into_iter()
                .find(|listing| listing.server == arguments.server);
            Ok(listing.map(|listing| {
                let mut value: Value = serde_json::from_str(&listing.raw).unwrap_or(Value::Null);
                attribute(&mut value, &listing.server);
                value
            }))
        }
    }
}

#[cfg(test)]
mod tests {
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
