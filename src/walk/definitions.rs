//! The walk of every kind: the dispatch that walks a set of kinds, and the walk and swap of tools and prompts through the one cursor walk (`walk::ListWalk`).

use std::time::Instant;

use serde_json::value::RawValue;
use serde_json::{Map, Value};

use crate::config::WalkLimits;
use crate::protocol::{CacheScope, CatalogPrompts, CatalogTools, Kind, Method};
use crate::store::entry::fit_entry;
use crate::store::{now_ms, EntryRow, EntrySwap, ScopeUpdate, Store};
use crate::upstream::Session;
use crate::walk::{
    restarting_once, usable_key, ListOutcome, ListWalk, Listed, WalkError, WalkSummary,
};

/// Walks `kinds` of `server` one after another, each to the end and swapped on its own: a
/// failure leaves the kinds already swapped in and the rest at their last complete snapshot.
/// Resources (with templates) go through the resource walk; the other kinds through
/// `walk_entries`. (An upstream mcp-mirror whose feed is followed goes through
/// `follow::walk_or_follow` instead, which walks through here only when it must.)
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
        super::walk(session, store, server, limits).await?
    } else {
        WalkSummary::empty(started_at_ms)
    };
    walk_entry_kinds(session, store, server, limits, kinds, &mut summary).await?;
    summary.report.duration_ms = started.elapsed().as_millis() as i64;
    Ok(summary)
}

/// Walks the tools and prompts among `kinds`, each swapped on its own, into `summary`.
pub(super) async fn walk_entry_kinds(
    session: &Session,
    store: &Store,
    server: &str,
    limits: WalkLimits,
    kinds: &[Kind],
    summary: &mut WalkSummary,
) -> Result<(), WalkError> {
    for kind in kinds.iter().filter(|kind| Kind::ENTRY_KINDS.contains(kind)) {
        let (swap, outcome) = walk_entries(session, store, server, *kind, limits).await?;
        summary.report.pages += outcome.pages;
        summary.looped += outcome.looped;
        summary
            .scopes
            .extend(outcome.cache_scope.map(|scope| (*kind, scope)));
        summary.entries.push((*kind, swap));
    }
    Ok(())
}

impl Listed for EntryRow {
    fn identity(&self) -> &str {
        &self.name
    }
}

/// Walks one kind's list method to the end through the one cursor walk (`walk::ListWalk`:
/// page and item caps, cursor loops, one restart on a stale cursor), each page staged as it
/// comes (unchanged entries as their name and hash), and swaps the result in as the server's
/// snapshot of that kind, its scope (the most private page's) with it. Returns the swap and
/// what the walk saw (pages, scope, entries left out as a loop). An upstream mirror whose feed
/// is followed is walked through its catalog of the kind (`catalog/tools`, `catalog/prompts`:
/// every server's entries, each kept under its key there, `followed_entry_row`), not through
/// its own MCP list (the mirror's own tools).
pub async fn walk_entries(
    session: &Session,
    store: &Store,
    server: &str,
    kind: Kind,
    limits: WalkLimits,
) -> Result<(EntrySwap, ListOutcome), WalkError> {
    let followed = session.hello.follows_feed();
    let pass = || async move {
        let staged = store.begin_walk(server);
        let walk = ListWalk::new(session, kind, limits);
        let walk = match (followed, kind) {
            (true, Kind::Prompt) => walk.of_method(CatalogPrompts::NAME),
            (true, _) => walk.of_method(CatalogTools::NAME),
            (false, _) => walk,
        };
        let outcome = walk
            .run(
                |item| match followed {
                    true => followed_entry_row(kind, item, limits.max_entry_bytes),
                    false => entry_row(kind, item, limits.max_entry_bytes),
                },
                |rows| staged.add_entries(kind, rows),
            )
            .await?;
        // As for resources: the more private of the old and new scope while the swap runs.
        let scopes: Vec<(Kind, CacheScope)> = outcome
            .cache_scope
            .map(|scope| (kind, scope))
            .into_iter()
            .collect();
        store
            .record_scopes(server, scopes.clone(), ScopeUpdate::Tighten)
            .await?;
        let swap = staged.commit_entries(kind).await?;
        store
            .record_scopes(server, scopes, ScopeUpdate::Set)
            .await?;
        Ok((swap, outcome))
    };
    restarting_once(server, kind, pass).await
}

/// A tool or prompt served by an upstream mirror, kept under its key there (`KEY_META_KEY`,
/// `<server>/<name>`): one name may be listed by several of its servers. `None` without a key.
pub fn followed_entry_row(
    kind: Kind,
    item: Box<RawValue>,
    max_entry_bytes: u64,
) -> Option<EntryRow> {
    #[derive(serde::Deserialize)]
    struct Keyed {
        #[serde(rename = "_meta")]
        meta: KeyMeta,
    }
    #[derive(serde::Deserialize)]
    struct KeyMeta {
        #[serde(rename = "io.mcp-mirror/key")]
        key: String,
    }
    let key = serde_json::from_str::<Keyed>(item.get()).ok()?.meta.key;
    if !usable_key(&key) {
        return None;
    }
    let mut row = entry_row(kind, item, max_entry_bytes)?;
    row.name = key;
    Some(row)
}

fn text(object: &Map<String, Value>, key: &str) -> Option<String> {
    object.get(key).and_then(Value::as_str).map(str::to_string)
}

/// Builds a store row from a listed tool or prompt (`entry::fit_entry`: kept as sent within
/// `max_entry_bytes`, else trimmed and flagged); `None` without a usable identity.
pub fn entry_row(kind: Kind, item: Box<RawValue>, max_entry_bytes: u64) -> Option<EntryRow> {
    let fitted = fit_entry(item.get(), kind, max_entry_bytes)?;
    drop(item);
    let object = &fitted.object;
    let name = text(object, kind.identity_field()).filter(|name| usable_key(name))?;
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
        hash: fitted.hash,
        oversized: fitted.oversized,
        raw: fitted.raw,
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

    fn raw(item: &Value) -> Box<RawValue> {
        RawValue::from_string(item.to_string()).expect("json")
    }

    #[test]
    fn a_tool_row_keeps_every_field_and_indexes_its_inputs() {
        let tool = json!({
            "name": "echo",
            "description": "Echoes back",
            "inputSchema": {"type": "object", "properties": {"message": {"type": "string", "description": "What to echo"}}},
            "annotations": {"title": "Echo"},
            "_meta": {"x": 1}
        });
        let row = entry_row(Kind::Tool, raw(&tool), 1 << 20).expect("row");
        assert_eq!(row.name, "echo");
        assert_eq!(row.title.as_deref(), Some("Echo"));
        assert_eq!(row.inputs, "message\nWhat to echo");
        assert_eq!(serde_json::from_str::<Value>(&row.raw).expect("json"), tool);
        assert!(entry_row(Kind::Tool, raw(&json!({"description": "no name"})), 1 << 20).is_none());
        let prompt =
            json!({"name": "p", "arguments": [{"name": "topic", "description": "About what"}]});
        assert_eq!(
            entry_row(Kind::Prompt, raw(&prompt), 1 << 20)
                .expect("row")
                .inputs,
            "topic\nAbout what"
        );
    }
}
