//! The socket protocol of definition history: `catalog/history` (an entry's versions, newest first) and `catalog/diff` (two versions compared, path by path, and for tools in plain words).

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::params::{bounded, bounded_option};
use super::state::Kind;
use super::{MAX_KEY_BYTES, MAX_LIST_CURSOR_BYTES, MAX_NAME_BYTES};

/// Versions per `catalog/history` page unless `limit` asks fewer.
pub const DEFAULT_HISTORY_PAGE: usize = 20;
/// The most versions one `catalog/history` page holds (each may carry its definition, up to
/// `max_entry_bytes`).
pub const MAX_HISTORY_PAGE: usize = 100;

/// `catalog/history`: one entry's versions, newest first, a page after `cursor`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HistoryParams {
    pub kind: Kind,
    #[serde(deserialize_with = "bounded::<_, MAX_NAME_BYTES>")]
    pub server: String,
    /// The entry's key within its server: a tool's or prompt's name, a resource's URI, a
    /// template's URI template.
    #[serde(deserialize_with = "bounded::<_, MAX_KEY_BYTES>")]
    pub key: String,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "bounded_option::<_, MAX_LIST_CURSOR_BYTES>"
    )]
    pub cursor: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<usize>,
    /// Each version with its definition (else its digest and times only).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub include_definitions: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HistoryResult {
    pub server: String,
    pub kind: Kind,
    pub key: String,
    pub versions: Vec<HistoryVersion>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

/// One kept version of an entry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HistoryVersion {
    /// The version's number: `from`/`to` of `catalog/diff`; grows with time for one entry.
    pub version: i64,
    /// XXH3-128 of the body, 32 hex digits: equal digests are the same definition.
    pub digest: String,
    pub first_seen_ms: i64,
    /// When it stopped being listed; absent while it is the current version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_seen_ms: Option<i64>,
    pub current: bool,
    pub bytes: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub definition: Option<Value>,
}

/// `catalog/diff`: two versions of one entry; by default the previous one and the newest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DiffParams {
    pub kind: Kind,
    #[serde(deserialize_with = "bounded::<_, MAX_NAME_BYTES>")]
    pub server: String,
    #[serde(deserialize_with = "bounded::<_, MAX_KEY_BYTES>")]
    pub key: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to: Option<i64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DiffResult {
    pub server: String,
    pub kind: Kind,
    pub key: String,
    pub from: DiffSide,
    pub to: DiffSide,
    /// What differs from `from` to `to`.
    #[serde(flatten)]
    pub structural: StructuralDiff,
}

/// What differs between two definitions, path by path and (for tools) in a client's words:
/// `catalog/diff`'s answer, and each changed entry of `catalog/drift` against its accepted one.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StructuralDiff {
    /// JSON Pointer paths present only in the newer definition, with their values.
    pub added: Vec<PathValue>,
    /// Paths present only in the older one, with their values.
    pub removed: Vec<PathValue>,
    /// Paths in both whose values differ.
    pub changed: Vec<PathChange>,
    /// For tools: what a client cares about, named plainly.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_changes: Vec<ToolChange>,
}

impl StructuralDiff {
    pub fn is_empty(&self) -> bool {
        self.added.is_empty() && self.removed.is_empty() && self.changed.is_empty()
    }
}

/// One side of a diff: which version, and when it was first seen.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DiffSide {
    pub version: i64,
    pub digest: String,
    pub first_seen_ms: i64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PathValue {
    pub path: String,
    pub value: Value,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PathChange {
    pub path: String,
    pub from: Value,
    pub to: Value,
}

/// A change of a tool's contract, as a client would name it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", tag = "change")]
pub enum ToolChange {
    ParameterAdded {
        parameter: String,
        required: bool,
    },
    ParameterRemoved {
        parameter: String,
    },
    MadeRequired {
        parameter: String,
    },
    MadeOptional {
        parameter: String,
    },
    TypeChanged {
        parameter: String,
        from: Value,
        to: Value,
    },
    DescriptionChanged {
        from: Value,
        to: Value,
    },
}

impl ToolChange {
    /// One line for a terminal.
    pub fn sentence(&self) -> String {
        match self {
            ToolChange::ParameterAdded {
                parameter,
                required,
            } => format!(
                "parameter `{parameter}` added ({})",
                if *required { "required" } else { "optional" }
            ),
            ToolChange::ParameterRemoved { parameter } => {
                format!("parameter `{parameter}` removed")
            }
            ToolChange::MadeRequired { parameter } => {
                format!("parameter `{parameter}` made required")
            }
            ToolChange::MadeOptional { parameter } => {
                format!("parameter `{parameter}` made optional")
            }
            ToolChange::TypeChanged {
                parameter,
                from,
                to,
            } => format!("parameter `{parameter}` type changed from {from} to {to}"),
            ToolChange::DescriptionChanged { .. } => "description changed".to_string(),
        }
    }
}
