//! An MCP client session in the handshake era: connect, `initialize`, then list and read.

use std::time::Duration;

use serde_json::{json, Value};
use tokio::sync::mpsc;

use super::http::HttpConnection;
use super::stdio::StdioConnection;
use super::{McpError, ServerEvent};
use crate::config::{ServerConfig, Transport};

/// Handshake-era versions we speak, newest first; we offer the first.
pub const SUPPORTED_VERSIONS: &[&str] = &["2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"];

/// What the server told us about itself in `initialize`.
#[derive(Debug, Clone)]
pub struct ServerHello {
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
}

/// One page of a paginated list: the raw items and the cursor to the next page.
#[derive(Debug)]
pub struct Page {
    pub items: Vec<Value>,
    pub next_cursor: Option<String>,
}

enum Connection {
    Stdio(StdioConnection),
    Http(HttpConnection),
}

/// A live, initialized session with one server.
pub struct Session {
    connection: Connection,
    timeout: Duration,
    pub hello: ServerHello,
}

impl Session {
    /// Connects and performs the `initialize` handshake; server notifications go to `events`.
    pub async fn connect(
        server: &ServerConfig,
        events: mpsc::Sender<ServerEvent>,
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
                events,
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
                events,
            )?),
        };
        let placeholder = ServerHello {
            protocol_version: String::new(),
            capabilities: Value::Null,
            server_info: Value::Null,
        };
        let mut session = Session {
            connection,
            timeout: server.request_timeout,
            hello: placeholder,
        };
        match session.initialize().await {
            Ok(hello) => {
                session.hello = hello;
                Ok(session)
            }
            Err(error) => {
                session.close().await;
                Err(error)
            }
        }
    }

    async fn initialize(&self) -> Result<ServerHello, McpError> {
        let params = json!({
            "protocolVersion": SUPPORTED_VERSIONS[0],
            "capabilities": {},
            "clientInfo": {"name": "mcp-mirror", "version": env!("CARGO_PKG_VERSION")},
        });
        let result = self.request("initialize", params).await?;
        let version = result
            .get("protocolVersion")
            .and_then(Value::as_str)
            .ok_or_else(|| McpError::Protocol("initialize result has no protocolVersion".into()))?;
        if !SUPPORTED_VERSIONS.contains(&version) {
            return Err(McpError::Protocol(format!(
                "server answered protocol version {version}; this mirror speaks {}",
                SUPPORTED_VERSIONS.join(", ")
            )));
        }
        if let Connection::Http(http) = &self.connection {
            http.set_protocol_version(version);
        }
        self.notify("notifications/initialized", json!({})).await?;
        Ok(ServerHello {
            protocol_version: version.to_string(),
            capabilities: result.get("capabilities").cloned().unwrap_or(Value::Null),
            server_info: result.get("serverInfo").cloned().unwrap_or(Value::Null),
        })
    }

    pub async fn request(&self, method: &str, params: Value) -> Result<Value, McpError> {
        match &self.connection {
            Connection::Stdio(stdio) => stdio.request(method, params, self.timeout).await,
            Connection::Http(http) => http.request(method, params, self.timeout).await,
        }
    }

    async fn notify(&self, method: &str, params: Value) -> Result<(), McpError> {
        match &self.connection {
            Connection::Stdio(stdio) => stdio.notify(method, params).await,
            Connection::Http(http) => http.notify(method, params, self.timeout).await,
        }
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
                )));
            }
        };
        Ok(Page { items, next_cursor })
    }

    pub async fn read_resource(&self, uri: &str) -> Result<Value, McpError> {
        self.request("resources/read", json!({ "uri": uri })).await
    }

    pub fn transport_kind(&self) -> &'static str {
        match self.connection {
            Connection::Stdio(_) => "stdio",
            Connection::Http(_) => "http",
        }
    }

    /// Ends the session: stdio children are stopped, HTTP sessions deleted.
    pub async fn close(&self) {
        match &self.connection {
            Connection::Stdio(stdio) => stdio.close().await,
            Connection::Http(http) => http.close().await,
        }
    }
}
