//! `catalog/accept`, `catalog/search` of several kinds, and the MCP face's own tools, `search_catalog` and `describe_entry`.

use serde_json::Value;

use crate::answer::entries::with_origin;
use crate::protocol::{self as wire, parse_params, ErrorObject, Kind, INVALID_PARAMS};
use crate::socket::DaemonContext;
use crate::store::{EntryHit, Store, StoreError};

use crate::answer::{internal, invalid};

pub async fn accept(
    store: &Store,
    params: wire::ServerParams,
) -> Result<wire::AcceptResult, ErrorObject> {
    let accepted = store
        .accept(params.server)
        .await
        .map_err(|error| match error {
            StoreError::Walk(message) => invalid(message),
            other => internal(other),
        })?;
    Ok(wire::AcceptResult { accepted })
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
pub async fn search_catalog(
    context: &DaemonContext,
    arguments: wire::SearchCatalogArguments,
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
        ..wire::SearchParams::default()
    };
    let search = params
        .into_kinds_request()
        .map_err(|error| invalid(error.0))?;
    let result = search_kinds(search, context).await?;
    Ok(result
        .results
        .into_iter()
        .map(|hit| wire::CatalogHit {
            kind: hit.kind,
            server: hit.server,
            name: hit.name,
            uri: hit.uri,
            title: hit.title,
            description: one_line(hit.description),
            score: hit.score,
        })
        .collect())
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
        match crate::socket::search_index(index, context, &search.index).await? {
            Ok(answer) => {
                let mut result = crate::answer::search::search_result(answer.hits, None);
                result.next_cursor = answer.next.map(wire::encode_index_cursor);
                result.engine = Some(wire::SearchEngine::Index);
                result.match_mode = Some(answer.mode);
                return Ok(result);
            }
            Err(why) => note = Some(why),
        }
    }
    let mut result = sqlite_kinds_search(search, context).await?;
    result.note = note;
    Ok(result)
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
    let mut result = crate::answer::search::merge_search_pages(resources, entries, offsets, limit);
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
        .read(move |reader| reader.search_entries(&search))
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

/// `tools/call` of the MCP face: the mirror's own two tools; any other name is an error.
pub async fn call_tool(
    context: &DaemonContext,
    params: wire::CallToolParams,
) -> Result<wire::CallToolResult, ErrorObject> {
    let arguments = match params.arguments {
        Value::Null => Value::Object(Default::default()),
        other => other,
    };
    match params.name.as_str() {
        wire::SEARCH_CATALOG_TOOL => {
            let arguments: wire::SearchCatalogArguments =
                parse_params(arguments).map_err(|error| invalid(error.0))?;
            let hits = match search_catalog(context, arguments).await {
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
            let definition = describe(&context.store, arguments).await?;
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
            let server = arguments.server;
            let kind = arguments.kind;
            let listing = store
                .read(move |reader| reader.entry(kind, &server, &name))
                .await
                .map_err(internal)?;
            Ok(listing.map(|listing| with_origin(&listing.raw, &listing.server)))
        }
        Kind::Resource | Kind::Template => {
            let uri = arguments
                .uri
                .ok_or_else(|| invalid("`uri` is required for a resource"))?;
            let listings = store
                .read(move |reader| reader.listings(&uri))
                .await
                .map_err(internal)?;
            let listing = listings
                .into_iter()
                .find(|listing| listing.server == arguments.server);
            Ok(listing.map(|listing| with_origin(&listing.raw, &listing.server)))
        }
    }
}
