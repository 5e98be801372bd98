//! `catalog/history` and `catalog/diff`: an entry's kept versions, and two of them compared path by path (and, for tools, in a client's words), within the client's view.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use crate::protocol::{
    self as wire, ErrorObject, Kind, PathChange, PathValue, ToolChange, RESOURCE_NOT_FOUND,
};
use crate::store::{Reader, VersionRow};

use super::{internal, invalid, View};

/// "No history": the entry was never recorded, or the view does not see it (the same answer,
/// so a client outside the view learns nothing of what exists).
fn no_history(server: &str, kind: Kind, key: &str) -> ErrorObject {
    ErrorObject::new(
        RESOURCE_NOT_FOUND,
        format!("no history of the {kind} {key} of server {server}"),
    )
}

/// Whether the view sees this version: the entry's server and kind, and its body's URI flags.
fn sees(view: &View, server: &str, kind: Kind, row: &VersionRow) -> bool {
    match &row.body {
        Some(body) => view.sees_entry(server, kind, body),
        None => view.sees(server, kind),
    }
}

/// `catalog/history`.
pub fn history(
    reader: &Reader,
    params: &wire::HistoryParams,
    view: &View,
) -> Result<wire::HistoryResult, ErrorObject> {
    let (server, kind, key) = (&params.server, params.kind, &params.key);
    if !view.sees(server, kind) {
        return Err(no_history(server, kind, key));
    }
    let before = match params.cursor.as_deref() {
        None => None,
        Some(cursor) => Some(
            cursor
                .parse::<i64>()
                .map_err(|_| invalid("the cursor is not one catalog/history gave"))?,
        ),
    };
    let limit = params
        .limit
        .unwrap_or(wire::DEFAULT_HISTORY_PAGE)
        .clamp(1, wire::MAX_HISTORY_PAGE);
    // Bodies are read whenever a view may hide flagged URIs, so the rule sees them.
    let with_bodies = params.include_definitions || !view.sees_whole_catalog();
    let (rows, more) = reader
        .history(kind, server, key, before, limit, with_bodies)
        .map_err(internal)?;
    if rows.is_empty() && before.is_none() {
        return Err(no_history(server, kind, key));
    }
    let next_cursor = more
        .then(|| rows.last().map(|row| row.version.to_string()))
        .flatten();
    let newest = before.is_none();
    let mut versions = Vec::with_capacity(rows.len());
    for (index, row) in rows.into_iter().enumerate() {
        if !sees(view, server, kind, &row) {
            return Err(no_history(server, kind, key));
        }
        let definition = match (&row.body, params.include_definitions) {
            (Some(body), true) => Some(serde_json::from_str(body).map_err(internal)?),
            _ => None,
        };
        versions.push(wire::HistoryVersion {
            version: row.version,
            digest: row.digest,
            first_seen_ms: row.first_seen_ms,
            last_seen_ms: row.last_seen_ms,
            current: newest && index == 0 && row.last_seen_ms.is_none(),
            bytes: row.bytes,
            definition,
        });
    }
    Ok(wire::HistoryResult {
        server: server.clone(),
        kind,
        key: key.clone(),
        versions,
        next_cursor,
    })
}

/// `catalog/diff`: `to` (default: the newest version) against `from` (default: the one before).
pub fn diff(
    reader: &Reader,
    params: &wire::DiffParams,
    view: &View,
) -> Result<wire::DiffResult, ErrorObject> {
    let (server, kind, key) = (&params.server, params.kind, &params.key);
    if !view.sees(server, kind) {
        return Err(no_history(server, kind, key));
    }
    let missing = |version: Option<i64>| match version {
        Some(version) => ErrorObject::new(
            RESOURCE_NOT_FOUND,
            format!("the {kind} {key} of server {server} has no kept version {version}"),
        ),
        None => no_history(server, kind, key),
    };
    let to = reader
        .history_version(kind, server, key, params.to)
        .map_err(internal)?
        .ok_or_else(|| missing(params.to))?;
    let from_version = match params.from {
        Some(version) => Some(version),
        None => reader
            .history(kind, server, key, Some(to.version), 1, false)
            .map_err(internal)?
            .0
            .first()
            .map(|row| row.version),
    };
    let from = match from_version {
        Some(version) => reader
            .history_version(kind, server, key, Some(version))
            .map_err(internal)?
            .ok_or_else(|| missing(Some(version)))?,
        // A single version: compared with itself, nothing changed.
        None => to.clone(),
    };
    if !sees(view, server, kind, &to) || !sees(view, server, kind, &from) {
        return Err(no_history(server, kind, key));
    }
    let parse = |row: &VersionRow| -> Result<Value, ErrorObject> {
        serde_json::from_str(row.body.as_deref().unwrap_or("null")).map_err(internal)
    };
    let structural = structural_diff(kind, &parse(&from)?, &parse(&to)?);
    let side = |row: &VersionRow| wire::DiffSide {
        version: row.version,
        digest: row.digest.clone(),
        first_seen_ms: row.first_seen_ms,
    };
    Ok(wire::DiffResult {
        server: server.clone(),
        kind,
        key: key.clone(),
        from: side(&from),
        to: side(&to),
        structural,
    })
}

/// Two definitions of one entry compared: the paths, and for a tool its contract's changes
/// named. The one diff of `catalog/diff` and of `catalog/drift` (against the accepted one).
pub(crate) fn structural_diff(kind: Kind, before: &Value, after: &Value) -> wire::StructuralDiff {
    let (added, removed, changed) = json_diff(before, after);
    let tool_changes = match kind {
        Kind::Tool => tool_changes(before, after),
        Kind::Resource | Kind::Template | Kind::Prompt => Vec::new(),
    };
    wire::StructuralDiff {
        added,
        removed,
        changed,
        tool_changes,
    }
}

/// `tool_changes`, the MCP face's question "what changed in this tool": its kept versions and
/// the diff of its last change, or (with `since_ms`) of everything since the version current
/// then; no diff when nothing changed. The same view rule as `catalog/history`.
pub(crate) fn changes_of_tool(
    reader: &Reader,
    arguments: &wire::ToolChangesArguments,
    since_ms: Option<i64>,
    view: &View,
) -> Result<wire::ToolChangesResult, ErrorObject> {
    let page = history(
        reader,
        &wire::HistoryParams {
            kind: Kind::Tool,
            server: arguments.server.clone(),
            key: arguments.name.clone(),
            cursor: None,
            limit: Some(wire::MAX_HISTORY_PAGE),
            include_definitions: false,
        },
        view,
    )?;
    let mut versions = page.versions;
    let newest = versions.first().map(|version| version.version);
    // The version the caller saw at `since`: the newest first seen by then (else the oldest
    // kept one, when every kept version is younger).
    let from = since_ms.and_then(|since| {
        versions
            .iter()
            .find(|version| version.first_seen_ms <= since)
            .or(versions.last())
            .map(|version| version.version)
    });
    if let Some(since) = since_ms {
        versions.retain(|version| version.last_seen_ms.map_or(true, |last| last >= since));
    }
    versions.truncate(wire::MAX_TOOL_CHANGES_VERSIONS);
    let unchanged = match since_ms {
        Some(_) => from == newest,
        None => versions.len() < 2,
    };
    let diff = match unchanged {
        true => None,
        false => Some(diff(
            reader,
            &wire::DiffParams {
                kind: Kind::Tool,
                server: arguments.server.clone(),
                key: arguments.name.clone(),
                from,
                to: None,
            },
            view,
        )?),
    };
    Ok(wire::ToolChangesResult {
        server: arguments.server.clone(),
        name: arguments.name.clone(),
        versions,
        diff,
    })
}

/// A JSON Pointer segment (RFC 6901 escapes).
fn pointer_segment(segment: &str) -> String {
    segment.replace('~', "~0").replace('/', "~1")
}

/// The leaf-level differences of two JSON values: paths only in `after`, only in `before`,
/// and in both with other values. An explicit stack, not recursion: a server controls depth.
pub(crate) fn json_diff(
    before: &Value,
    after: &Value,
) -> (Vec<PathValue>, Vec<PathValue>, Vec<PathChange>) {
    let (mut added, mut removed, mut changed) = (Vec::new(), Vec::new(), Vec::new());
    let mut stack: Vec<(String, &Value, &Value)> = vec![(String::new(), before, after)];
    while let Some((path, old, new)) = stack.pop() {
        match (old, new) {
            (Value::Object(old_map), Value::Object(new_map)) => {
                let keys: BTreeSet<&String> = old_map.keys().chain(new_map.keys()).collect();
                for field in keys {
                    let child = format!("{path}/{}", pointer_segment(field));
                    match (old_map.get(field), new_map.get(field)) {
                        (Some(old), Some(new)) => stack.push((child, old, new)),
                        (old, new) => one_side(child, old, new, &mut removed, &mut added),
                    }
                }
            }
            (Value::Array(old_items), Value::Array(new_items)) => {
                for index in 0..old_items.len().max(new_items.len()) {
                    let child = format!("{path}/{index}");
                    match (old_items.get(index), new_items.get(index)) {
                        (Some(old), Some(new)) => stack.push((child, old, new)),
                        (old, new) => one_side(child, old, new, &mut removed, &mut added),
                    }
                }
            }
            (old, new) if old != new => changed.push(PathChange {
                path,
                from: old.clone(),
                to: new.clone(),
            }),
            _ => {}
        }
    }
    added.sort_by(|a, b| a.path.cmp(&b.path));
    removed.sort_by(|a, b| a.path.cmp(&b.path));
    changed.sort_by(|a, b| a.path.cmp(&b.path));
    (added, removed, changed)
}

/// A tool's parameters: each property of `inputSchema` with whether it is required.
fn parameters(tool: &Value) -> BTreeMap<String, (Value, bool)> {
    let schema = &tool["inputSchema"];
    let required: BTreeSet<&str> = schema["required"]
        .as_array()
        .map(|names| names.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    schema["properties"]
        .as_object()
        .map(|properties| {
            properties
                .iter()
                .map(|(name, property)| {
                    let kind = property.get("type").cloned().unwrap_or(Value::Null);
                    (name.clone(), (kind, required.contains(name.as_str())))
                })
                .collect()
        })
        .unwrap_or_default()
}

/// What changed in a tool's contract, named as a client would name it.
pub(crate) fn tool_changes(before: &Value, after: &Value) -> Vec<ToolChange> {
    let (old, new) = (parameters(before), parameters(after));
    let mut changes = Vec::new();
    for (name, (new_type, new_required)) in &new {
        match old.get(name) {
            None => changes.push(ToolChange::ParameterAdded {
                parameter: name.clone(),
                required: *new_required,
            }),
            Some((old_type, old_required)) => {
                if !old_required && *new_required {
                    changes.push(ToolChange::MadeRequired {
                        parameter: name.clone(),
                    });
                }
                if *old_required && !new_required {
                    changes.push(ToolChange::MadeOptional {
                        parameter: name.clone(),
                    });
                }
                if old_type != new_type {
                    changes.push(ToolChange::TypeChanged {
                        parameter: name.clone(),
                        from: old_type.clone(),
                        to: new_type.clone(),
                    });
                }
            }
        }
    }
    for name in old.keys().filter(|name| !new.contains_key(*name)) {
        changes.push(ToolChange::ParameterRemoved {
            parameter: name.clone(),
        });
    }
    if before.get("description") != after.get("description") {
        changes.push(ToolChange::DescriptionChanged {
            from: before.get("description").cloned().unwrap_or(Value::Null),
            to: after.get("description").cloned().unwrap_or(Value::Null),
        });
    }
    changes
}

/// A path only one side of a diff has: removed when only the old one holds it, added when only
/// the new one does.
fn one_side(
    path: String,
    old: Option<&Value>,
    new: Option<&Value>,
    removed: &mut Vec<PathValue>,
    added: &mut Vec<PathValue>,
) {
    match (old, new) {
        (Some(old), None) => removed.push(PathValue {
            path,
            value: old.clone(),
        }),
        (None, Some(new)) => added.push(PathValue {
            path,
            value: new.clone(),
        }),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_tool_diff_names_added_required_and_retyped_parameters() {
        let before = json!({"name": "t", "description": "old", "inputSchema": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "days": {"type": "integer"}, "gone": {}},
            "required": ["city"]}});
        let after = json!({"name": "t", "description": "new", "inputSchema": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "days": {"type": "string"}, "units": {"type": "string"}},
            "required": ["city", "days"]}});
        let changes = tool_changes(&before, &after);
        let sentences: Vec<String> = changes.iter().map(ToolChange::sentence).collect();
        assert_eq!(
            sentences,
            [
                "parameter `days` made required",
                "parameter `days` type changed from \"integer\" to \"string\"",
                "parameter `units` added (optional)",
                "parameter `gone` removed",
                "description changed",
            ]
        );
        let (added, removed, changed) = json_diff(&before, &after);
        assert_eq!(added[0].path, "/inputSchema/properties/units");
        assert_eq!(removed[0].path, "/inputSchema/properties/gone");
        assert!(changed
            .iter()
            .any(|change| change.path == "/inputSchema/properties/days/type"));
        assert!(added
            .iter()
            .any(|path| path.path == "/inputSchema/required/1"));
    }
}
