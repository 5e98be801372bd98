//! The era of a session: `server/discover` (the 2026-07-28 era) else `initialize` (the
//! handshake era), the version both sides speak, and the setup requests before it is known.

use serde_json::{json, Value};
use tokio::time::Instant;

use super::session::Connection;
use super::*;
use crate::protocol::Era;
use crate::protocol::{
    DiscoverResult, UnsupportedVersionData, DISCOVER, HEADER_MISMATCH, LEGACY_VERSIONS,
    MISSING_CLIENT_CAPABILITY, MODERN_VERSIONS, UNSUPPORTED_PROTOCOL_VERSION,
};
use crate::upstream::backoff::Backoff;
use crate::upstream::legacy_sse::LegacySseConnection;
use crate::upstream::McpError;

/// What the `server/discover` probe showed, when it did not end the attempt.
pub(super) enum Probe {
    /// The server speaks the stateless era; the session is established.
    Stateless,
    /// The server is not of the stateless era (as far as we can tell): `initialize` next.
    Handshake {
        /// Why; the error of a server pinned to `era = "modern"`.
        why: McpError,
        /// The probe may still be outstanding, or the child died: a stdio server needs a
        /// new process before `initialize`, so a late answer to the probe cannot meet it.
        fresh_connection: bool,
        /// The handshake-era version the server named in a -32022's `supported`, if any.
        version: Option<String>,
    },
}

/// A version to use, chosen from the versions a server listed.
pub(super) enum VersionChoice {
    Stateless(String),
    Handshake(String),
}

pub(super) fn client_info() -> Value {
    json!({"name": "mcp-mirror", "version": env!("CARGO_PKG_VERSION")})
}

/// The version to use from those a server listed: our newest stateless one (only `pinned`,
/// if the configuration names one), else our newest handshake-era one.
pub(super) fn choose_version(supported: &[String], pinned: Option<&str>) -> Option<VersionChoice> {
    let listed = |ours: &&str| supported.iter().any(|theirs| theirs == ours);
    if let Some(pinned) = pinned {
        return listed(&pinned).then(|| VersionChoice::Stateless(pinned.to_string()));
    }
    if let Some(ours) = MODERN_VERSIONS.iter().copied().find(listed) {
        return Some(VersionChoice::Stateless(ours.to_string()));
    }
    LEGACY_VERSIONS
        .iter()
        .copied()
        .find(listed)
        .map(|ours| VersionChoice::Handshake(ours.to_string()))
}

/// Says that a stateless-era server lists no version we can use, and what to do.
pub(super) fn no_common_version(supported: &[String], pinned: Option<&str>) -> String {
    let ours = match pinned {
        Some(pinned) => format!("{pinned} (pinned by protocol_version)"),
        None => MODERN_VERSIONS.join(", "),
    };
    let theirs = if supported.is_empty() {
        "none".to_string()
    } else {
        supported.join(", ")
    };
    format!(
        "the server speaks the stateless protocol but supports versions {theirs}, and this mirror speaks {ours}"
    )
}

impl Session {
    /// Probes the stateless era with `server/discover`. `Ok(Probe::Stateless)`: the session
    /// is established; `Ok(Probe::Handshake)`: try `initialize`; an error ends this attempt
    /// (the server is of the stateless era but we cannot agree, or it cannot be reached).
    pub(super) async fn discover(&mut self, pinned: Option<&str>) -> Result<Probe, McpError> {
        let mut version = pinned.unwrap_or(MODERN_VERSIONS[0]).to_string();
        // After a -32022 the server is known to be of the stateless era: no fallback then.
        let mut proven = false;
        loop {
            self.set_era(Era::Modern, &version);
            let error = match self.setup_request(DISCOVER, json!({})).await {
                Ok(result) => return self.accept_discover(result, &version, pinned, proven),
                Err(error) if proven => return Err(error),
                Err(error) => error,
            };
            match error.rpc_code() {
                Some(UNSUPPORTED_PROTOCOL_VERSION) => {
                    let supported = match &error {
                        McpError::Rpc { error, .. } => error
                            .data
                            .clone()
                            .and_then(|data| {
                                serde_json::from_value::<UnsupportedVersionData>(data).ok()
                            })
                            .map(|data| data.supported)
                            .unwrap_or_default(),
                        _ => Vec::new(),
                    };
                    match choose_version(&supported, pinned) {
                        // Even the version just sent: a server may refuse a first attempt.
                        Some(VersionChoice::Stateless(chosen)) => {
                            tracing::debug!(refused = %version, retrying_with = %chosen, "server/discover answered -32022");
                            version = chosen;
                            proven = true;
                            continue;
                        }
                        // The server itself names a handshake-era version it speaks.
                        Some(VersionChoice::Handshake(chosen)) => {
                            return Ok(Probe::Handshake {
                                why: error,
                                fresh_connection: false,
                                version: Some(chosen),
                            })
                        }
                        None => {
                            return Err(McpError::StatelessRefusal(format!(
                                "server/discover answered -32022 (unsupported protocol version {version}): {}",
                                no_common_version(&supported, pinned)
                            )))
                        }
                    }
                }
                Some(HEADER_MISMATCH | MISSING_CLIENT_CAPABILITY) => {
                    return Err(McpError::StatelessRefusal(format!(
                        "the server speaks {version} but refused our request: {error}"
                    )));
                }
                // Any other JSON-RPC error: the server does not know `server/discover`.
                Some(_) => {
                    return Ok(Probe::Handshake {
                        why: error,
                        fresh_connection: false,
                        version: None,
                    })
                }
                None => {}
            }
            return match error {
                // Refusals that `initialize` would meet too, and a server that is busy or
                // down: nothing here says which era it speaks.
                McpError::Http {
                    status: 401 | 403 | 429 | 502 | 503 | 504,
                    ..
                }
                | McpError::Transport(_) => Err(error),
                McpError::Http { .. } => Ok(Probe::Handshake {
                    why: error,
                    fresh_connection: false,
                    version: None,
                }),
                // No answer (yet), or not one we could read: ask again on a new connection.
                McpError::Timeout { .. }
                | McpError::Closed(_)
                | McpError::Protocol(_)
                | McpError::SessionExpired(_)
                | McpError::Rpc { .. }
                | McpError::StatelessRefusal(_) => Ok(Probe::Handshake {
                    why: error,
                    fresh_connection: true,
                    version: None,
                }),
            };
        }
    }

    /// Takes a `server/discover` result if it is a real `DiscoverResult`; anything else
    /// (such as the bare `{}` some servers give every method they do not know) means the
    /// server is not of the stateless era, unless a -32022 already `proven` it is.
    pub(super) fn accept_discover(
        &mut self,
        result: Value,
        version: &str,
        pinned: Option<&str>,
        proven: bool,
    ) -> Result<Probe, McpError> {
        let not_this_era = |why: McpError| {
            if proven {
                Err(why)
            } else {
                Ok(Probe::Handshake {
                    why,
                    fresh_connection: false,
                    version: None,
                })
            }
        };
        let discovered: DiscoverResult = match serde_json::from_value(result) {
            Ok(discovered) => discovered,
            Err(problem) => {
                return not_this_era(McpError::Protocol(format!(
                    "the answer to server/discover is not a DiscoverResult: {problem}"
                )))
            }
        };
        let supported = &discovered.supported_versions;
        let version = if supported.iter().any(|listed| listed == version) {
            version.to_string()
        } else {
            match choose_version(supported, pinned) {
                Some(VersionChoice::Stateless(chosen)) => chosen,
                Some(VersionChoice::Handshake(chosen)) if !proven => {
                    return Ok(Probe::Handshake {
                        why: McpError::Protocol(format!(
                            "server/discover lists no stateless version of ours ({})",
                            supported.join(", ")
                        )),
                        fresh_connection: false,
                        version: Some(chosen),
                    })
                }
                _ => {
                    return not_this_era(McpError::StatelessRefusal(no_common_version(
                        supported, pinned,
                    )))
                }
            }
        };
        self.set_era(Era::Modern, &version);
        let from_meta = discovered
            .meta
            .as_ref()
            .and_then(|meta| meta.get("io.modelcontextprotocol/serverInfo"))
            .cloned();
        self.hello.capabilities = Value::Object(discovered.capabilities);
        self.hello.server_info = from_meta.or(discovered.server_info).unwrap_or(Value::Null);
        self.hello.read_mirror();
        Ok(Probe::Stateless)
    }

    pub(super) async fn initialize(&mut self, offered: &str, server: &str) -> Result<(), McpError> {
        self.reset_era();
        let params = json!({
            "protocolVersion": offered,
            "capabilities": {},
            "clientInfo": client_info(),
        });
        let result = match self.setup_request("initialize", params.clone()).await {
            Ok(result) => result,
            // The 2024-11-05 transport answers a POST at its SSE URL with 400, 404 or 405.
            Err(McpError::Http {
                status,
                body,
                retry_after,
            }) if matches!(status, 400 | 404 | 405) => {
                let Connection::Http(http) = &self.connection else {
                    return Err(McpError::Http {
                        status,
                        body,
                        retry_after,
                    });
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
                "server answered protocol version {}; this mirror speaks {}",
                crate::redact::truncate_server_text(version),
                LEGACY_VERSIONS.join(", ")
            )));
        }
        self.set_era(Era::Legacy, version);
        self.notify("notifications/initialized", json!({})).await?;
        self.hello.capabilities = result.get("capabilities").cloned().unwrap_or(Value::Null);
        self.hello.server_info = result.get("serverInfo").cloned().unwrap_or(Value::Null);
        self.hello.read_mirror();
        Ok(())
    }

    /// Sends a request of the session's setup. Until the connection's first answer, messages
    /// wait for the server as long as `connect_timeout` (or a longer `request_timeout`) allows,
    /// counted from the first one: a server may be starting (a package manager fetching it, a
    /// loaded machine). A later setup message gets at least `request_timeout`. A 429 or 503
    /// meanwhile is tried again after its `Retry-After`, within the same time.
    pub(super) async fn setup_request(
        &mut self,
        method: &str,
        params: Value,
    ) -> Result<Value, McpError> {
        if !self.first_contact_pending {
            return self.request(method, params).await;
        }
        let patience = self.connect_timeout.max(self.timeout);
        let first_deadline = *self
            .first_contact_deadline
            .get_or_insert_with(|| Instant::now() + patience);
        let deadline = first_deadline.max(Instant::now() + self.timeout);
        let mut backoff = Backoff::default();
        loop {
            let remaining = deadline.saturating_duration_since(Instant::now());
            let outcome = self
                .request_within(method, params.clone(), Some(remaining))
                .await;
            match outcome {
                Err(
                    error @ McpError::Http {
                        status: 429 | 503, ..
                    },
                ) => {
                    let delay = backoff.next_delay_honouring(error.retry_after());
                    if Instant::now() + delay >= deadline {
                        return Err(error);
                    }
                    tracing::debug!(method, %error, delay_ms = delay.as_millis() as u64, "the server is busy; asking again");
                    tokio::time::sleep(delay).await;
                }
                // No answer: the server may not be up yet.
                Err(
                    error @ (McpError::Timeout { .. }
                    | McpError::Closed(_)
                    | McpError::Transport(_)),
                ) => return Err(error),
                // Any answer, even an error, shows the server is up.
                other => {
                    self.first_contact_pending = false;
                    return other;
                }
            }
        }
    }

    pub(super) fn set_era(&mut self, era: Era, version: &str) {
        self.hello.era = era;
        self.hello.protocol_version = version.to_string();
        if let Connection::Http(http) = &self.connection {
            http.set_protocol_version(version, era == Era::Modern);
        }
    }

    pub(super) fn reset_era(&mut self) {
        self.hello.era = Era::Legacy;
        self.hello.protocol_version.clear();
        if let Connection::Http(http) = &self.connection {
            http.clear_protocol_version();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parses(value: Value) -> bool {
        serde_json::from_value::<DiscoverResult>(value).is_ok()
    }

    #[test]
    fn only_a_real_discover_result_counts() {
        assert!(!parses(json!({})));
        assert!(!parses(
            json!({"resultType": "complete", "_meta": {"x": 1}})
        ));
        assert!(!parses(json!({"supportedVersions": ["2026-07-28"]})));
        assert!(!parses(
            json!({"supportedVersions": ["2026-07-28"], "capabilities": null})
        ));
        assert!(!parses(
            json!({"supportedVersions": "2026-07-28", "capabilities": {}})
        ));
        assert!(parses(
            json!({"supportedVersions": ["2026-07-28"], "capabilities": {}})
        ));
    }

    #[test]
    fn versions_are_chosen_stateless_first_and_pins_are_kept() {
        let list = |versions: &[&str]| versions.iter().map(|v| v.to_string()).collect::<Vec<_>>();
        let chosen = |supported: &[&str], pinned: Option<&str>| match choose_version(
            &list(supported),
            pinned,
        ) {
            Some(VersionChoice::Stateless(version)) => format!("stateless {version}"),
            Some(VersionChoice::Handshake(version)) => format!("handshake {version}"),
            None => "none".into(),
        };
        assert_eq!(
            chosen(&["2025-11-25", "2026-07-28"], None),
            "stateless 2026-07-28"
        );
        assert_eq!(
            chosen(&["2027-01-01", "2025-06-18"], None),
            "handshake 2025-06-18"
        );
        assert_eq!(chosen(&["2027-01-01"], None), "none");
        assert_eq!(chosen(&[], None), "none");
        assert_eq!(
            chosen(&["2026-07-28"], Some("2026-07-28")),
            "stateless 2026-07-28"
        );
        assert_eq!(chosen(&["2025-11-25"], Some("2026-07-28")), "none");
    }
}
