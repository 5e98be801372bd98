//! `catalog/tools`, `catalog/prompts`, `catalog/tool`, `catalog/prompt`, `catalog/drift` and the
//! per-kind part of `catalog/status`: tools and prompts from a `Reader`.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::protocol::{
    self as wire, decode_cursor, encode_cursor, ErrorObject, Kind, KEY_META_KEY, ORIGIN_META_KEY,
    RESOURCE_NOT_FOUND, VIA_META_KEY,
};
use crate::store::{EntryListing, KindCounts, Reader};

use super::{internal, invalid, View};

/// The separator between server and name inside a `catalog/tools` cursor.
const CURSOR_SEPARATOR: char = '\u{1f}';

/// A stored definition with its origin server in `_meta`.
pub fn with_origin(raw: &str, server: &str) -> Value {
    let mut value: Value = serde_json::from_str(raw).unwrap_or(Value::Null);
    attribute(&mut value, server);
    value
}

/// A stored tool or prompt as the mirror serves it: with its origin server in `_meta`, and its
/// key in this catalog, `<server>/<name>` (`KEY_META_KEY`), which a downstream mirror keeps it
/// under (its own upstream's key, when it came through one, is replaced).
pub fn served_entry(raw: &str, server: &str, name: &str) -> Value {
    let mut value = with_origin(raw, server);
    if let Some(Value::Object(meta)) = value.get_mut("_meta") {
        meta.insert(
            KEY_META_KEY.into(),
            Value::String(format!("{server}/{name}")),
        );
    }
    value
}

/// Names `server` in an entry's `_meta`: as its origin, or, when it already names one (it came
/// from another mirror), as the mirror it came via, so the origin is kept.
fn attribute(value: &mut Value, server: &str) {
    let Value::Object(object) = value else {
        return;
    };
    let meta = object
        .entry("_meta")
        .or_insert_with(|| Value::Object(Default::default()));
    if let Value::Object(meta) = meta {
        let key = match meta.get(ORIGIN_META_KEY) {
            Some(Value::String(_)) => VIA_META_KEY,
            _ => ORIGIN_META_KEY,
        };
        meta.insert(key.into(), Value::String(server.to_string()));
    }
}

/// Where a `catalog/tools` (or `/prompts`) page starts: after this (server, name).
fn entries_after(params: &wire::EntriesParams) -> Result<Option<(String, String)>, ErrorObject> {
    let Some(cursor) = &params.cursor else {
        return Ok(None);
    };
    let key = decode_cursor(cursor).ok_or_else(|| invalid("invalid cursor"))?;
    let (server, name) = key
        .split_once(CURSOR_SEPARATOR)
        .ok_or_else(|| invalid("invalid cursor"))?;
    Ok(Some((server.to_string(), name.to_string())))
}

/// A page of one kind's entries the view sees (`page_size` read at most), each with its
/// origin, and the cursor to the next page (after the last entry read, whatever the view left
/// of the page).
pub fn page(
    reader: &Reader,
    kind: Kind,
    params: &wire::EntriesParams,
    page_size: usize,
    view: &View,
) -> Result<(Vec<wire::Definition>, Option<String>), ErrorObject> {
    let after = entries_after(params)?;
    let after = after
        .as_ref()
        .map(|(server, name)| (server.as_str(), name.as_str()));
    let (rows, more) = reader
        .list_entries(kind, params.server.as_deref(), after, page_size)
        .map_err(internal)?;
    let next = match (more, rows.last()) {
        (true, Some(last)) => Some(encode_cursor(&format!(
            "{}{CURSOR_SEPARATOR}{}",
            last.server, last.name
        ))),
        _ => None,
    };
    let entries = rows
        .iter()
        .filter(|row| view.sees(&row.server, kind))
        .map(|row| wire::Definition::served(&row.raw, &row.server, &row.name))
        .collect::<Result<_, _>>()
        .map_err(internal)?;
    Ok((entries, next))
}

/// `catalog/tools`.
pub fn tools(
    reader: &Reader,
    params: &wire::EntriesParams,
    page_size: usize,
    view: &View,
) -> Result<wire::ListToolsResult, ErrorObject> {
    let (tools, next_cursor) = page(reader, Kind::Tool, params, page_size, view)?;
    Ok(wire::ListToolsResult { tools, next_cursor })
}

/// `catalog/prompts`.
pub fn prompts(
    reader: &Reader,
    params: &wire::EntriesParams,
    page_size: usize,
    view: &View,
) -> Result<wire::ListPromptsResult, ErrorObject> {
    let (prompts, next_cursor) = page(reader, Kind::Prompt, params, page_size, view)?;
    Ok(wire::ListPromptsResult {
        prompts,
        next_cursor,
    })
}

/// One tool or prompt, whole (`catalog/tool`, `catalog/prompt`); "not found" when the server
/// lists none of that name, or the view does not see it.
pub fn details(
    reader: &Reader,
    kind: Kind,
    params: &wire::EntryParams,
    view: &View,
) -> Result<wire::EntryDetails, ErrorObject> {
    let listing: Option<EntryListing> = match view.sees(&params.server, kind) {
        true => reader
            .entry(kind, &params.server, &params.name)
            .map_err(internal)?,
        false => None,
    };
    let listing = listing.ok_or_else(|| {
        ErrorObject::new(
            RESOURCE_NOT_FOUND,
            format!(
                "server {} lists no {kind} named {}",
                params.server, params.name
            ),
        )
    })?;
    Ok(wire::EntryDetails {
        definition: serde_json::from_str(&listing.raw).map_err(internal)?,
        server: listing.server,
        kind,
        name: listing.name,
        stale: listing.stale,
        snapshot_at_ms: listing.snapshot_at_ms,
    })
}

/// `server`, when named, must be configured: the same "no server named" error (`notFound:
/// server`, exit 4 in the CLI) as `catalog/list` and `catalog/refresh` answer.
pub fn known_server(reader: &Reader, server: Option<&str>) -> Result<(), ErrorObject> {
    match server {
        Some(server) if !reader.server_exists(server).map_err(internal)? => {
            Err(super::list::no_such_server(server))
        }
        _ => Ok(()),
    }
}

/// Where a `catalog/drift` page starts: after this (server, kind, name).
fn drift_after(cursor: Option<&str>) -> Result<Option<(String, Kind, String)>, ErrorObject> {
    let Some(cursor) = cursor else {
        return Ok(None);
    };
    let bad = || invalid("invalid cursor");
    let key = decode_cursor(cursor).ok_or_else(bad)?;
    let mut parts = key.splitn(3, CURSOR_SEPARATOR);
    let (Some(server), Some(kind), Some(name)) = (parts.next(), parts.next(), parts.next()) else {
        return Err(bad());
    };
    let kind = kind.parse::<Kind>().map_err(|_| bad())?;
    Ok(Some((server.to_string(), kind, name.to_string())))
}

/// `catalog/drift`: a page of the entries changed since the accepted definitions, field by
/// field; the cursor continues after the last entry read, whatever the view left of the page.
pub fn drift(
    reader: &Reader,
    params: &wire::DriftParams,
    view: &View,
) -> Result<wire::DriftResult, ErrorObject> {
    known_server(reader, params.server.as_deref())?;
    let limit = wire::page_limit(params.limit, wire::PAGE_SIZE, wire::PAGE_SIZE)
        .map_err(super::invalid_params)?;
    let after = drift_after(params.cursor.as_deref())?;
    let after = after
        .as_ref()
        .map(|(server, kind, name)| (server.as_str(), *kind, name.as_str()));
    let (rows, more) = reader
        .drift(params.server.as_deref(), after, limit)
        .map_err(internal)?;
    let next_cursor = match (more, rows.last()) {
        (true, Some(last)) => Some(encode_cursor(&format!(
            "{}{CURSOR_SEPARATOR}{}{CURSOR_SEPARATOR}{}",
            last.server, last.kind, last.name
        ))),
        _ => None,
    };
    let drift = rows
        .into_iter()
        .filter(|row| view.sees(&row.server, row.kind))
        .map(|row| {
            let field = |definition: &Option<Value>, name: &str| {
                definition
                    .as_ref()
                    .and_then(|definition| definition.get(name))
                    .cloned()
            };
            let fields = row
                .fields
                .iter()
                .map(|name| {
                    let change = wire::FieldChange {
                        accepted: field(&row.accepted, name),
                        current: field(&row.current, name),
                    };
                    (name.clone(), change)
                })
                .collect();
            // Drift is a diff against the accepted version: the one diff of `catalog/diff`.
            let diff = match (&row.accepted, &row.current) {
                (Some(accepted), Some(current)) => {
                    Some(super::history::structural_diff(row.kind, accepted, current))
                }
                _ => None,
            };
            wire::DriftEntry {
                server: row.server,
                kind: row.kind,
                name: row.name,
                change: row.change,
                fields,
                accepted: row.accepted,
                current: row.current,
                diff,
                accepted_version: row.accepted_version,
                current_version: row.current_version,
            }
        })
        .collect();
    Ok(wire::DriftResult { drift, next_cursor })
}

/// Fills each server's per-kind counts and drift into a status answer.
pub fn add_kind_status(
    mut counts: BTreeMap<String, BTreeMap<Kind, KindCounts>>,
    servers: &mut [wire::ServerStatus],
) {
    for server in servers {
        let Some(kinds) = counts.remove(&server.name) else {
            continue;
        };
        server.kinds = kinds
            .into_iter()
            .map(|(kind, counts)| {
                let status = wire::KindStatus {
                    count: counts.entries,
                    snapshot_at_ms: counts.snapshot_at_ms,
                    drift: counts.drift.map(|drift| wire::DriftCount {
                        added: drift.added,
                        removed: drift.removed,
                        changed: drift.changed,
                    }),
                };
                (kind, status)
            })
            .collect::<BTreeMap<_, _>>();
    }
}
