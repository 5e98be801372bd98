//! The method table: one checked request turned into its params, answered by its handler, and its result.

use serde_json::value::RawValue;
use serde_json::Value;

use super::ConnectionState;
use crate::answer::read::read_resource;
use crate::answer::status::status;
use crate::answer::{internal, invalid_params, on_one_read, on_reader, tools, DaemonContext};
use crate::protocol::{
    self as wire, parse_params, CatalogChanges, CatalogEntries, CatalogList, CatalogRefresh,
    CatalogResource, CatalogSearch, CatalogStatus, CatalogWatch, CheckedRequest, ErrorObject,
    Initialize, ListResources, ListTemplates, Method, Ping, ReadResource, Response, ScopeRule,
    INVALID_PARAMS, METHOD_NOT_FOUND, NOT_PERMITTED, PAGE_SIZE,
};
use crate::redact;

/// Answers one checked request through `dispatch`: the socket and the HTTP face both come
/// here. `None` for notifications, which get no answer.
pub(crate) async fn answer_request(
    request: CheckedRequest,
    context: &DaemonContext,
    state: &mut ConnectionState,
) -> Option<Response> {
    // Notifications (such as notifications/initialized) need no answer.
    let id = request.id?;
    let outcome = answer_method(&request.method, request.params, context, state).await;
    Some(respond(id, outcome))
}

/// One method's result text, or its error: what `answer_request` answers, less the envelope.
pub(crate) async fn answer_method(
    method: &str,
    params: Value,
    context: &DaemonContext,
    state: &mut ConnectionState,
) -> Result<Box<RawValue>, ErrorObject> {
    state.answered_next_cursor = None;
    match params {
        params @ (Value::Null | Value::Object(_)) => {
            // The search gate shares its slots fairly between the clients it knows.
            let client = state.search_client.clone();
            crate::search::gate::CURRENT_CLIENT
                .scope(client, dispatch(method, params, context, state))
                .await
        }
        _ => Err(ErrorObject::new(INVALID_PARAMS, "params must be an object")),
    }
}

/// The answer to request `id`: its result, or its error.
pub(crate) fn respond(id: Value, outcome: Result<Box<RawValue>, ErrorObject>) -> Response {
    match outcome {
        Ok(result) => Response::answered(id, result),
        Err(error) => Response::failure(id, error),
    }
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

/// Answers one method. The client's view (`state.view`, the one rule of `answer::view`) goes
/// to each answer function, which applies it to its typed result before it is serialized, as
/// the method's `ScopeRule` says. The list methods are answered in one read transaction, and
/// `state.answered_generation` is the catalog generation read in it.
// Over 100 lines on purpose: a flat table, one arm per method (params in, its `answer` function,
// the result out); split, it would no longer read as one table.
async fn dispatch(
    method: &str,
    raw: Value,
    context: &DaemonContext,
    state: &mut ConnectionState,
) -> Result<Box<RawValue>, ErrorObject> {
    if crate::protocol::scope_rule(method) == Some(ScopeRule::Local) && !state.local {
        return Err(ErrorObject::new(
            NOT_PERMITTED,
            format!("{method} is answered on the daemon's Unix socket only"),
        ));
    }
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
            let params = params::<ListResources>(raw)?;
            let (generation, page) = on_one_read(context, move |reader| {
                crate::answer::list::resources(reader, &params, PAGE_SIZE, &view)
            })
            .await?;
            state.answered_generation = Some(generation);
            state.answered_next_cursor = page.next_cursor();
            to_text(&page.resources())
        }
        ListTemplates::NAME => {
            let params = params::<ListTemplates>(raw)?;
            let (generation, page) = on_one_read(context, move |reader| {
                crate::answer::list::templates(reader, &params, PAGE_SIZE, &view)
            })
            .await?;
            state.answered_generation = Some(generation);
            state.answered_next_cursor = page.next_cursor();
            to_text(&page.templates())
        }
        ReadResource::NAME => {
            let uri = params::<ReadResource>(raw)?.uri;
            answer::<ReadResource>(read_resource(&uri, context, &view).await?)
        }
        CatalogResource::NAME => {
            let uri = params::<CatalogResource>(raw)?.uri;
            let details = on_reader(context, move |reader| {
                crate::answer::resource::details(reader, &uri, &view)
            })
            .await?;
            answer::<CatalogResource>(details)
        }
        CatalogStatus::NAME => {
            params::<CatalogStatus>(raw)?;
            let mut status = status(context).await?;
            crate::answer::status::restrict(&mut status, &view);
            let mut status = serde_json::to_value(status).map_err(internal)?;
            redact::scrub_json(&mut status);
            // Server-supplied texts are bounded where they are stored; this bounds the rest
            // (a session's live hints), so the answer stays small whatever a server sent.
            redact::bound_json_strings(&mut status);
            to_text(&status)
        }
        CatalogSearch::NAME => {
            let params = params::<CatalogSearch>(raw)?;
            answer::<CatalogSearch>(
                crate::answer::search::catalog_search(context, params, &view).await?,
            )
        }
        CatalogChanges::NAME => {
            let params = params::<CatalogChanges>(raw)?;
            let mut changes = on_reader(context, move |reader| {
                crate::answer::changes::changes(reader, &params, &view)
            })
            .await?;
            changes.instance = Some(context.store.instance().to_string());
            answer::<CatalogChanges>(changes)
        }
        CatalogEntries::NAME => {
            let (kind, keys) = params::<CatalogEntries>(raw)?
                .checked()
                .map_err(invalid_params)?;
            let seeing = view.clone();
            let read = context
                .store
                .read(move |reader| {
                    reader.keyed_entries(kind, &keys, &|server| seeing.sees(server, kind))
                })
                .await
                .map_err(internal)?;
            let instance = context.store.instance();
            match kind {
                wire::Kind::Tool | wire::Kind::Prompt => to_text(
                    &crate::answer::list::keyed_definitions_result(instance, kind, &read, &view)?,
                ),
                wire::Kind::Resource | wire::Kind::Template => to_text(
                    &crate::answer::list::keyed_entries_result(instance, kind, &read, &view),
                ),
            }
        }
        CatalogWatch::NAME => {
            let params = params::<CatalogWatch>(raw)?;
            let started = on_reader(context, move |reader| {
                crate::answer::changes::watch_start(reader, &params)
            })
            .await?;
            state.watching = Some(started.since_seq);
            answer::<CatalogWatch>(started)
        }
        wire::DaemonReload::NAME => {
            params::<wire::DaemonReload>(raw)?;
            answer::<wire::DaemonReload>(crate::answer::reload::reload(context).await?)
        }
        CatalogRefresh::NAME => {
            let params = params::<CatalogRefresh>(raw)?;
            answer::<CatalogRefresh>(crate::answer::refresh::refresh(params, context).await?)
        }
        wire::CatalogTools::NAME => {
            let params = params::<wire::CatalogTools>(raw)?;
            let (generation, tools) = on_one_read(context, move |reader| {
                crate::answer::entries::tools(reader, &params, PAGE_SIZE, &view)
            })
            .await?;
            state.answered_generation = Some(generation);
            state.answered_next_cursor = tools.next_cursor.clone();
            answer::<wire::CatalogTools>(tools)
        }
        wire::CatalogPrompts::NAME => {
            let params = params::<wire::CatalogPrompts>(raw)?;
            let (generation, prompts) = on_one_read(context, move |reader| {
                crate::answer::entries::prompts(reader, &params, PAGE_SIZE, &view)
            })
            .await?;
            state.answered_generation = Some(generation);
            state.answered_next_cursor = prompts.next_cursor.clone();
            answer::<wire::CatalogPrompts>(prompts)
        }
        wire::CatalogTool::NAME => {
            let params = params::<wire::CatalogTool>(raw)?;
            let details = on_reader(context, move |reader| {
                crate::answer::entries::details(reader, wire::Kind::Tool, &params, &view)
            })
            .await?;
            answer::<wire::CatalogTool>(details)
        }
        wire::CatalogPrompt::NAME => {
            let params = params::<wire::CatalogPrompt>(raw)?;
            let details = on_reader(context, move |reader| {
                crate::answer::entries::details(reader, wire::Kind::Prompt, &params, &view)
            })
            .await?;
            answer::<wire::CatalogPrompt>(details)
        }
        wire::CatalogAccept::NAME => {
            let params = params::<wire::CatalogAccept>(raw)?;
            answer::<wire::CatalogAccept>(tools::accept(&context.store, params).await?)
        }
        wire::CatalogDrift::NAME => {
            let params = params::<wire::CatalogDrift>(raw)?;
            let drift = on_reader(context, move |reader| {
                crate::answer::entries::drift(reader, &params, &view)
            })
            .await?;
            answer::<wire::CatalogDrift>(drift)
        }
        wire::CatalogHistory::NAME => {
            let params = params::<wire::CatalogHistory>(raw)?;
            let history = on_reader(context, move |reader| {
                crate::answer::history::history(reader, &params, &view)
            })
            .await?;
            answer::<wire::CatalogHistory>(history)
        }
        wire::CatalogDiff::NAME => {
            let params = params::<wire::CatalogDiff>(raw)?;
            let diff = on_reader(context, move |reader| {
                crate::answer::history::diff(reader, &params, &view)
            })
            .await?;
            answer::<wire::CatalogDiff>(diff)
        }
        wire::ListTools::NAME => {
            params::<wire::ListTools>(raw)?;
            answer::<wire::ListTools>(wire::ListToolsResult {
                tools: wire::mirror_tools(),
                next_cursor: None,
            })
        }
        wire::CallTool::NAME => {
            let params = params::<wire::CallTool>(raw)?;
            answer::<wire::CallTool>(tools::call_tool(context, params, &view).await?)
        }
        CatalogList::NAME => {
            let params = params::<CatalogList>(raw)?;
            let (generation, list) = on_one_read(context, move |reader| {
                crate::answer::list::server_list(reader, &params, &view)
            })
            .await?;
            state.answered_generation = Some(generation);
            state.answered_next_cursor = list.next_cursor.clone();
            answer::<CatalogList>(list)
        }
        _ => Err(ErrorObject::new(
            METHOD_NOT_FOUND,
            format!("method not found: {method}"),
        )),
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
