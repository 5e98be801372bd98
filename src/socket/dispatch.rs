//! The method table: one checked request turned into its params, answered by its handler, and its result.

use serde_json::value::RawValue;
use serde_json::Value;

use super::reads::{read_resource, server_list};
use super::search::{gated_search, resource_search};
use super::shape::{
    changes_result, keyed_entries_result, resource_details, resources_page, search_result,
    templates_page,
};
use super::{internal, invalid_params, not_listed, status, ConnectionState, DaemonContext};
use crate::protocol::{
    self as wire, encode_index_cursor, parse_params, CatalogChanges, CatalogEntries, CatalogList,
    CatalogRefresh, CatalogResource, CatalogSearch, CatalogStatus, CatalogWatch, CheckedRequest,
    ErrorData, ErrorObject, Initialize, Kind, ListResources, ListTemplates, Method, Ping,
    ReadResource, Response, INVALID_PARAMS, METHOD_NOT_FOUND, PAGE_SIZE,
};
use crate::redact;
use crate::socket::kinds;
use crate::store;
use crate::supervisor::RefreshOutcome;

/// Answers one checked request through `dispatch`: the socket and the HTTP face both come
/// here. `None` for notifications, which get no answer.
pub(crate) async fn answer_request(
    request: CheckedRequest,
    context: &DaemonContext,
    state: &mut ConnectionState,
) -> Option<Response> {
    // Notifications (such as notifications/initialized) need no answer.
    let id = request.id?;
    let outcome = match request.params {
        params @ (Value::Null | Value::Object(_)) => {
            // The search gate shares its slots fairly between the clients it knows.
            let client = state.search_client.clone();
            crate::search::gate::CURRENT_CLIENT
                .scope(client, dispatch(&request.method, params, context, state))
                .await
        }
        _ => Err(ErrorObject::new(INVALID_PARAMS, "params must be an object")),
    };
    Some(match outcome {
        Ok(result) => Response::answered(id, result),
        Err(error) => Response::failure(id, error),
    })
}

/// `M`'s params, or `-32602` naming the field that does not fit.
fn params<M: Method>(params: Value) -> Result<M::Params, ErrorObject> {
    parse_params(params).map_err(invalid_params)
}

/// `M`'s result as the JSON text the answer carries.
fn answer<M: Method>(result: M::Result) -> Result<Box<RawValue>, ErrorObject> {
    to_text(&result)
}

/// A result serialized once, straight to text.
fn to_text(result: &impl serde::Serialize) -> Result<Box<RawValue>, ErrorObject> {
    serde_json::value::to_raw_value(result).map_err(internal)
}

/// Answers one method. Each arm applies the client's view (`state.view`, the one rule of
/// `view.rs`) to its typed result before it is serialized, as the method's `ScopeRule` says.
async fn dispatch(
    method: &str,
    raw: Value,
    context: &DaemonContext,
    state: &mut ConnectionState,
) -> Result<Box<RawValue>, ErrorObject> {
    let view = state.view.clone();
    view.admits(method)?;
    match method {
        Initialize::NAME => {
            let params = params::<Initialize>(raw)?;
            state.mcp_client = true;
            answer::<Initialize>(initialize(params))
        }
        Ping::NAME => {
            params::<Ping>(raw)?;
            answer::<Ping>(wire::Empty {})
        }
        ListResources::NAME => {
            let after = params::<ListResources>(raw)?
                .after()
                .map_err(invalid_params)?;
            let (rows, more) = context
                .store
                .list_resources(after, PAGE_SIZE)
                .await
                .map_err(internal)?;
            // The cursor follows the page read, whatever the view leaves of it.
            let mut page = resources_page(&rows, more);
            page.resources
                .retain(|entry| seen_origin(&view, entry.origin, Kind::Resource));
            to_text(&page)
        }
        ListTemplates::NAME => {
            let after = params::<ListTemplates>(raw)?
                .after()
                .map_err(invalid_params)?;
            let (rows, more) = context
                .store
                .list_templates(after, PAGE_SIZE)
                .await
                .map_err(internal)?;
            let mut page = templates_page(&rows, more);
            page.resource_templates
                .retain(|entry| seen_origin(&view, entry.origin, Kind::Template));
            to_text(&page)
        }
        ReadResource::NAME => {
            let uri = params::<ReadResource>(raw)?.uri;
            answer::<ReadResource>(read_resource(&uri, context, &view).await?)
        }
        CatalogResource::NAME => {
            let uri = params::<CatalogResource>(raw)?.uri;
            let mut listings = context.store.listings(&uri).await.map_err(internal)?;
            listings.retain(|listing| view.sees(&listing.server, Kind::Resource));
            let details = resource_details(listings).map_err(internal)?;
            answer::<CatalogResource>(details.ok_or_else(|| not_listed(&uri))?)
        }
        CatalogStatus::NAME => {
            params::<CatalogStatus>(raw)?;
            let mut status = status(context).await?;
            status
                .servers
                .retain(|server| view.sees_server(&server.name));
            let mut status = serde_json::to_value(status).map_err(internal)?;
            redact::scrub_json(&mut status);
            // Server-supplied texts are bounded where they are stored; this bounds the rest
            // (a session's live hints), so the answer stays small whatever a server sent.
            redact::bound_json_strings(&mut status);
            to_text(&status)
        }
        CatalogSearch::NAME => {
            let params = params::<CatalogSearch>(raw)?;
            // Every answer counts, refusals and timeouts too: they are latency a client saw.
            let started = std::time::Instant::now();
            if params.searches_entries() {
                let search = params.into_kinds_request().map_err(invalid_params)?;
                let outcome = kinds::search_kinds(search, context).await;
                crate::metrics::observe_search(started.elapsed());
                let mut result = outcome?;
                result
                    .results
                    .retain(|hit| view.sees(&hit.server, hit.kind));
                return answer::<CatalogSearch>(result);
            }
            let index_cursor = params.cursor.as_deref().map(wire::is_index_cursor);
            let request = params.into_request().map_err(invalid_params)?;
            // A cursor stays with the engine that made it: the two rank differently.
            let outcome = if index_cursor == Some(false) {
                gated_search(request, context).await.map(|page| {
                    let origin = wire::SearchResult {
                        note: page.note,
                        ..search_result(Vec::new(), None)
                    };
                    (page.hits, page.next, Some(origin))
                })
            } else {
                resource_search(request, context)
                    .await
                    .map(|(hits, next, origin)| (hits, next, Some(origin)))
            };
            crate::metrics::observe_search(started.elapsed());
            let (hits, next, origin) = outcome?;
            let mut result = search_result(hits, next);
            result
                .results
                .retain(|hit| view.sees(&hit.server, hit.kind));
            if let Some(origin) = origin {
                if origin.engine == Some(wire::SearchEngine::Index) {
                    result.next_cursor = next.map(encode_index_cursor);
                }
                result.engine = origin.engine;
                result.match_mode = origin.match_mode;
                result.note = origin.note;
            }
            answer::<CatalogSearch>(result)
        }
        CatalogChanges::NAME => {
            let params = params::<CatalogChanges>(raw)?;
            let (since, limit) = params.checked().map_err(invalid_params)?;
            let page = match params.kinds {
                Some(kinds) => context.store.changes_of_kinds(since, limit, kinds).await,
                None => context.store.changes_since(since, limit).await,
            }
            .map_err(internal)?;
            let mut result = changes_result(page);
            result
                .changes
                .retain(|change| view.sees(&change.server, change.entry_kind));
            result.instance = Some(context.store.instance().to_string());
            answer::<CatalogChanges>(result)
        }
        CatalogEntries::NAME => {
            let (kind, keys) = params::<CatalogEntries>(raw)?
                .checked()
                .map_err(invalid_params)?;
            let read = context
                .store
                .keyed_entries(kind, keys)
                .await
                .map_err(internal)?;
            let mut result = keyed_entries_result(context.store.instance(), &read);
            if !view.is_owner() {
                // What the view may not see is reported as no server listing it, and a count
                // of the whole catalog cannot be checked against a part.
                let (shown, withheld): (Vec<_>, Vec<_>) = std::mem::take(&mut result.entries)
                    .into_iter()
                    .zip(&read.found)
                    .partition(|(_, row)| view.sees(&row.server, kind));
                result.entries = shown.into_iter().map(|(entry, _)| entry).collect();
                result
                    .missing
                    .extend(withheld.into_iter().map(|(_, row)| row.key.clone()));
                result.total = None;
            }
            to_text(&result)
        }
        CatalogWatch::NAME => {
            let since = params::<CatalogWatch>(raw)?
                .checked_since()
                .map_err(invalid_params)?;
            let latest_seq = context.store.latest_change_seq().await.map_err(internal)?;
            state.watching = Some(since.unwrap_or(latest_seq));
            answer::<CatalogWatch>(wire::WatchResult { latest_seq })
        }
        CatalogRefresh::NAME => {
            let params = params::<CatalogRefresh>(raw)?;
            answer::<CatalogRefresh>(refresh(params, context).await?)
        }
        wire::CatalogTools::NAME => {
            let params = params::<wire::CatalogTools>(raw)?;
            let (tools, next_cursor) =
                kinds::entries_page(&context.store, wire::Kind::Tool, params, &view).await?;
            answer::<wire::CatalogTools>(wire::ListToolsResult { tools, next_cursor })
        }
        wire::CatalogPrompts::NAME => {
            let params = params::<wire::CatalogPrompts>(raw)?;
            let (prompts, next_cursor) =
                kinds::entries_page(&context.store, wire::Kind::Prompt, params, &view).await?;
            answer::<wire::CatalogPrompts>(wire::ListPromptsResult {
                prompts,
                next_cursor,
            })
        }
        wire::CatalogTool::NAME => {
            let params = params::<wire::CatalogTool>(raw)?;
            answer::<wire::CatalogTool>(
                kinds::entry_details(&context.store, wire::Kind::Tool, params, &view).await?,
            )
        }
        wire::CatalogPrompt::NAME => {
            let params = params::<wire::CatalogPrompt>(raw)?;
            answer::<wire::CatalogPrompt>(
                kinds::entry_details(&context.store, wire::Kind::Prompt, params, &view).await?,
            )
        }
        wire::CatalogAccept::NAME => {
            let params = params::<wire::CatalogAccept>(raw)?;
            answer::<wire::CatalogAccept>(kinds::accept(&context.store, params).await?)
        }
        wire::CatalogDrift::NAME => {
            let params = params::<wire::CatalogDrift>(raw)?;
            let mut result = kinds::drift(&context.store, params).await?;
            result
                .drift
                .retain(|entry| view.sees(&entry.server, entry.kind));
            answer::<wire::CatalogDrift>(result)
        }
        wire::ListTools::NAME => {
            params::<wire::ListTools>(raw)?;
            answer::<wire::ListTools>(wire::ListMirrorToolsResult {
                tools: wire::mirror_tools(),
            })
        }
        wire::CallTool::NAME => {
            let params = params::<wire::CallTool>(raw)?;
            answer::<wire::CallTool>(kinds::call_tool(context, params, &view).await?)
        }
        CatalogList::NAME => {
            let params = params::<CatalogList>(raw)?;
            answer::<CatalogList>(server_list(params, context, &view).await?)
        }
        _ => Err(ErrorObject::new(
            METHOD_NOT_FOUND,
            format!("method not found: {method}"),
        )),
    }
}

/// A listed entry passes the view by its origin server; one without an origin (none is
/// stored so) passes only the owner's.
fn seen_origin(view: &super::View, origin: Option<&str>, kind: Kind) -> bool {
    match origin {
        Some(server) => view.sees(server, kind),
        None => view.is_owner(),
    }
}

fn initialize(params: wire::InitializeParams) -> wire::InitializeResult {
    let version = params
        .protocol_version
        .filter(|version| wire::LEGACY_VERSIONS.contains(&version.as_str()))
        .unwrap_or_else(|| wire::PROTOCOL_VERSION.to_string());
    wire::InitializeResult {
        protocol_version: version,
        capabilities: wire::ServerCapabilities::of_the_mirror(),
        server_info: wire::Implementation {
            name: wire::SERVER_NAME.into(),
            version: env!("CARGO_PKG_VERSION").into(),
            instance: wire::mirror_id().map(str::to_string),
        },
        instructions: wire::INSTRUCTIONS.into(),
    }
}

async fn refresh(
    params: wire::RefreshParams,
    context: &DaemonContext,
) -> Result<wire::RefreshResult, ErrorObject> {
    let server = params.server.as_deref();
    let outcomes = context
        .supervisor
        .refresh(server, params.wait.unwrap_or(false))
        .await
        .ok_or_else(|| {
            let name = server.unwrap_or("");
            ErrorObject::new(INVALID_PARAMS, format!("no server named {name}")).with_data(
                ErrorData {
                    not_found: Some("server".into()),
                    server: Some(name.into()),
                    ..ErrorData::default()
                },
            )
        })?;
    let servers = outcomes
        .into_iter()
        .map(|(name, outcome)| {
            let outcome = match outcome {
                RefreshOutcome::Queued => wire::RefreshOutcome::queued(),
                RefreshOutcome::Walked(Ok(summary)) => wire::RefreshOutcome::settled(
                    refresh_state(summary.state),
                    swap_summary(summary.swap),
                    summary.report.pages,
                    summary.report.duration_ms,
                ),
                // A server's words, bounded (secrets go at the answer's choke point).
                RefreshOutcome::Walked(Err(error)) => {
                    wire::RefreshOutcome::failed(redact::truncate_server_text(&error).into_owned())
                }
            };
            (name, outcome)
        })
        .collect();
    Ok(wire::RefreshResult { servers })
}

fn refresh_state(state: crate::session::SettledState) -> wire::RefreshState {
    match state {
        crate::session::SettledState::Synced => wire::RefreshState::Synced,
        crate::session::SettledState::NoResources => wire::RefreshState::NoResources,
    }
}

fn swap_summary(swap: store::SwapOutcome) -> wire::SwapSummary {
    wire::SwapSummary {
        added: swap.added,
        removed: swap.removed,
        changed: swap.changed,
        resources: swap.resources,
        templates: swap.templates,
    }
}
