//! Reads routed to a server: `resources/read` (the winning server, else the first matching template's; the cache fallback) and `catalog/list`.

use super::shape::server_list_result;
use super::{internal, invalid_params, DaemonContext, View};
use crate::protocol::{
    self as wire, CacheNote, CacheScope, ErrorData, ErrorObject, Kind, ReadResourceResult,
    INTERNAL_ERROR, INVALID_PARAMS, RESOURCE_NOT_FOUND,
};
use crate::redact;
use crate::session::ReadError;

pub(crate) fn not_listed(uri: &str) -> ErrorObject {
    ErrorObject::new(
        RESOURCE_NOT_FOUND,
        format!("resource not found: no mirrored server lists {uri}"),
    )
    .with_data(ErrorData {
        uri: Some(uri.into()),
        ..ErrorData::default()
    })
}

/// Reads through the server that wins `uri` in the merged catalog; when that server cannot
/// be reached and its content cache has the URI, serves the cached contents instead.
pub(super) async fn read_resource(
    uri: &str,
    context: &DaemonContext,
    view: &View,
) -> Result<ReadResourceResult, ErrorObject> {
    let target = read_target_or_template(uri, context).await?;
    let server = target.server.as_str();
    // The view is checked before the server is asked: a read it may not see goes nowhere.
    if !target.kinds.iter().all(|kind| view.sees(server, *kind)) {
        return Err(not_listed(uri));
    }
    match context.supervisor.read(server, uri).await {
        Ok(mut answer) => {
            // As listed entries: a server's contents never carry our secrets onward.
            redact::scrub_json(&mut answer);
            // A read result has its own `cacheScope` (2026-07-28): a private one is the
            // server's answer to us alone.
            let declared = answer
                .get("cacheScope")
                .map(|scope| scope.as_str().unwrap_or(""));
            if declared.is_some()
                && CacheScope::of_page(declared) == CacheScope::Private
                && !view.sees_private_reads_of(server)
            {
                return Err(not_listed(uri));
            }
            let mut result: ReadResourceResult =
                serde_json::from_value(answer).map_err(|error| {
                    internal(format!(
                        "server {server} answered resources/read with an invalid result: {error}"
                    ))
                })?;
            if let Some(limit) = target.read_cache_bytes {
                let text = serde_json::to_string(&result).map_err(internal)?;
                context.store.cache_contents(server, uri, text, limit);
            }
            result.meta.origin = Some(server.to_string());
            Ok(result)
        }
        Err(error) => {
            let unreachable = matches!(error, ReadError::Offline { .. } | ReadError::Failed { .. });
            // The cache does not record each result's own scope: a token client gets cached
            // contents only of a server whose private results it may see (`share = true`).
            if unreachable
                && target.read_cache_bytes.is_some()
                && view.sees_private_reads_of(server)
            {
                let cached = context
                    .store
                    .cached_contents(server, uri)
                    .await
                    .map_err(internal)?;
                // An entry that no longer parses is as good as none.
                let cached = cached.and_then(|(text, stored_at_ms)| {
                    let result = serde_json::from_str::<ReadResourceResult>(&text).ok()?;
                    Some((result, stored_at_ms))
                });
                if let Some((mut result, stored_at_ms)) = cached {
                    result.meta.origin = Some(server.to_string());
                    result.meta.cache = Some(CacheNote {
                        stored_at_ms,
                        reason: redact::scrub_server_text(&error.to_string()),
                    });
                    return Ok(result);
                }
            }
            // The server's own answer, such as its "resource not found", passes through.
            let code = match error {
                ReadError::Server { code, .. } => code,
                ReadError::Offline { .. } | ReadError::Failed { .. } => INTERNAL_ERROR,
            };
            Err(
                ErrorObject::new(code, redact::scrub_server_text(&error.to_string())).with_data(
                    ErrorData {
                        server: Some(server.into()),
                        uri: Some(uri.into()),
                        offline: Some(unreachable),
                        ..ErrorData::default()
                    },
                ),
            )
        }
    }
}

/// The server a read of `uri` goes to: the one that wins the URI in the merged catalog, else
/// (a URI no server lists) the one whose mirrored template matches it, by the same priority.
async fn read_target_or_template(
    uri: &str,
    context: &DaemonContext,
) -> Result<Target, ErrorObject> {
    if let Some(target) = context.store.read_target(uri).await.map_err(internal)? {
        return Ok(Target {
            server: target.server,
            read_cache_bytes: target.read_cache_bytes,
            kinds: &[Kind::Resource],
        });
    }
    let template = context
        .store
        .template_target(uri)
        .await
        .map_err(internal)?
        .ok_or_else(|| not_listed(uri))?;
    Ok(Target {
        server: template.server,
        read_cache_bytes: template.read_cache_bytes,
        // Reached through a template, the read is of a resource too.
        kinds: &[Kind::Template, Kind::Resource],
    })
}

/// Where a read goes, and the kinds of entry that lead there (all of which the view must see).
struct Target {
    server: String,
    read_cache_bytes: Option<u64>,
    kinds: &'static [Kind],
}

/// The "no server named" error, as `catalog/refresh` and `catalog/list` answer it.
fn no_such_server(name: &str) -> ErrorObject {
    ErrorObject::new(INVALID_PARAMS, format!("no server named {name}")).with_data(ErrorData {
        not_found: Some("server".into()),
        server: Some(name.into()),
        ..ErrorData::default()
    })
}

pub(super) async fn server_list(
    params: wire::ServerListParams,
    context: &DaemonContext,
    view: &View,
) -> Result<wire::ServerListResult, ErrorObject> {
    let (after, limit) = params.checked().map_err(invalid_params)?;
    // A server outside the view is as unknown as one never configured.
    if !view.sees(&params.server, Kind::Resource)
        || !context
            .store
            .server_exists(&params.server)
            .await
            .map_err(internal)?
    {
        return Err(no_such_server(&params.server));
    }
    let (rows, more) = context
        .store
        .server_snapshot(&params.server, after, limit)
        .await
        .map_err(internal)?;
    let mut result = server_list_result(params.server, rows, more).map_err(internal)?;
    for entry in &mut result.resources {
        // The winner's name is another server's: only when the view sees it.
        if entry
            .won_by
            .as_deref()
            .is_some_and(|winner| !view.sees(winner, Kind::Resource))
        {
            entry.won_by = None;
        }
    }
    Ok(result)
}
