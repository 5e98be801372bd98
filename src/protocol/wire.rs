//! MCP's own wire, both directions (our upstream client reads it, the HTTP face writes it): the
//! JSON-RPC error codes, the protocol versions of each era, `server/discover`'s result and the
//! unsupported-version error's `data`.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// Handshake-era versions we speak, newest first; `initialize` offers the first, and the
/// socket and the HTTP face answer a client asking for any of them with it.
pub const LEGACY_VERSIONS: &[&str] = &["2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"];
/// Stateless-era versions we speak, newest first.
pub const MODERN_VERSIONS: &[&str] = &["2026-07-28"];

pub const PARSE_ERROR: i64 = -32700;
pub const INVALID_REQUEST: i64 = -32600;
pub const METHOD_NOT_FOUND: i64 = -32601;
pub const INVALID_PARAMS: i64 = -32602;
pub const INTERNAL_ERROR: i64 = -32603;
/// A header disagrees with the body (2026-07-28).
pub const HEADER_MISMATCH: i64 = -32020;
/// The request lacks a client capability the method needs (2026-07-28).
pub const MISSING_CLIENT_CAPABILITY: i64 = -32021;
/// The requested protocol version is not one the server speaks (2026-07-28).
pub const UNSUPPORTED_PROTOCOL_VERSION: i64 = -32022;

/// The `server/discover` method (2026-07-28).
pub const DISCOVER: &str = "server/discover";

/// A `server/discover` answer as the 2026-07-28 schema defines it. An answer counts only
/// when it has `supportedVersions` and `capabilities`; the schema's other required fields
/// (`resultType`, `ttlMs`, `cacheScope`) are not insisted on.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DiscoverResult {
    pub supported_versions: Vec<String>,
    pub capabilities: Map<String, Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instructions: Option<String>,
    #[serde(default, rename = "_meta", skip_serializing_if = "Option::is_none")]
    pub meta: Option<Map<String, Value>>,
    /// Not in the schema (it belongs in `_meta`), but some servers put it here; never sent.
    #[serde(default, skip_serializing)]
    pub server_info: Option<Value>,
}

/// The `_meta` key of `server/discover`'s server info (2026-07-28).
pub const SERVER_INFO_META_KEY: &str = "io.modelcontextprotocol/serverInfo";

/// The `data` of an `UnsupportedProtocolVersion` (-32022) error: the versions the server
/// speaks, and the one asked for.
#[derive(Debug, Serialize, Deserialize)]
pub struct UnsupportedVersionData {
    pub supported: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requested: Option<String>,
}

/// Every version we speak, the stateless era's first, each era's newest first: what
/// `server/discover` and an unsupported-version error list.
pub fn supported_versions() -> Vec<String> {
    MODERN_VERSIONS
        .iter()
        .chain(LEGACY_VERSIONS)
        .map(|version| version.to_string())
        .collect()
}
