//! An MCP client session in either era: connect, detect the era (`server/discover`, else
//! `initialize`), then list, read, ping and listen for changes.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Serialize;
use serde_json::{json, Map, Value};
use tokio::task::JoinHandle;

use super::http::HttpConnection;
use super::legacy_sse::LegacySseConnection;
use super::stdio::StdioConnection;
use super::{
    EventSink, McpError, ServerEvent, HEADER_MISMATCH, LEGACY_VERSIONS, METHOD_NOT_FOUND,
    MISSING_CLIENT_CAPABILITY, MODERN_VERSIONS, UNSUPPORTED_PROTOCOL_VERSION,
};
use crate::config::{EraChoice, ServerConfig, Transport};

/// The longest we wait for a `server/discover` probe before falling back to `initialize`.
const PROBE_TIMEOUT: Duration = Duration::from_secs(10);

/// The two eras of MCP: the handshake era (`initialize`) and the stateless one (2026-07-28).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Era {
    Legacy,
    Modern,
}

/// How this connection learns that the server's list changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PushChannel {
    /// Notifications arrive on the child's stdout.
    Stdio,
    /// The handshake era's GET stream.
    GetStream,
    /// The 2024-11-05 transport's one SSE stream.
    SseStream,
    /// A long-lived `subscriptions/listen` request.
    Listen,
    /// The server cannot push, for the reason given: we poll.
    Polling(String),
}

impl std::fmt::Display for PushChannel {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PushChannel::Stdio => formatter.write_str("stdio notifications"),
            PushChannel::GetStream => formatter.write_str("GET stream"),
            PushChannel::SseStream => formatter.write_str("SSE stream"),
            PushChannel::Listen => formatter.write_str("subscriptions/listen"),
            PushChannel::Polling(reason) => write!(formatter, "polling ({reason})"),
        }
    }
}

/// What the server told us about itself.
#[derive(Debug, Clone)]
pub struct ServerHello {
    pub era: Era,
    pub protocol_version: String,
    pub capabilities: Value,
    pub server_info: Value,
}

impl ServerHello {
    pub fn has_resources(&self) -> bool {
        self.capabilities
            .get("resources")
            .is_some_and(Value::is_object)
    }

    /// True when the server promises `list_changed` notifications.
    pub fn lists_changes(&self) -> bool {
        self.capabilities["resources"]["listChanged"] == Value::Bool(true)
    }
}

/// One page of a paginated list: the raw items, the cursor to the next page, and the
/// server's caching hint (stateless era).
#[derive(Debug)]
pub struct Page {
    pub items: Vec<Value>,
    pub next_cursor: Option<String>,
    pub ttl_ms: Option<u64>,
    pub cache_scope: Option<String>,
}

enum Connection {
    Stdio(StdioConnection),
    Http(HttpConnection),
    LegacySse(LegacySseConnection),
}

/// A live session with one server.
pub struct Session {
    connection: Connection,
    timeout: Duration,
    events: EventSink,
    pub hello: ServerHello,
    listen: Mutex<Option<JoinHandle<()>>>,
}

impl Session {
    /// Connects and establishes the session in the era the server speaks. `known_era` is what
    /// this server spoke last time, so a reconnect need not probe again.
    pub async fn connect(
        server: &ServerConfig,
        events: EventSink,
        known_era: Option<Era>,
    ) -> Result<Session, McpError> {
        let connection = match &server.transport {
            Transport::Stdio {
                command,
                args,
                env,
                cwd,
            } => Connection::Stdio(StdioConnection::spawn(
                &server.name,
                command,
                args,
                env,
                cwd.as_ref(),
                events.clone(),
            )?),
            Transport::Http {
                url,
                headers,
                bearer_token,
            } => Connection::Http(HttpConnection::new(
                &server.name,
                url,
                headers,
                bearer_token.as_ref(),
                events.clone(),
            )?),
        };
        let mut session = Session {
            connection,
            timeout: server.request_timeout,
            events,
            hello: ServerHello {
                era: Era::Legacy,
                protocol_version: String::new(),
                capabilities: Value::Null,
                server_info: Value::Null,
            },
            listen: Mutex::new(None),
        };
        match session.establish(server, known_era).await {
            Ok(()) => Ok(session),
            Err(error) => {
                session.close().await;
                Err(error)
            }
        }
    }

    async fn establish(
        &mut self,
        server: &ServerConfig,
        known_era: Option<Era>,
    ) -> Result<(), McpError> {
        let pinned = server.protocol_version.as_deref();
        let pinned_modern = pinned.filter(|version| MODERN_VERSIONS.contains(version));
        let pinned_legacy = pinned.filter(|version| LEGACY_VERSIONS.contains(version));
        let probe = match server.era {
            EraChoice::Modern => true,
            EraChoice::Legacy => false,
            EraChoice::Auto => pinned_legacy.is_none() && known_era != Some(Era::Legacy),
        };
        if probe {
            match self
                .discover(pinned_modern.unwrap_or(MODERN_VERSIONS[0]))
                .await
            {
                Ok(()) => return Ok(()),
                Err(error) if server.era == EraChoice::Modern => return Err(error),
                // The server is of the stateless era but refuses us: `initialize` will not help.
                Err(error @ McpError::StatelessRefusal(_)) => return Err(error),
                Err(error) => {
                    tracing::debug!(server = %server.name, %error, "no stateless-era answer; trying initialize");
                }
            }
        }
        self.initialize(pinned_legacy.unwrap_or(LEGACY_VERSIONS[0]), &server.name)
            .await
    }

    /// Probes the stateless era. `Ok` means the server speaks it; an error means try
    /// `initialize` (unless the era was pinned).
    async fn discover(&mut self, offered: &str) -> Result<(), McpError> {
        let mut version = offered.to_string();
        for _attempt in 0..2 {
            self.set_era(Era::Modern, &version);
            let outcome = self
                .request_within(
                    "server/discover",
                    json!({}),
                    Some(PROBE_TIMEOUT.min(self.timeout)),
                )
                .await;
            let result = match outcome {
                Ok(result) => result,
                // A recognised stateless-era error means the server is of that era.
                Err(error) if error.rpc_code() == Some(UNSUPPORTED_PROTOCOL_VERSION) => {
                    let supported = match &error {
                        McpError::Rpc { error, .. } => {
                            string_list(error.data.as_ref().and_then(|data| data.get("supported")))
                        }
                        _ => Vec::new(),
                    };
                    match common_modern_version(&supported) {
                        Some(ours) if ours != version => {
                            version = ours.to_string();
                            continue;
                        }
                        _ => return Err(error),
                    }
                }
                Err(error)
                    if matches!(
                        error.rpc_code(),
                        Some(HEADER_MISMATCH | MISSING_CLIENT_CAPABILITY)
                    ) =>
                {
                    return Err(McpError::StatelessRefusal(format!(
                        "the server speaks {version} but refused our request: {error}"
                    )));
                }
                Err(error) => return Err(error),
            };
            let supported = string_list(result.get("supportedVersions"));
            if !supported.is_empty() && !supported.contains(&version) {
                let Some(ours) = common_modern_version(&supported) else {
                    return Err(McpError::Protocol(format!(
                        "server/discover lists versions {} and none of ours",
                        supported.join(", ")
                    )));
                };
                version = ours.to_string();
            }
            self.set_era(Era::Modern, &version);
            let server_info = result["_meta"]["io.modelcontextprotocol/serverInfo"].clone();
            self.hello.capabilities = result.get("capabilities").cloned().unwrap_or(Value::Null);
            self.hello.server_info = if server_info.is_null() {
                result.get("serverInfo").cloned().unwrap_or(Value::Null)
            } else {
                server_info
            };
            return Ok(());
        }
        Err(McpError::Protocol(
            "protocol version negotiation did not settle".into(),
        ))
    }

    async fn initialize(&mut self, offered: &str, server: &str) -> Result<(), McpError> {
        self.reset_era();
        let params = json!({
            "protocolVersion": offered,
            "capabilities": {},
            "clientInfo": client_info(),
        });
        let result = match self.request("initialize", params.clone()).await {
            Ok(result) => result,
            // The 2024-11-05 transport answers a POST at its SSE URL with 400, 404 or 405.
            Err(McpError::Http { status, body }) if matches!(status, 400 | 404 | 405) => {
                let Connection::Http(http) = &self.connection else {
                    return Err(McpError::Http { status, body });
                };
                tracing::debug!(
                    server,
                    status,
                    "POST refused; trying the 2024-11-05 HTTP+SSE transport"
                );
                let (client, url, headers) = http.parts();
                let legacy = LegacySseConnection::connect(server, client, &url, headers, self.events.clone(), self.timeout)
                    .await
                    .map_err(|error| {
                        McpError::Protocol(format!(
                            "POST answered HTTP {status} ({body}), and the 2024-11-05 SSE transport failed too: {error}"
                        ))
                    })?;
                self.connection = Connection::LegacySse(legacy);
                self.request("initialize", params).await?
            }
            Err(error) => return Err(error),
        };
        let version = result
            .get("protocolVersion")
            .and_then(Value::as_str)
            .ok_or_else(|| McpError::Protocol("initialize result has no protocolVersion".into()))?;
        if !LEGACY_VERSIONS.contains(&version) {
            return Err(McpError::Protocol(format!(
                "server answered protocol version {version}; this mirror speaks {}",
                LEGACY_VERSIONS.join(", ")
            )));
        }
        self.set_era(Era::Legacy, version);
        self.notify("notifications/initialized", json!({})).await?;
        self.hello.capabilities = result.get("capabilities").cloned().unwrap_or(Value::Null);
        self.hello.server_info = result.get("serverInfo").cloned().unwrap_or(Value::Null);
        Ok(())
    }

    fn set_era(&mut self, era: Era, version: &str) {
        self.hello.era = era;
        self.hello.protocol_version = version.to_string();
        if let Connection::Http(http) = &self.connection {
            http.set_protocol_version(version, era == Era::Modern);
        }
    }

    fn reset_era(&mut self) {
        self.hello.era = Era::Legacy;
        self.hello.protocol_version.clear();
        if let Connection::Http(http) = &self.connection {
            http.clear_protocol_version();
        }
    }

    pub async fn request(&self, method: &str, params: Value) -> Result<Value, McpError> {
        self.request_within(method, params, Some(self.timeout))
            .await
    }

    async fn request_within(
        &self,
        method: &str,
        params: Value,
        timeout: Option<Duration>,
    ) -> Result<Value, McpError> {
        let params = self.with_meta(params);
        let outcome = match &self.connection {
            Connection::Stdio(stdio) => stdio.request(method, params, timeout).await,
            Connection::Http(http) => http.request(method, params, timeout).await,
            Connection::LegacySse(sse) => sse.request(method, params, timeout).await,
        };
        outcome.map_err(|error| match error {
            McpError::Rpc {
                method: named,
                error,
            } if named.is_empty() => McpError::Rpc {
                method: method.to_string(),
                error,
            },
            other => other,
        })
    }

    async fn notify(&self, method: &str, params: Value) -> Result<(), McpError> {
        let params = self.with_meta(params);
        match &self.connection {
            Connection::Stdio(stdio) => stdio.notify(method, params).await,
            Connection::Http(http) => http.notify(method, params, self.timeout).await,
            Connection::LegacySse(sse) => sse.notify(method, params).await,
        }
    }

    /// In the stateless era every request carries the protocol version, our capabilities
    /// and who we are in `params._meta`.
    fn with_meta(&self, params: Value) -> Value {
        if self.hello.era != Era::Modern {
            return params;
        }
        let mut object = match params {
            Value::Object(object) => object,
            _ => Map::new(),
        };
        let meta = object
            .entry("_meta")
            .or_insert_with(|| Value::Object(Map::new()));
        if let Value::Object(meta) = meta {
            meta.insert(
                "io.modelcontextprotocol/protocolVersion".into(),
                Value::String(self.hello.protocol_version.clone()),
            );
            meta.insert(
                "io.modelcontextprotocol/clientCapabilities".into(),
                json!({}),
            );
            meta.insert("io.modelcontextprotocol/clientInfo".into(), client_info());
        }
        Value::Object(object)
    }

    /// Fetches one page of `method` (`resources/list` or `resources/templates/list`).
    pub async fn list_page(
        &self,
        method: &str,
        field: &str,
        cursor: Option<&str>,
    ) -> Result<Page, McpError> {
        let params = match cursor {
            Some(cursor) => json!({ "cursor": cursor }),
            None => json!({}),
        };
        let mut result = self.request(method, params).await?;
        // A missing resultType means complete; anything else (input_required) cannot be walked.
        if let Some(kind) = result.get("resultType").and_then(Value::as_str) {
            if kind != "complete" {
                return Err(McpError::Protocol(format!(
                    "{method} answered resultType `{kind}`, which a mirror cannot complete"
                )));
            }
        }
        let items = match result.get_mut(field).map(Value::take) {
            Some(Value::Array(items)) => items,
            Some(_) => {
                return Err(McpError::Protocol(format!(
                    "`{field}` in the {method} result is not an array"
                )))
            }
            None => {
                return Err(McpError::Protocol(format!(
                    "the {method} result has no `{field}`"
                )))
            }
        };
        let next_cursor = match result.get("nextCursor") {
            None | Some(Value::Null) => None,
            Some(Value::String(cursor)) => Some(cursor.clone()),
            Some(other) => {
                return Err(McpError::Protocol(format!(
                    "nextCursor is not a string: {other}"
                )))
            }
        };
        Ok(Page {
            items,
            next_cursor,
            ttl_ms: result.get("ttlMs").and_then(Value::as_u64),
            cache_scope: result
                .get("cacheScope")
                .and_then(Value::as_str)
                .map(str::to_string),
        })
    }

    pub async fn read_resource(&self, uri: &str) -> Result<Value, McpError> {
        self.request("resources/read", json!({ "uri": uri })).await
    }

    /// Pings the server; a server without `ping` still counts as alive.
    pub async fn ping(&self) -> Result<(), McpError> {
        match self.request("ping", json!({})).await {
            Ok(_) => Ok(()),
            Err(error) if error.rpc_code() == Some(METHOD_NOT_FOUND) => Ok(()),
            Err(error) => Err(error),
        }
    }

    /// Where this connection's events go; tasks beside the session report through it.
    pub fn events(&self) -> EventSink {
        self.events.clone()
    }

    pub fn transport_name(&self) -> &'static str {
        match self.connection {
            Connection::Stdio(_) => "stdio",
            Connection::Http(_) => "streamable-http",
            Connection::LegacySse(_) => "http+sse",
        }
    }

    /// Starts whatever brings this server's change notifications to us, and says which.
    pub fn start_push(self: &Arc<Self>) -> PushChannel {
        if !self.hello.lists_changes() {
            return PushChannel::Polling(
                "the server does not declare resources.listChanged".into(),
            );
        }
        match (&self.connection, self.hello.era) {
            (_, Era::Modern) => {
                self.start_listen();
                PushChannel::Listen
            }
            (Connection::Stdio(_), Era::Legacy) => PushChannel::Stdio,
            (Connection::Http(http), Era::Legacy) => {
                http.start_get_stream();
                PushChannel::GetStream
            }
            (Connection::LegacySse(_), Era::Legacy) => PushChannel::SseStream,
        }
    }

    /// Opens (or reopens) the long-lived `subscriptions/listen` request.
    pub fn start_listen(self: &Arc<Self>) {
        let session = self.clone();
        let task = tokio::spawn(async move {
            let params = json!({"notifications": {"resourcesListChanged": true}});
            let outcome = session
                .request_within("subscriptions/listen", params, None)
                .await;
            let event = match outcome {
                Ok(_) => ServerEvent::ListenEnded("the server closed the listen stream".into()),
                Err(error) if error.rpc_code() == Some(METHOD_NOT_FOUND) => {
                    ServerEvent::PushUnavailable(
                        "the server does not support subscriptions/listen".into(),
                    )
                }
                Err(error) => {
                    ServerEvent::ListenEnded(format!("the listen stream dropped: {error}"))
                }
            };
            session.events.send(event);
        });
        if let Some(previous) = lock(&self.listen).replace(task) {
            previous.abort();
        }
    }

    /// Ends the session: the listen and streams stop, stdio children are stopped, HTTP
    /// sessions deleted.
    pub async fn close(&self) {
        if let Some(task) = lock(&self.listen).take() {
            task.abort();
        }
        match &self.connection {
            Connection::Stdio(stdio) => stdio.close().await,
            Connection::Http(http) => http.close().await,
            Connection::LegacySse(sse) => sse.close(),
        }
    }
}

fn client_info() -> Value {
    json!({"name": "mcp-mirror", "version": env!("CARGO_PKG_VERSION")})
}

/// The strings in a JSON array (anything else is an empty list).
fn string_list(value: Option<&Value>) -> Vec<String> {
    value
        .and_then(Value::as_array)
        .map(|items| {
            items
                .iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

/// Our newest stateless-era version that the server also lists.
fn common_modern_version(supported: &[String]) -> Option<&'static str> {
    MODERN_VERSIONS
        .iter()
        .copied()
        .find(|ours| supported.iter().any(|theirs| theirs == ours))
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}
