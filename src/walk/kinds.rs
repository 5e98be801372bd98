//! The walk of every kind: the dispatch that walks a set of kinds, and the walk and swap of tools and prompts through the one cursor walk (`walk::ListWalk`).

use std::time::Instant;

use serde_json::{Map, Value};

use crate::config::WalkLimits;
use crate::protocol::Kind;
use crate::store::{now_ms, EntryRow, EntrySwap, Store, WalkReport};
use crate::upstream::Session;
use crate::walk::{self, restarting_once, ListWalk, Listed, WalkError, WalkSummary};

/// Walks `kinds` of `server` one after another, each to the end and swapped on its own: a
/// failure leaves the kinds already swapped in and the rest at their last complete snapshot.
/// Resources (with templates) go through the resource walk; the other kinds through
/// `walk_entries`.
pub async fn walk_kinds(
    session: &Session,
    store: &Store,
    server: &str,
    limits: WalkLimits,
    kinds: &[Kind],
) -> Result<WalkSummary, WalkError> {
    let started = Instant::now();
    let started_at_ms = now_ms();
    let mut summary = if kinds.contains(&Kind::Resource) {
        walk::walk(session, store, server, limits).await?
    } else {
        WalkSummary {
            swap: Default::default(),
            report: WalkReport {
                started_at_ms,
                ..WalkReport::default()
            },
            ttl_ms: None,
            cache_scope: None,
            entries: Vec::new(),
        }
    };
    for kind in kinds.iter().filter(|kind| Kind::ENTRY_KINDS.contains(kind)) {
        let (swap, pages) = walk_entries(session, store, server, *kind, limits).await?;
        summary.report.pages += pages;
        summary.entries.push((*kind, swap));
    }
    summary.report.duration_ms = started.elapsed().as_millis() as i64;
    Ok(summary)
}

impl Listed for EntryRow {
    fn identity(&self) -> &str {
        &self.name
    }
}

/// Walks one kind's list method to the end through the one cursor walk (`walk::ListWalk`:
/// page and item caps, cursor loops, one restart on a stale cursor) and swaps the result in
/// as the server's snapshot of that kind. Returns the swap and the pages read.
pub async fn walk_entries(
    session: &Session,
    store: &Store,
    server: &str,
    kind: Kind,
    limits: WalkLimits,
) -> Result<(EntrySwap, u64), WalkError> {
    let pass = || async move {
        // The rows stay in memory: a tools or prompts list is bounded by `max_items`.
        let mut rows = Vec::new();
        let outcome = ListWalk::new(session, kind, limits)
            .run(
                |item| {
                    let item = serde_json::from_str::<Value>(item.get()).ok()?;
                    entry_row(kind, item)
                },
                |page| {
                    rows.extend(page);
                    std::future::ready(Ok(()))
                },
            )
            .await?;
        Ok((store.swap_entries(server, kind, rows).await?, outcome.pages))
    };
    restarting_once(server, kind, pass).await
}

fn text(object: &Map<String, Value>, key: &str) -> Option<String> {
    object.get(key).and_then(Value::as_str).map(str::to_string)
}

/// Builds a store row from a listed tool or prompt; `None` without a usable identity.
/// Every field the server sent is kept in `raw`.
pub fn entry_row(kind: Kind, item: Value) -> Option<EntryRow> {
    let Value::Object(object) = &item else {
        return None;
    };
    let name = text(object, kind.identity_field()).filter(|name| !name.is_empty())?;
    Some(EntryRow {
        title: text(object, "title").or_else(|| {
            // Tools of older revisions carry their display name in `annotations.title`.
            object
                .get("annotations")
                .and_then(|annotations| annotations.get("title"))
                .and_then(Value::as_str)
                .map(str::to_string)
        }),
        description: text(object, "description"),
        inputs: input_text(kind, object),
        raw: item.to_string(),
        name,
    })
}

/// The names and descriptions of a tool's input properties or a prompt's arguments, for search.
fn input_text(kind: Kind, object: &Map<String, Value>) -> String {
    let mut words = Vec::new();
    match kind {
        Kind::Tool => {
            if let Some(Value::Object(properties)) = object
                .get("inputSchema")
                .and_then(|schema| schema.get("properties"))
            {
                for (name, property) in properties {
                    words.push(name.clone());
                    if let Some(description) = property.get("description").and_then(Value::as_str) {
                        words.push(description.to_string());
                    }
                }
            }
        }
        Kind::Prompt => {
            if let Some(Value::Array(arguments)) = object.get("arguments") {
                for argument in arguments {
                    for key in ["name", "description"] {
                        if let Some(text) = argument.get(key).and_then(Value::as_str) {
                            words.push(text.to_string());
                        }
                    }
                }
            }
        }
        Kind::Resource | Kind::Template => {}
    }
    words.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_tool_row_keeps_every_field_and_indexes_its_inputs() {
        let tool = json!({
            "name": "echo",
            "description": "Echoes back",
            "inputSchema": {"type": "object", "properties": {"message": {"type": "string", "description": "What to echo"}}},
            "annotations": {"title": "Echo"},
            "_meta": {"x": 1}
        });
        let row = entry_row(Kind::Tool, tool.clone()).expect("row");
        assert_eq!(row.name, "echo");
        assert_eq!(row.title.as_deref(), Some("Echo"));
        assert_eq!(row.inputs, "message\nWhat to echo");
        assert_eq!(serde_json::from_str::<Value>(&row.raw).expect("json"), tool);
        assert!(entry_row(Kind::Tool, json!({"description": "no name"})).is_none());
        let prompt =
            json!({"name": "p", "arguments": [{"name": "topic", "description": "About what"}]});
        assert_eq!(
            entry_row(Kind::Prompt, prompt).expect("row").inputs,
            "topic\nAbout what"
        );
    }
}
