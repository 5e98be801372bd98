//! The method handlers: `dispatch` routes a request of either era to its handler (initialize,
//! server/discover, listen, the list and read methods), after the capability and version checks.

use std::sync::atomic::Ordering;
use std::sync::PoisonError;
use std::time::Duration;

use serde_json::{json, Map, Value};
use tracing::{info, warn};

use super::endpoint::{Failure, Handled, SERVER_INFO_KEY};
use super::*;
use crate::catalog::base64_encode;
use crate::rpc::RpcError;
use crate::EraChoice;

impl Server {
    pub(super) async fn dispatch(
        &self,
        method: &str,
        params: Option<&Value>,
        era: &Era,
    ) -> Result<Handled, Failure> {
        if let Era::Modern { capabilities } = era {
            if method != "server/discover" {
                self.check_required_capability(capabilities)?;
            }
        }
        let modern = matches!(era, Era::Modern { .. });
        match method {
            "initialize" if !modern && self.args.era == EraChoice::Modern => {
                Err(self.initialize_refused().into())
            }
            "initialize" if !modern => Ok(Handled::Result(self.initialize(params))),
            "server/discover" if modern => self.discover(params),
            "subscriptions/listen" if modern && !self.args.no_listen => self.listen(params),
            "ping" => Ok(Handled::Result(json!({}))),
            "resources/list" => self.list_resources(params, modern).await,
            "resources/templates/list" => self.list_templates(),
            "resources/read" => self.read_resource(params, modern),
            "tools/list" if self.catalog().tools_declared => {
                if let Some(delay) = self.catalog().faults.tools_page_delay_ms {
                    tokio::time::sleep(Duration::from_millis(delay)).await;
                }
                Ok(Handled::Result(crate::definitions::list_tools(
                    &self.catalog(),
                    params,
                )?))
            }
            "prompts/list" if self.catalog().prompts_declared => Ok(Handled::Result(
                crate::definitions::list_prompts(&self.catalog()),
            )),
            _ if self.answers_unknown_methods() => {
                info!(method, "answering an unknown method with a bare result");
                self.stats.update(|counters| counters.bare_results += 1);
                Ok(Handled::Raw(json!({})))
            }
            _ => Err(method_not_found(method, modern).into()),
        }
    }

    /// The modern result fields: `resultType`, `serverInfo`, and cache hints on cacheable results.
    pub(super) fn decorate_modern(&self, method: &str, mut result: Value) -> Value {
        if result.get("resultType").is_none() {
            result["resultType"] = json!("complete");
        }
        if !result.get("_meta").is_some_and(Value::is_object) {
            result["_meta"] = json!({});
        }
        result["_meta"][SERVER_INFO_KEY] = self.server_info();
        let cacheable = matches!(
            method,
            "resources/list"
                | "resources/templates/list"
                | "resources/read"
                | "tools/list"
                | "prompts/list"
        );
        if cacheable {
            result["ttlMs"] = json!(self.args.ttl_ms);
            // A page may have chosen its own (`--private-after-page`).
            if result.get("cacheScope").is_none() {
                let private = self.args.private_lists.iter().any(|list| list == method);
                result["cacheScope"] = match private {
                    true => json!("private"),
                    false => json!(self.args.cache_scope),
                };
            }
        }
        result
    }

    fn server_info(&self) -> Value {
        json!({"name": self.args.name, "version": env!("CARGO_PKG_VERSION")})
    }

    /// The `require_client_capability` fault: -32021 when the client did not declare it.
    fn check_required_capability(&self, capabilities: &Value) -> Result<(), RpcError> {
        let catalog = self.catalog();
        let Some(required) = &catalog.faults.require_client_capability else {
            return Ok(());
        };
        if capabilities.get(required).is_some() {
            return Ok(());
        }
        let mut required_capabilities = Map::new();
        required_capabilities.insert(required.clone(), json!({}));
        Err(RpcError::new(
            -32021,
            format!("Server requires the {required} capability for this request"),
        )
        .with_data(json!({"requiredCapabilities": required_capabilities}))
        .with_status(400))
    }

    /// A modern-only server's answer to `initialize`, naming what it does speak.
    fn initialize_refused(&self) -> RpcError {
        let versions = self.modern_versions().join(", ");
        RpcError::new(
            -32601,
            format!(
                "method not found: initialize; this server speaks only the stateless protocol \
                 ({versions}): send server/discover or per-request _meta instead"
            ),
        )
        .with_status(404)
    }

    fn initialize(&self, params: Option<&Value>) -> Value {
        let stdio = self.args.http.is_none();
        self.stats.update(|counters| {
            counters.initialize += 1;
            // On stdio the process is the session; HTTP counts sessions as it creates them.
            if stdio && counters.sessions == 0 {
                counters.sessions = 1;
                counters.sessions_created += 1;
            }
        });
        let catalog = self.catalog();
        let requested = params
            .and_then(|params| params.get("protocolVersion"))
            .and_then(Value::as_str);
        let version = requested
            .filter(|version| LEGACY_VERSIONS.contains(version))
            .unwrap_or(LEGACY_VERSIONS[0]);
        let mut capabilities = json!({});
        if catalog.resources_capability {
            capabilities["resources"] = json!({"listChanged": true, "subscribe": false});
        }
        crate::definitions::declare(&catalog, &mut capabilities);
        json!({
            "protocolVersion": version,
            "capabilities": capabilities,
            "serverInfo": self.server_info(),
        })
    }

    fn discover(&self, params: Option<&Value>) -> Result<Handled, Failure> {
        self.stats.update(|counters| counters.discover += 1);
        let catalog = self.catalog();
        if let Some(limit) = catalog.faults.refuse_discovers {
            let claimed =
                self.discovers_refused
                    .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |count| {
                        (count < limit).then_some(count + 1)
                    });
            if claimed.is_ok() {
                let requested = params
                    .and_then(|params| params.get("_meta"))
                    .and_then(|meta| meta.get(PROTOCOL_VERSION_KEY))
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                self.stats
                    .update(|counters| counters.refused_discovers += 1);
                warn!(
                    requested,
                    "refusing server/discover with -32022 on request of the refuse_discovers fault"
                );
                return Err(self.unsupported_version(requested).into());
            }
        }
        let mut capabilities = json!({});
        if catalog.resources_capability {
            // Without listen the server has no way to send list_changed in this era.
            capabilities["resources"] = json!({"listChanged": !self.args.no_listen});
        }
        crate::definitions::declare(&catalog, &mut capabilities);
        Ok(Handled::Result(json!({
            "resultType": "complete",
            "supportedVersions": self.modern_versions(),
            "capabilities": capabilities,
            "instructions": "A synthetic resource catalog for testing MCP clients.",
            "ttlMs": self.args.ttl_ms,
            "cacheScope": self.args.cache_scope,
        })))
    }

    fn listen(&self, params: Option<&Value>) -> Result<Handled, Failure> {
        let requested = params
            .and_then(|params| params.get("notifications"))
            .filter(|notifications| notifications.is_object())
            .ok_or_else(|| {
                RpcError::invalid_params("subscriptions/listen needs params.notifications")
            })?;
        let wants_list_changed = requested.get("resourcesListChanged") == Some(&json!(true));
        // Only resource list changes are supported; anything else asked for is left out.
        let mut honoured = if wants_list_changed && self.catalog().resources_capability {
            json!({"resourcesListChanged": true})
        } else {
            json!({})
        };
        crate::definitions::honour(&self.catalog(), requested, &mut honoured);
        Ok(Handled::Listen(honoured))
    }

    async fn list_resources(
        &self,
        params: Option<&Value>,
        modern: bool,
    ) -> Result<Handled, Failure> {
        let cursor = match params.and_then(|params| params.get("cursor")) {
            None | Some(Value::Null) => None,
            Some(Value::String(cursor)) => Some(cursor.as_str()),
            Some(_) => return Err(RpcError::invalid_params("cursor must be a string").into()),
        };
        self.stats.update(|counters| {
            counters.pages += 1;
            if cursor.is_none() {
                counters.walks += 1;
            }
        });
        let catalog = self.catalog();
        if !catalog.resources_capability {
            return Err(method_not_found("resources/list", modern).into());
        }
        if let Some(delay) = catalog.faults.page_delay_ms {
            tokio::time::sleep(Duration::from_millis(delay)).await;
        }
        // The catalog may have changed while this request slept; answer from the current one.
        let catalog = self.catalog();
        let faults = &catalog.faults;
        let offset = match cursor {
            None => 0,
            Some(cursor) => {
                if faults.stale_cursor_once && !self.stale_cursor_fired.swap(true, Ordering::SeqCst)
                {
                    return Err(RpcError::invalid_params("stale cursor").into());
                }
                catalog
                    .decode_cursor(cursor)
                    .ok_or_else(|| RpcError::invalid_params("Invalid cursor"))?
            }
        };
        let page_number = offset / catalog.page_size + 1;
        let stdio = self.args.http.is_none();
        if faults.exit_at_page == Some(page_number) {
            if stdio {
                warn!(page_number, "exiting on request of the exit_at_page fault");
                return Err(Failure::Exit(3));
            }
            warn!(
                page_number,
                "exit_at_page applies to stdio only; ignoring it"
            );
        }
        if let Some(fault) = catalog.page_fault(page_number) {
            warn!(page_number, ?fault, "injecting a page fault");
            return Err(Failure::Fault(fault));
        }
        if faults.stall_at_page == Some(page_number) {
            warn!(
                page_number,
                "stalling on request of the stall_at_page fault"
            );
            tokio::time::sleep(Duration::from_secs(3600)).await;
        }
        if faults.fail_at_page == Some(page_number) {
            return Err(RpcError::new(-32603, "injected failure").into());
        }
        let mut page = catalog.page(offset);
        if let Some(scope) = &catalog.cache_scope {
            page["cacheScope"] = json!(scope);
        }
        if self
            .args
            .private_after_page
            .is_some_and(|public_pages| page_number > public_pages)
        {
            page["cacheScope"] = json!("private");
        }
        if self.args.reflect_authorization {
            let seen = self
                .last_authorization
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone()
                .unwrap_or_default();
            if let Some(first) = page["resources"].get_mut(0) {
                first["description"] = json!(format!("the client sent Authorization: {seen}"));
            }
        }
        Ok(Handled::Result(page))
    }

    fn list_templates(&self) -> Result<Handled, Failure> {
        self.stats.update(|counters| counters.template_lists += 1);
        let catalog = self.catalog();
        if !catalog.resources_capability {
            return Err(method_not_found("resources/templates/list", false).into());
        }
        Ok(Handled::Result(
            json!({ "resourceTemplates": catalog.templates }),
        ))
    }

    fn read_resource(&self, params: Option<&Value>, modern: bool) -> Result<Handled, Failure> {
        self.stats.update(|counters| counters.reads += 1);
        let catalog = self.catalog();
        if !catalog.resources_capability {
            return Err(method_not_found("resources/read", modern).into());
        }
        let uri = params
            .and_then(|params| params.get("uri"))
            .and_then(Value::as_str)
            .ok_or_else(|| RpcError::invalid_params("uri must be a string"))?;
        let Some(position) = catalog.resources.position(uri) else {
            // A URI under one of our templates is served too, as template-backed servers do;
            // the check is deliberately loose (the template's text before its first `{`), so
            // the mirror's own matching decides what reaches us.
            let template = catalog.templates.iter().find_map(|template| {
                let text = template.get("uriTemplate")?.as_str()?;
                let prefix = text.split('{').next().unwrap_or_default();
                (text.contains('{') && uri.starts_with(prefix)).then_some(text)
            });
            if let Some(template) = template {
                let text = format!("contents of {uri} from template {template}");
                let content = json!({"uri": uri, "mimeType": "text/plain", "text": text});
                return Ok(Handled::Result(json!({ "contents": [content] })));
            }
            // 2026-07-28 replaced -32002 with -32602 for an unknown resource.
            let code = if modern { -32602 } else { -32002 };
            return Err(RpcError::new(code, format!("Resource not found: {uri}")).into());
        };
        if uri.ends_with(".bin") {
            let bytes: Vec<u8> = (0..=255).collect();
            let blob = base64_encode(&bytes);
            let content = json!({"uri": uri, "mimeType": "application/octet-stream", "blob": blob});
            return Ok(Handled::Result(json!({ "contents": [content] })));
        }
        let resource = catalog.resources.get(position);
        let mime_type = resource
            .get("mimeType")
            .and_then(Value::as_str)
            .unwrap_or("text/plain");
        let content =
            json!({"uri": uri, "mimeType": mime_type, "text": format!("contents of {uri}")});
        Ok(Handled::Result(json!({ "contents": [content] })))
    }
}
