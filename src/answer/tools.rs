//! `catalog/accept`, and the MCP face's own tools: `search_catalog` (through `catalog/search`'s path), `describe_entry` and `tool_changes` (through `catalog/history` and `catalog/diff`).

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
        wire::TOOL_CHANGES_TOOL => {
            let arguments: wire::ToolChangesArguments =
                parse_params(arguments).map_err(|error| invalid(error.0))?;
            tool_changes(context, arguments, view).await
        }
        other => Err(invalid(format!(
            "unknown tool {other}: this mirror offers only {}, {} and {}; call other tools on their own servers",
            wire::SEARCH_CATALOG_TOOL,
            wire::DESCRIBE_ENTRY_TOOL,
            wire::TOOL_CHANGES_TOOL
        ))),
    }
}

/// `tool_changes`: the tool's versions and its last change (or every change since `since`), as
/// text and structured; a wrong `since` or a tool without history is the tool's error, which
/// the agent reads.
async fn tool_changes(
    context: &DaemonContext,
    arguments: wire::ToolChangesArguments,
    view: &View,
) -> Result<wire::CallToolResult, ErrorObject> {
    let since_ms = match arguments.since.as_deref() {
        None => None,
        Some(since) => match wire::feed_time(since, crate::store::now_ms()) {
            Ok(at_ms) => Some(at_ms),
            Err(error) => return Ok(wire::CallToolResult::error(error.0)),
        },
    };
    let view = view.clone();
    let answer = context
        .store
        .read(move |reader| {
            Ok(crate::answer::history::changes_of_tool(
                reader, &arguments, since_ms, &view,
            ))
        })
        .await
        .map_err(internal)?;
    let result = match answer {
        Ok(result) => result,
        // As describe_entry's "no such entry": the names asked are not echoed, so an answer
        // outside the view says nothing a client did not know.
        Err(error) if error.code == wire::RESOURCE_NOT_FOUND => {
            return Ok(wire::CallToolResult::error(
                "no history of such a tool (none is mirrored here, or it is outside your view)"
                    .into(),
            ))
        }
        Err(error) => return Err(error),
    };
    let text = tool_changes_text(&result, since_ms.is_some());
    let structured = serde_json::to_value(&result).map_err(internal)?;
    Ok(wire::CallToolResult::text(text, structured))
}

/// A time for an agent to read: RFC 3339 in UTC.
fn rfc3339(at_ms: i64) -> String {
    jiff::Timestamp::from_millisecond(at_ms)
        .map(|at| at.to_string())
        .unwrap_or_else(|_| format!("{at_ms} ms"))
}

/// `tool_changes` in words: the versions, then what changed.
fn tool_changes_text(result: &wire::ToolChangesResult, asked_since: bool) -> String {
    let mut lines = vec![format!(
        "tool {}/{}: {} version(s) listed, newest first",
        result.server,
        result.name,
        result.versions.len()
    )];
    for version in &result.versions {
        let until = match version.last_seen_ms {
            None => "current".to_string(),
            Some(at) => format!("until {}", rfc3339(at)),
        };
        lines.push(format!(
            "version {}: first seen {}, {until}",
            version.version,
            rfc3339(version.first_seen_ms)
        ));
    }
    let Some(diff) = &result.diff else {
        lines.push(match asked_since {
            true => "no change since then".to_string(),
            false => "no change kept: one version".to_string(),
        });
        return lines.join("\n");
    };
    lines.push(format!(
        "changes from version {} to version {}:",
        diff.from.version, diff.to.version
    ));
    let paths = &diff.structural;
    lines.extend(
        paths
            .tool_changes
            .iter()
            .map(|change| format!("* {}", change.sentence())),
    );
    lines.extend(paths.removed.iter().map(|path| format!("- {}", path.path)));
    lines.extend(paths.added.iter().map(|path| format!("+ {}", path.path)));
    lines.extend(paths.changed.iter().map(|path| format!("~ {}", path.path)));
    lines.join("\n")
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
