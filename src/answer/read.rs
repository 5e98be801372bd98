//! Reads routed to a server: `resources/read` (the winning server, else the first matching template's; the cache fallback).

use super::{internal, DaemonContext, View};
use crate::answer::resource::not_listed;
use crate::protocol::{
    CacheNote, CacheScope, ErrorData, ErrorObject, Kind, ReadResourceResult, INTERNAL_ERROR,
};
use crate::redact;
use crate::session::ReadError;

/// Reads through the server that wins `uri` in the merged catalog; when that server cannot
/// be reached and its content cache has the URI, serves the cached contents instead.
pub async fn read_resource(
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
            if CacheScope::of_hint(answer.get("cacheScope")) == CacheScope::Private
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
                let (server_name, uri_text) = (server.to_string(), uri.to_string());
                let cached = context
                    .store
                    .read(move |reader| reader.cached_contents(&server_name, &uri_text))
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
    let target = {
        let uri = uri.to_string();
        context
            .store
            .read(move |reader| {
                if let Some(target) = reader.read_target(&uri)? {
                    return Ok(Some(Target {
                        server: target.server,
                        read_cache_bytes: target.read_cache_bytes,
                        kinds: &[Kind::Resource],
                    }));
                }
                Ok(reader.template_target(&uri)?.map(|template| Target {
                    server: template.server,
                    read_cache_bytes: template.read_cache_bytes,
                    // Reached through a template, the read is of a resource too.
                    kinds: &[Kind::Template, Kind::Resource],
                }))
            })
            .await
            .map_err(internal)?
    };
    target.ok_or_else(|| not_listed(uri))
}

/// Where a read goes, and the kinds of entry that lead there (all of which the view must see).
struct Target {
    server: String,
    read_cache_bytes: Option<u64>,
    kinds: &'static [Kind],
}
