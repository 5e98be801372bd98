//! The socket protocol of every kind beside resources: `catalog/tools`, `catalog/prompts`, one entry, accept and drift, per-kind status, and the mirror's own MCP tools (`search_catalog`, `describe_entry`, `tool_changes`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::params::{bounded, bounded_option};
use super::resource::{Prompt, Tool};
use super::state::{ChangeKind, Kind};
use super::{MAX_KEY_BYTES, MAX_LIST_CURSOR_BYTES, MAX_NAME_BYTES};

/// `catalog/tools`, `catalog/prompts`: one server or all, a page after `cursor`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EntriesParams {
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "bounded_option::<_, MAX_NAME_BYTES>"
    )]
    pub server: Option<String>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "bounded_option::<_, MAX_LIST_CURSOR_BYTES>"
    )]
    pub cursor: Option<String>,
}

/// `catalog/tool`, `catalog/prompt`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EntryParams {
    #[serde(deserialize_with = "bounded::<_, MAX_NAME_BYTES>")]
    pub server: String,
    #[serde(deserialize_with = "bounded::<_, MAX_KEY_BYTES>")]
    pub name: String,
}

/// `catalog/accept`, `catalog/drift`: one server or all.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServerParams {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<String>,
}

/// `catalog/tools`: tools as their servers list them, each with its server in
/// `_meta["io.mcp-mirror/server"]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ListToolsResult {
    pub tools: Vec<Tool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

/// `catalog/prompts`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ListPromptsResult {
    pub prompts: Vec<Prompt>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

/// `catalog/tool`, `catalog/prompt`: one whole definition.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EntryDetails {
    pub server: String,
    pub kind: Kind,
    pub name: String,
    /// The tool or prompt exactly as the server listed it.
    pub definition: Value,
    pub stale: bool,
    pub snapshot_at_ms: Option<i64>,
}

/// `catalog/accept`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AcceptResult {
    /// Definitions recorded as accepted.
    pub accepted: u64,
}

/// `catalog/drift`: one server or all, a page at a time.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DriftParams {
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "bounded_option::<_, MAX_NAME_BYTES>"
    )]
    pub server: Option<String>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "bounded_option::<_, MAX_LIST_CURSOR_BYTES>"
    )]
    pub cursor: Option<String>,
    /// Entries per page, at most `PAGE_SIZE` (the default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u64>,
}

/// `catalog/drift`: the tools and prompts that differ from what was accepted, ordered by
/// server, kind and name; `nextCursor` continues after the last one.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DriftResult {
    pub drift: Vec<DriftEntry>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DriftEntry {
    pub server: String,
    pub kind: Kind,
    pub name: String,
    /// `added`, `removed` or `changed` since the accept.
    pub change: ChangeKind,
    /// For `changed`: each field that differs, with its accepted and current value.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub fields: BTreeMap<String, FieldChange>,
    /// The whole accepted definition (absent for `added`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub accepted: Option<Value>,
    /// The whole current definition (absent for `removed`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current: Option<Value>,
    /// For `changed`: the current definition diffed against the accepted version, the same
    /// structural diff as `catalog/diff` makes of two versions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub diff: Option<super::StructuralDiff>,
    /// The history's version numbers of the accepted and the current definition (`catalog/diff`'s
    /// `from` and `to`), when it keeps them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub accepted_version: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_version: Option<i64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FieldChange {
    pub accepted: Option<Value>,
    pub current: Option<Value>,
}

/// One kind of one server in `catalog/status`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KindStatus {
    pub count: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot_at_ms: Option<i64>,
    /// How many entries differ from the accepted ones; absent until the first accept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drift: Option<DriftCount>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DriftCount {
    pub added: u64,
    pub removed: u64,
    pub changed: u64,
}

/// `tools/call` of the socket's MCP face.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CallToolParams {
    pub name: String,
    #[serde(default)]
    pub arguments: Value,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CallToolResult {
    pub content: Vec<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub structured_content: Option<Value>,
    pub is_error: bool,
}

impl CallToolResult {
    /// A result for models (`text`) and for programs (`structured`, per the tool's outputSchema).
    pub fn text(text: String, structured: Value) -> CallToolResult {
        CallToolResult {
            content: vec![text_content(text)],
            structured_content: Some(structured),
            is_error: false,
        }
    }

    /// A tool-level error: the call was understood, its answer is that it failed.
    pub fn error(text: String) -> CallToolResult {
        CallToolResult {
            content: vec![text_content(text)],
            structured_content: None,
            is_error: true,
        }
    }
}

/// One MCP text content block.
fn text_content(text: String) -> Value {
    serde_json::json!({"type": "text", "text": text})
}

/// `search_catalog`'s arguments.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SearchCatalogArguments {
    pub query: String,
    /// `resource`, `template`, `tool`, `prompt`; all when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kinds: Option<Vec<Kind>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u64>,
    /// Put each tool or prompt hit's whole definition (a tool's `inputSchema`,
    /// `outputSchema`, `annotations`; a prompt's `arguments`) in its `definition`, so a host
    /// can register the found tools as its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub definitions: Option<bool>,
    /// `lexical`, `semantic` or `hybrid`, as `catalog/search` takes it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<super::SearchMode>,
    /// Only entries with one of these URI flags (`none`: with no flag), as `catalog/search`
    /// takes it.
    #[serde(default, rename = "uriFlags", skip_serializing_if = "Option::is_none")]
    pub uri_flags: Option<std::collections::BTreeSet<super::uri_flags::UriFlagFilter>>,
}

/// `search_catalog`'s structured result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SearchCatalogResult {
    pub hits: Vec<CatalogHit>,
}

/// One hit of any kind.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CatalogHit {
    pub kind: Kind,
    pub server: String,
    /// A tool's or prompt's name, a resource's name.
    pub name: String,
    /// A resource's URI.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uri: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// The first line of the description.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    pub score: f64,
    /// The whole definition of a tool or prompt hit, as its server listed it (with its server
    /// in `_meta`), when the search asked for `definitions`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub definition: Option<Value>,
}

/// `describe_entry`'s arguments: a tool or prompt by name, a resource by URI.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DescribeEntryArguments {
    pub kind: Kind,
    pub server: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uri: Option<String>,
}

/// `tool_changes`' arguments: one tool, and optionally the time the caller last used it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolChangesArguments {
    #[serde(deserialize_with = "bounded::<_, MAX_NAME_BYTES>")]
    pub server: String,
    #[serde(deserialize_with = "bounded::<_, MAX_KEY_BYTES>")]
    pub name: String,
    /// An age (`1d`) or an RFC 3339 time, as `catalog/changes` takes it: what changed since.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "bounded_option::<_, { super::MAX_SINCE_BYTES }>"
    )]
    pub since: Option<String>,
}

/// `tool_changes`' structured result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolChangesResult {
    pub server: String,
    pub name: String,
    /// The kept versions, newest first (with `since`: those listed at or after it), at most
    /// `MAX_TOOL_CHANGES_VERSIONS`.
    pub versions: Vec<super::HistoryVersion>,
    /// The version current at `since` (else the one before the newest) against the newest,
    /// as `catalog/diff` answers it; absent when nothing changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub diff: Option<super::DiffResult>,
}

/// The mirror's search tool.
pub const SEARCH_CATALOG_TOOL: &str = "search_catalog";
/// The mirror's tool that says what changed in a tool.
pub const TOOL_CHANGES_TOOL: &str = "tool_changes";
/// The most versions `tool_changes` lists.
pub const MAX_TOOL_CHANGES_VERSIONS: usize = 20;
/// The mirror's tool that returns one whole definition.
pub const DESCRIBE_ENTRY_TOOL: &str = "describe_entry";
/// The most hits `search_catalog` returns.
pub const MAX_CATALOG_HITS: usize = 100;
pub const DEFAULT_CATALOG_HITS: usize = 10;
/// A hit's description is cut to its first line and at most this many characters.
pub const HIT_DESCRIPTION_CHARS: usize = 200;

/// The mirror's own tools, as `tools/list` lists them.
pub fn mirror_tools() -> Vec<Tool> {
    [
        search_catalog_tool(),
        describe_entry_tool(),
        tool_changes_tool(),
    ]
    .into_iter()
    .map(|tool| Tool::deserialize(tool).expect("the mirror's own tools are objects with a name"))
    .collect()
}

/// `search_catalog`: the catalog's search, bounded as the socket's.
fn search_catalog_tool() -> serde_json::Value {
    let kinds = serde_json::json!({
        "type": "array",
        "items": {"type": "string", "enum": ["resource", "template", "tool", "prompt"]}
    });
    let uri_flag_names: Vec<&str> = super::uri_flags::UriFlag::ALL
        .iter()
        .map(|flag| flag.as_str())
        .chain(["none"])
        .collect();
    serde_json::json!({
        "name": SEARCH_CATALOG_TOOL,
        "title": "Search the catalog",
        "description": "Search the tools, prompts and resources of every mirrored MCP server by words (and by meaning when the mirror has a local model). Returns hits with kind, server, name (or URI), title, a one-line description and a score; with definitions: true, each tool's whole definition (inputSchema, annotations) to register it. Call the tool on its own server; this mirror only tells you what exists.",
        "inputSchema": {
            "type": "object",
            "properties": {
                "query": {"type": "string", "description": "Words to search for"},
                "kinds": kinds,
                "server": {"type": "string", "description": "Only this server"},
                "limit": {
                    "type": "integer", "minimum": 1, "maximum": MAX_CATALOG_HITS,
                    "description": "At most this many hits (default 10). A host registering the found tools keeps its total under its client's tool cap (Copilot 128, Cursor 40 to 80, Windsurf 50)"
                },
                "definitions": {
                    "type": "boolean",
                    "description": "Include each tool or prompt hit's whole definition (inputSchema, outputSchema, annotations; a prompt's arguments)"
                },
                "mode": {
                    "type": "string", "enum": ["lexical", "semantic", "hybrid"],
                    "description": "Rank by words, by meaning, or both (the default when the mirror has a model)"
                },
                "uriFlags": {
                    "type": "array",
                    "items": {"type": "string", "enum": uri_flag_names},
                    "description": "Only hits whose URI carries one of these flags; \"none\" keeps the hits whose URI points at no local file, loopback, link-local or private address (and every tool and prompt)"
                }
            },
            "required": ["query"]
        },
        "outputSchema": {
            "type": "object",
            "properties": {
                "hits": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {
                            "kind": {"type": "string"},
                            "server": {"type": "string"},
                            "name": {"type": "string"},
                            "uri": {"type": "string"},
                            "title": {"type": "string"},
                            "description": {"type": "string"},
                            "score": {"type": "number"},
                            "definition": {"type": "object"}
                        },
                        "required": ["kind", "server", "name", "score"]
                    }
                }
            },
            "required": ["hits"]
        },
        "annotations": {"readOnlyHint": true, "openWorldHint": false}
    })
}

/// `describe_entry`: one entry's whole definition.
fn describe_entry_tool() -> serde_json::Value {
    serde_json::json!({
        "name": DESCRIBE_ENTRY_TOOL,
        "title": "Describe a catalog entry",
        "description": "The whole definition of one tool (its schemas), prompt (its arguments) or resource (its fields) of a mirrored server.",
        "inputSchema": {
            "type": "object",
            "properties": {
                "kind": {"type": "string", "enum": ["resource", "tool", "prompt"]},
                "server": {"type": "string"},
                "name": {"type": "string", "description": "A tool's or prompt's name"},
                "uri": {"type": "string", "description": "A resource's URI"}
            },
            "required": ["kind", "server"]
        },
        "annotations": {"readOnlyHint": true, "openWorldHint": false}
    })
}

/// `tool_changes`: what changed in one tool, from its history.
fn tool_changes_tool() -> serde_json::Value {
    serde_json::json!({
        "name": TOOL_CHANGES_TOOL,
        "title": "What changed in a tool",
        "description": "What changed in one mirrored tool: its kept versions (newest first, with when each was first and last seen) and a diff naming changed parameters plainly (added, removed, made required or optional, type changed; description changed) with the JSON paths that differ. By default the last change (the previous version against the current one); with since (an age such as 1d or 12h, or an RFC 3339 time), everything since then: the version current at that time against the current one. Use it before calling again a tool you used earlier.",
        "inputSchema": {
            "type": "object",
            "properties": {
                "server": {"type": "string", "maxLength": MAX_NAME_BYTES, "description": "The tool's server"},
                "name": {"type": "string", "maxLength": MAX_KEY_BYTES, "description": "The tool's name"},
                "since": {
                    "type": "string", "maxLength": super::MAX_SINCE_BYTES,
                    "description": "When you last used the tool: an age (90s, 30m, 12h, 7d; at most 3650d) or an RFC 3339 time (2026-12-04T10:00:00Z)"
                }
            },
            "required": ["server", "name"]
        },
        "annotations": {"readOnlyHint": true, "openWorldHint": false}
    })
}
