//! One walk of a server's catalog: follow `nextCursor` to the end, stream pages into staging, swap.

use std::collections::HashSet;
use std::hash::{BuildHasher, BuildHasherDefault, DefaultHasher};
use std::time::Instant;

use serde_json::value::RawValue;
use serde_json::Value;

use crate::config::WalkLimits;
use crate::entry::{fit_entry, whole_entry_hash};
use crate::mcp::{McpError, Session, INVALID_PARAMS, METHOD_NOT_FOUND};
use crate::store::{
    now_ms, ResourceRow, StagedWalk, Store, StoreError, SwapOutcome, TemplateRow, WalkReport,
};

/// Why a walk did not complete.
#[derive(Debug, thiserror::Error)]
pub enum WalkError {
    /// The connection broke; the session must reconnect before walking again.
    #[error("{0}")]
    Connection(McpError),
    /// The server answered, but the walk could not complete (an error, a guard tripped).
    #[error("{0}")]
    Failed(String),
    #[error("store: {0}")]
    Store(#[from] StoreError),
}

impl From<McpError> for WalkError {
    fn from(error: McpError) -> Self {
        if error.is_connection_lost() {
            WalkError::Connection(error)
        } else {
            WalkError::Failed(error.to_string())
        }
    }
}

/// The result of a complete walk.
#[derive(Debug, Clone)]
pub struct WalkSummary {
    pub swap: SwapOutcome,
    pub report: WalkReport,
    /// The server's caching hints from the first page (stateless era), for pacing polls.
    pub ttl_ms: Option<u64>,
    pub cache_scope: Option<String>,
    /// The swaps of the other kinds walked with it (`walk_kinds.rs`).
    pub entries: Vec<(crate::protocol::Kind, crate::store::EntrySwap)>,
}

impl WalkSummary {
    /// True when any kind's swap changed something.
    pub fn changed_anything(&self) -> bool {
        self.swap.added + self.swap.removed + self.swap.changed > 0
            || self.entries.iter().any(|(_, swap)| swap.touched() > 0)
    }
}

/// Walks `resources/list` and `resources/templates/list` to the end and swaps the result in.
/// A stale cursor (-32602) part way restarts the walk from the beginning once.
pub async fn walk(
    session: &Session,
    store: &Store,
    server: &str,
    limits: WalkLimits,
) -> Result<WalkSummary, WalkError> {
    let started = Instant::now();
    let started_at_ms = now_ms();
    let mut restarted = false;
    loop {
        let staged = store.begin_walk(server);
        match walk_once(session, &staged, limits).await {
            Ok((mut report, (ttl_ms, cache_scope))) => {
                walk_templates(session, &staged, limits).await?;
                report.started_at_ms = started_at_ms;
                report.duration_ms = started.elapsed().as_millis() as i64;
                let swap = staged.commit(report).await?;
                return Ok(WalkSummary {
                    swap,
                    report,
                    ttl_ms,
                    cache_scope,
                    entries: Vec::new(),
                });
            }
            Err(Attempt::StaleCursor(error)) if !restarted => {
                tracing::info!(server, %error, "stale cursor part way through the walk; starting again");
                restarted = true;
            }
            Err(Attempt::StaleCursor(error)) => {
                return Err(WalkError::Failed(format!(
                    "the server rejected its own cursor twice (stale cursor): {error}"
                )))
            }
            Err(Attempt::Error(error)) => return Err(error),
        }
    }
}

enum Attempt {
    StaleCursor(McpError),
    Error(WalkError),
}

impl<E: Into<WalkError>> From<E> for Attempt {
    fn from(error: E) -> Self {
        Attempt::Error(error.into())
    }
}

async fn walk_once(
    session: &Session,
    staged: &StagedWalk,
    limits: WalkLimits,
) -> Result<(WalkReport, (Option<u64>, Option<String>)), Attempt> {
    // Hashes of the URIs seen so far: enough to count new URIs per page without holding the catalog.
    let hasher = BuildHasherDefault::<DefaultHasher>::default();
    let mut seen: HashSet<u64> = HashSet::new();
    let mut report = WalkReport::default();
    let mut pages_without_new = 0u64;
    let mut cache_hints = (None, None);
    // The page in hand, and whether it was asked for with a cursor (a stale cursor restarts).
    let mut fetched = session.list_page("resources/list", "resources", None).await;
    let mut with_cursor = false;
    loop {
        let page = match fetched {
            Ok(page) => page,
            Err(error) if with_cursor && error.rpc_code() == Some(INVALID_PARAMS) => {
                return Err(Attempt::StaleCursor(error))
            }
            Err(error) => return Err(error.into()),
        };
        report.pages += 1;
        if report.pages == 1 {
            cache_hints = (page.ttl_ms, page.cache_scope.clone());
        }
        let next_cursor = page.next_cursor;
        let page_cap_reached = report.pages >= limits.max_pages;
        let items = page.items;
        let max_entry_bytes = limits.max_entry_bytes;
        let seen = &mut seen;
        let hasher = &hasher;
        let report_counts = &mut report;
        // This page becomes rows and goes to staging while the server prepares the next one.
        let this_page = async move {
            let mut rows = Vec::with_capacity(items.len());
            for item in items {
                let Some(row) = resource_row(item, max_entry_bytes) else {
                    report_counts.skipped += 1;
                    continue;
                };
                if !seen.insert(hasher.hash_one(&row.uri)) {
                    report_counts.duplicates += 1;
                    continue;
                }
                if seen.len() as u64 > limits.max_items {
                    return Err(Attempt::from(WalkError::Failed(format!(
                        "item cap reached: the catalog has more than {} resources (max_items)",
                        limits.max_items
                    ))));
                }
                rows.push(row);
            }
            let new_in_page = rows.len();
            staged.add_resources(rows).await?;
            Ok::<usize, Attempt>(new_in_page)
        };
        let Some(next) = next_cursor else {
            this_page.await?;
            return Ok((report, cache_hints));
        };
        if page_cap_reached {
            this_page.await?;
            return Err(WalkError::Failed(format!(
                "page cap reached: the catalog has more than {} pages (max_pages)",
                limits.max_pages
            ))
            .into());
        }
        // `join!` polls the request first, so it is on its way before this page is processed.
        let (next_page, new_in_page) = tokio::join!(
            session.list_page("resources/list", "resources", Some(&next)),
            this_page
        );
        let new_in_page = new_in_page?;
        if new_in_page == 0 {
            pages_without_new += 1;
            if pages_without_new >= limits.max_pages_without_new {
                return Err(WalkError::Failed(format!(
                    "cursor loop: {pages_without_new} pages in a row listed no new resource (last cursor {next:?})"
                ))
                .into());
            }
        } else {
            pages_without_new = 0;
        }
        fetched = next_page;
        with_cursor = true;
    }
}

async fn walk_templates(
    session: &Session,
    staged: &StagedWalk,
    limits: WalkLimits,
) -> Result<(), WalkError> {
    let mut cursor: Option<String> = None;
    let mut pages = 0u64;
    loop {
        let page = match session
            .list_page(
                "resources/templates/list",
                "resourceTemplates",
                cursor.as_deref(),
            )
            .await
        {
            Ok(page) => page,
            // Many servers have resources but no templates method: that is an empty list.
            Err(error) if cursor.is_none() && error.rpc_code() == Some(METHOD_NOT_FOUND) => {
                return Ok(())
            }
            Err(error) => return Err(error.into()),
        };
        pages += 1;
        let rows: Vec<TemplateRow> = page
            .items
            .into_iter()
            .filter_map(|item| template_row(item, limits.max_entry_bytes))
            .collect();
        staged.add_templates(rows).await?;
        match page.next_cursor {
            None => return Ok(()),
            Some(_) if pages >= limits.max_pages.min(1_000) => {
                return Err(WalkError::Failed(
                    "template list does not end (page cap reached)".into(),
                ))
            }
            Some(next) => cursor = Some(next),
        }
    }
}

fn text_field(object: &serde_json::Map<String, Value>, key: &str) -> Option<String> {
    object.get(key).and_then(Value::as_str).map(str::to_string)
}

fn json_field(object: &serde_json::Map<String, Value>, key: &str) -> Option<String> {
    object
        .get(key)
        .filter(|value| !value.is_null())
        .map(Value::to_string)
}

/// The fields of a listed Resource the store keeps in columns, borrowed from its text.
/// Anything this cannot take (a field of another type, a repeated key) goes the long way.
#[derive(serde::Deserialize)]
struct ListedResource<'a> {
    #[serde(default)]
    uri: Option<String>,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    title: Option<String>,
    #[serde(default)]
    description: Option<String>,
    #[serde(default, rename = "mimeType")]
    mime_type: Option<String>,
    #[serde(default)]
    size: Option<Value>,
    #[serde(borrow, default)]
    annotations: Option<&'a RawValue>,
    #[serde(borrow, default)]
    icons: Option<&'a RawValue>,
    #[serde(borrow, default, rename = "_meta")]
    meta: Option<&'a RawValue>,
}

/// Builds a store row from a listed Resource; `None` when it has no usable `uri` (or one
/// longer than `max_entry_bytes`). An entry within the bound is stored as the server sent it
/// (`entry::whole_entry_hash`); one over the bound is stored trimmed and flagged.
pub fn resource_row(item: Box<RawValue>, max_entry_bytes: u64) -> Option<ResourceRow> {
    let text = item.get();
    if let Some(hash) = whole_entry_hash(text, max_entry_bytes) {
        if let Ok(listed) = serde_json::from_str::<ListedResource<'_>>(text) {
            let uri = listed.uri.filter(|uri| !uri.is_empty())?;
            let json = |field: Option<&RawValue>| field.map(|value| value.get().to_string());
            return Some(ResourceRow {
                // `name` is required by the schema; a server that omits it still gets its URI shown.
                name: listed.name.unwrap_or_else(|| uri.clone()),
                title: listed.title,
                description: listed.description,
                mime_type: listed.mime_type,
                size: listed.size.as_ref().and_then(Value::as_i64),
                annotations: json(listed.annotations),
                icons: json(listed.icons),
                meta: json(listed.meta),
                hash,
                oversized: false,
                raw: Box::<str>::from(item).into_string(),
                uri,
            });
        }
    }
    let item: Value = serde_json::from_str(item.get()).ok()?;
    let fitted = fit_entry(item, "uri", max_entry_bytes)?;
    let object = &fitted.object;
    let uri = text_field(object, "uri")?;
    Some(ResourceRow {
        // `name` is required by the schema; a server that omits it still gets its URI shown.
        name: text_field(object, "name").unwrap_or_else(|| uri.clone()),
        title: text_field(object, "title"),
        description: text_field(object, "description"),
        mime_type: text_field(object, "mimeType"),
        size: object.get("size").and_then(Value::as_i64),
        annotations: json_field(object, "annotations"),
        icons: json_field(object, "icons"),
        meta: json_field(object, "_meta"),
        hash: fitted.hash,
        oversized: fitted.oversized,
        raw: fitted.raw,
        uri,
    })
}

fn template_row(item: Box<RawValue>, max_entry_bytes: u64) -> Option<TemplateRow> {
    let item: Value = serde_json::from_str(item.get()).ok()?;
    let fitted = fit_entry(item, "uriTemplate", max_entry_bytes)?;
    let object = &fitted.object;
    let uri_template = text_field(object, "uriTemplate")?;
    Some(TemplateRow {
        name: text_field(object, "name").unwrap_or_else(|| uri_template.clone()),
        title: text_field(object, "title"),
        description: text_field(object, "description"),
        mime_type: text_field(object, "mimeType"),
        oversized: fitted.oversized,
        raw: fitted.raw,
        uri_template,
    })
}
