//! The 2026-07-28 era of `/mcp`: a request's headers checked against its body, no session;
//! `server/discover`, `subscriptions/listen`, and results with their caching hints.

use std::sync::Arc;

use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::Value;

use super::handlers::{
    answer, deliver, error_answer, header_text, message_text, Asked, Audience, CachingHints,
    Validator, LISTEN, METHOD_HEADER, NAME_HEADER, VERSION_HEADER,
};
use crate::answer::View;
use crate::http_face::access::Client;
use crate::http_face::stream::{self, StreamPlan};
use crate::http_face::HttpFace;
use crate::protocol::{
    self as wire, CacheScope, CatalogChanges, CatalogEntries, CatalogPrompts, CatalogTools,
    CheckedRequest, DiscoverResult, ListResources, ListTemplates, Method, ReadResource,
    UnsupportedVersionData, DISCOVER, HEADER_MISMATCH, UNSUPPORTED_PROTOCOL_VERSION,
};

/// A 2026-07-28 request: headers checked against the body, no session.
pub(super) async fn modern_request(
    face: &Arc<HttpFace>,
    asked: &Asked<'_>,
    request: CheckedRequest,
    version: &str,
) -> Response {
    let (client, headers, audience) = (asked.client, asked.headers, asked.audience);
    let id = request.id.clone().unwrap_or(Value::Null);
    if !wire::MODERN_VERSIONS.contains(&version) {
        return error_answer(
            headers,
            StatusCode::BAD_REQUEST,
            &id,
            UNSUPPORTED_PROTOCOL_VERSION,
            "Unsupported protocol version",
            serde_json::to_value(UnsupportedVersionData {
                supported: wire::supported_versions(),
                requested: Some(version.to_string()),
            })
            .ok(),
        );
    }
    let expected_name = match request.method.as_str() {
        "resources/read" => request.params.get("uri"),
        "tools/call" | "prompts/get" => request.params.get("name"),
        _ => None,
    }
    .and_then(Value::as_str);
    let checks = [
        (VERSION_HEADER, "MCP-Protocol-Version", Some(version)),
        (METHOD_HEADER, "Mcp-Method", Some(request.method.as_str())),
        (NAME_HEADER, "Mcp-Name", expected_name),
    ];
    for (name, shown, expected) in checks {
        let (Some(sent), Some(expected)) = (header_text(headers, name), expected) else {
            continue;
        };
        if sent != expected {
            let message = format!(
                "Header mismatch: {shown} header value '{sent}' does not match body value '{expected}'"
            );
            return error_answer(
                headers,
                StatusCode::BAD_REQUEST,
                &id,
                HEADER_MISMATCH,
                &message,
                None,
            );
        }
    }
    let Some(request_id) = request.id.clone() else {
        return StatusCode::ACCEPTED.into_response();
    };
    match request.method.as_str() {
        DISCOVER => deliver(
            headers,
            StatusCode::OK,
            &wire::Response::answered(request_id, modern_result(discover(), audience, true)),
        ),
        LISTEN => listen(
            face,
            client,
            headers,
            request_id,
            &request.params,
            audience.view.clone(),
        ),
        _ => {
            // The feed and the keyed read carry the hints too: a follower derives its
            // snapshot's scope from them as a walk does from the list pages.
            let caching = matches!(
                request.method.as_str(),
                ListResources::NAME
                    | ListTemplates::NAME
                    | ReadResource::NAME
                    | CatalogChanges::NAME
                    | CatalogEntries::NAME
                    | CatalogTools::NAME
                    | CatalogPrompts::NAME
            );
            let answered = answer(face, client, audience, request).await;
            let response = match answered.outcome {
                Some(Ok(result)) => deliver(
                    headers,
                    StatusCode::OK,
                    &wire::Response::answered(request_id, modern_result(result, audience, caching)),
                ),
                Some(Err(response)) => deliver(headers, StatusCode::OK, &*response),
                None => StatusCode::ACCEPTED.into_response(),
            };
            Validator::mark(asked.validator, face, answered.generation, response)
        }
    }
}

pub(super) fn discover() -> Box<RawValue> {
    let server_info = wire::Implementation {
        name: wire::SERVER_NAME.into(),
        version: env!("CARGO_PKG_VERSION").into(),
        instance: wire::mirror_id().map(str::to_string),
    };
    let mut meta = serde_json::Map::new();
    meta.insert(
        wire::SERVER_INFO_META_KEY.into(),
        serde_json::to_value(server_info).unwrap_or(Value::Null),
    );
    let capabilities = match serde_json::to_value(wire::ServerCapabilities::of_the_mirror()) {
        Ok(Value::Object(capabilities)) => capabilities,
        _ => serde_json::Map::new(),
    };
    let result = DiscoverResult {
        supported_versions: wire::supported_versions(),
        capabilities,
        instructions: Some(wire::INSTRUCTIONS.into()),
        meta: Some(meta),
        server_info: None,
    };
    serde_json::value::to_raw_value(&result).unwrap_or_else(|_| RawValue::NULL.to_owned())
}

/// A 2026-07-28 result: `resultType`, and for discover, lists and reads the caching hints, as
/// the result's last fields. They are spliced into its text, which is not parsed again (a page
/// of the catalog is about 250 KB): our results are compact objects of our own types, none of
/// which has these keys.
pub(super) fn modern_result(
    result: Box<RawValue>,
    audience: &Audience,
    caching: bool,
) -> Box<RawValue> {
    let hints = CachingHints {
        result_type: "complete",
        ttl_ms: caching.then_some(audience.ttl_ms),
        cache_scope: caching.then_some(match audience.private_visible {
            true => CacheScope::Private,
            false => CacheScope::Public,
        }),
    };
    let Ok(hints) = serde_json::to_string(&hints) else {
        return result;
    };
    let text = result.get().trim();
    let Some(fields) = text
        .strip_prefix('{')
        .and_then(|rest| rest.strip_suffix('}'))
    else {
        // Not an object: nothing to add to.
        return result;
    };
    if HINT_KEYS.iter().any(|key| text.contains(key)) {
        // One of the keys in the text (in a string, most likely): merged through a tree, so
        // that no key is written twice.
        return hinted_through_tree(&result, &hints).unwrap_or(result);
    }
    let mut hinted = String::with_capacity(text.len() + hints.len());
    hinted.push('{');
    hinted.push_str(fields);
    if !fields.trim().is_empty() {
        hinted.push(',');
    }
    // The hints' fields and their closing brace.
    hinted.push_str(&hints[1..]);
    wire::written_json(&hinted)
}

/// The keys `modern_result` adds, as they appear in JSON text.
const HINT_KEYS: [&str; 3] = ["\"resultType\"", "\"ttlMs\"", "\"cacheScope\""];

/// `result` with the hints' fields set in its tree (theirs replacing any of the same key).
fn hinted_through_tree(result: &RawValue, hints: &str) -> Option<Box<RawValue>> {
    let Value::Object(mut object) = serde_json::from_str(result.get()).ok()? else {
        return None;
    };
    let Value::Object(hints) = serde_json::from_str(hints).ok()? else {
        return None;
    };
    object.extend(hints);
    serde_json::value::to_raw_value(&object).ok()
}

/// `subscriptions/listen`: an SSE answer that acknowledges, then carries `list_changed`
/// until the daemon stops (then the request's result).
fn listen(
    face: &Arc<HttpFace>,
    client: &Client,
    headers: &HeaderMap,
    id: Value,
    params: &Value,
    view: View,
) -> Response {
    // Params that do not parse ask for nothing: the listen gets keep-alives and its end.
    let asked = wire::ListenParams::deserialize(params).unwrap_or_default();
    let asked_resources = asked.notifications.resources_list_changed == Some(true);
    let asked_tools = asked.notifications.tools_list_changed == Some(true);
    let asked_prompts = asked.notifications.prompts_list_changed == Some(true);
    let place = match face.stream_place(client, headers, &id) {
        Ok(place) => place,
        Err(refusal) => return *refusal,
    };
    let subscription = wire::SubscriptionMeta {
        subscription_id: match &id {
            Value::String(text) => text.clone(),
            other => other.to_string(),
        },
    };
    let acknowledged = wire::AcknowledgedParams {
        meta: subscription.clone(),
        notifications: wire::ListenNotifications {
            resources_list_changed: asked_resources.then_some(true),
            tools_list_changed: asked_tools.then_some(true),
            prompts_list_changed: asked_prompts.then_some(true),
        },
    };
    let changed = wire::SubscriptionParams {
        meta: subscription.clone(),
    };
    let closed = serde_json::to_value(wire::ListenResult::complete(subscription))
        .map(|result| wire::Response::success(id, result));
    let plan = StreamPlan {
        first: vec![message_text(&wire::NotificationMessage::new::<
            wire::SubscriptionsAcknowledged,
        >(Some(&acknowledged)))],
        // A client that did not ask for resource list changes gets only keep-alives.
        on_change: asked_resources.then(|| {
            message_text(&wire::NotificationMessage::new::<
                wire::ListenResourcesListChanged,
            >(Some(&changed)))
        }),
        on_tools: asked_tools.then(|| {
            message_text(&wire::NotificationMessage::new::<
                wire::ListenToolsListChanged,
            >(Some(&changed)))
        }),
        on_prompts: asked_prompts.then(|| {
            message_text(&wire::NotificationMessage::new::<
                wire::ListenPromptsListChanged,
            >(Some(&changed)))
        }),
        at_end: closed.ok().map(|closed| message_text(&closed)),
        session_ended: None,
        view,
    };
    stream::open(
        plan,
        face.api.store.subscribe(),
        face.shutdown.clone(),
        Box::new(place),
    )
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// The hints spliced into a result's text give the tree that setting them in its parsed
    /// tree gives, whatever the result holds.
    #[test]
    fn hints_spliced_into_a_result_are_the_hints_set_in_its_tree() {
        let audience = Audience {
            view: View::default(),
            private_visible: true,
            ttl_ms: 60_000,
        };
        for result in [
            json!({}),
            json!({"resources": [{"uri": "a://b", "description": "says \"resultType\""}], "nextCursor": "61"}),
            json!({"resultType": "partial", "tools": []}),
            json!([1, 2]),
            json!("text"),
        ] {
            for caching in [false, true] {
                let text = serde_json::value::to_raw_value(&result).unwrap();
                let hinted = modern_result(text, &audience, caching);
                if result.is_object() {
                    // Each key once (a parse would keep the last of two).
                    assert_eq!(
                        hinted.get().matches("\"resultType\":").count(),
                        1,
                        "{hinted}"
                    );
                }
                let spliced: Value = serde_json::from_str(hinted.get()).unwrap();
                let mut expected = result.clone();
                if let Value::Object(object) = &mut expected {
                    object.insert("resultType".into(), json!("complete"));
                    if caching {
                        object.insert("ttlMs".into(), json!(60_000));
                        object.insert("cacheScope".into(), json!("private"));
                    }
                }
                assert_eq!(spliced, expected, "{result} caching {caching}");
            }
        }
    }
}
