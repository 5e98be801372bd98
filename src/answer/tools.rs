//! `catalog/accept`, and the MCP face's own tools: `search_catalog` (through `catalog/search`'s path) and `describe_entry`.

use serde_json::Value;

use crate::answer::entries::{served_entry, with_origin};
use crate::answer::{internal, invalid, DaemonContext, View};
use crate::protocol::{self as wire, parse_params, ErrorObject, Kind, INVALID_PARAMS};
use crate::store::{Store, StoreError};

pub async fn accept(
    store: &Store,
    params: wire::ServerParams,
) -> Result<wire::AcceptResult, ErrorObject> {
    let server = params.server.clone();
    store
        .read(move |reader| {
            Ok(crate::answer::entries::known_server(
                reader,
                server.as_deref(),
            ))
        })
        .await
        .map_err(internal)??;
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
/// (every kind when absent), best first; what the view sees only.
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
        uri_flags: arguments.uri_flags,
        ..wire::SearchParams::default()
    };
    // The one door of every search: counted in the histogram, filtered to the view there.
    let result = crate::answer::search::catalog_search(context, params, view).await?;
    let mut hits = Vec::with_capacity(result.results.len());
    for hit in result.results {
        // A tool's definition as its server listed it: what a host registers natively.
        let definition = match (arguments.definitions, hit.kind) {
            (Some(true), Kind::Tool | Kind::Prompt) => {
                let (kind, server, name) = (hit.kind, hit.server.clone(), hit.name.clone());
                context
                    .store
                    .read(move |reader| reader.entry(kind, &server, &name))
                    .await
                    .map_err(internal)?
                    .map(|listing| served_entry(&listing.raw, &listing.server, &listing.name))
            }
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
            let server = arguments.server;
            let kind = arguments.kind;
            let listing = store
                .read(move |reader| reader.entry(kind, &server, &name))
                .await
                .map_err(internal)?;
            Ok(listing.map(|listing| served_entry(&listing.raw, &listing.server, &listing.name)))
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
