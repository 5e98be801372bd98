//! One list walk: `ListWalk` pages a list method with its limits, `walk` runs every kind of a server into one `WalkSummary`.

use std::collections::HashSet;
use std::future::Future;
use std::hash::{BuildHasher, BuildHasherDefault, DefaultHasher};
use std::time::Instant;

use serde_json::value::RawValue;
use serde_json::Value;

use super::error::WalkError;
use super::progress;
use super::rows::resource_row;
use super::rows::take_entry;
use super::rows::template_row;
use super::rows::Listed;
use crate::config::WalkLimits;
use crate::protocol::{CacheScope, Kind};
use crate::protocol::{INVALID_PARAMS, METHOD_NOT_FOUND};
use crate::store::uri_template::TemplateError;
use crate::store::{now_ms, ScopeUpdate, Store, StoreError, SwapOutcome, WalkReport};
use crate::upstream::{McpError, Session};

/// The result of a complete walk.
#[derive(Debug, Clone)]
pub struct WalkSummary {
    pub swap: SwapOutcome,
    pub report: WalkReport,
    /// The server's caching hint from the first page (stateless era), for pacing polls.
    pub ttl_ms: Option<u64>,
    /// The scope of each kind walked: the most private of its pages (`cacheScope`).
    pub scopes: Vec<(Kind, CacheScope)>,
    /// Entries left out because they came through this mirror already (a mirror loop).
    pub looped: u64,
    /// The swaps of the other kinds walked with it (`walk/definitions.rs`).
    pub entries: Vec<(crate::protocol::Kind, crate::store::EntrySwap)>,
    /// Set when nothing was swapped on purpose: the upstream mirror's servers that have not
    /// committed a first load, whose catalog a follower does not take yet (`walk/follow.rs`).
    pub upstream_loading: Vec<String>,
    /// True when the server's lists were walked in full (false for a follow of a feed): what
    /// paces the next walk.
    pub listed: bool,
    /// Why a follower walked instead of following, when it did.
    pub fallback: Option<crate::protocol::FallbackReason>,
}

impl WalkSummary {
    /// A walk that has swapped nothing yet, started at `started_at_ms`.
    pub fn empty(started_at_ms: i64) -> WalkSummary {
        WalkSummary {
            swap: Default::default(),
            report: WalkReport {
                started_at_ms,
                ..WalkReport::default()
            },
            ttl_ms: None,
            scopes: Vec::new(),
            looped: 0,
            entries: Vec::new(),
            upstream_loading: Vec::new(),
            listed: false,
            fallback: None,
        }
    }

    /// The most private scope of any kind walked (status shows it).
    pub fn most_private_scope(&self) -> Option<CacheScope> {
        self.scopes.iter().map(|(_, scope)| *scope).max()
    }

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
    let pass = || async move {
        let staged = store.begin_walk(server);
        let resources = ListWalk::new(session, Kind::Resource, limits)
            .run(
                |item| resource_row(item, limits.max_entry_bytes),
                |rows| staged.add_resources(rows),
            )
            .await?;
        // Templates are few: their pages stay within a thousand, whatever max_pages says.
        let template_limits = WalkLimits {
            max_pages: limits.max_pages.min(1_000),
            ..limits
        };
        // Templates over the bounds are skipped, the server's other entries kept; the walk
        // says so once in the log (and counts them in `lastWalk.skipped`).
        let mut over_bounds: (u64, Option<TemplateError>) = (0, None);
        let templates = ListWalk::new(session, Kind::Template, template_limits)
            .run(
                |item| match template_row(&item, &limits) {
                    Ok(row) => row,
                    Err(error) => {
                        over_bounds.0 += 1;
                        over_bounds.1.get_or_insert(error);
                        None
                    }
                },
                |rows| staged.add_templates(rows),
            )
            .await?;
        if let (skipped, Some(first)) = over_bounds {
            tracing::warn!(
                server,
                skipped,
                "skipped {skipped} URI template(s) over the bounds (max_template_bytes, max_template_expressions), the first: {first}; the server's other entries are kept"
            );
        }
        let report = WalkReport {
            started_at_ms,
            duration_ms: started.elapsed().as_millis() as i64,
            pages: resources.pages,
            duplicates: resources.duplicates + templates.duplicates,
            skipped: resources.skipped + templates.skipped,
        };
        // The scope goes with the snapshot: the stored scope is the more private of the old
        // and the new one while the swap is under way (a crash leaves it so), then the new.
        let scopes: Vec<(Kind, CacheScope)> = [
            (Kind::Resource, resources.cache_scope),
            (Kind::Template, templates.cache_scope),
        ]
        .into_iter()
        .filter_map(|(kind, scope)| Some((kind, scope?)))
        .collect();
        store
            .record_scopes(server, scopes.clone(), ScopeUpdate::Tighten)
            .await?;
        let swap = staged.commit(report).await?;
        store
            .record_scopes(server, scopes.clone(), ScopeUpdate::Set)
            .await?;
        Ok(WalkSummary {
            swap,
            report,
            ttl_ms: resources.ttl_ms,
            scopes,
            looped: resources.looped + templates.looped,
            entries: Vec::new(),
            upstream_loading: Vec::new(),
            listed: true,
            fallback: None,
        })
    };
    restarting_once(server, Kind::Resource, pass).await
}

/// Why one pass over a list stopped early.
pub(crate) enum Attempt {
    /// The server refused a cursor it had given (-32602): the walk starts again, once.
    StaleCursor(McpError),
    Error(WalkError),
}

impl<E: Into<WalkError>> From<E> for Attempt {
    fn from(error: E) -> Self {
        Attempt::Error(error.into())
    }
}

/// Runs `pass` (one whole walk of `kind`, to its swap) and, when a stale cursor stops it part
/// way, once more from the beginning.
pub(crate) async fn restarting_once<T, Pass>(
    server: &str,
    kind: Kind,
    mut pass: impl FnMut() -> Pass,
) -> Result<T, WalkError>
where
    Pass: Future<Output = Result<T, Attempt>>,
{
    let mut restarted = false;
    loop {
        match pass().await {
            Ok(done) => return Ok(done),
            Err(Attempt::StaleCursor(error)) if !restarted => {
                tracing::info!(server, %kind, %error, "stale cursor part way through the walk; starting again");
                restarted = true;
            }
            Err(Attempt::StaleCursor(error)) => {
                return Err(WalkError::Failed(format!(
                    "the server rejected its own {} cursor twice (stale cursor): {error}",
                    kind.list_method()
                )))
            }
            Err(Attempt::Error(error)) => return Err(error),
        }
    }
}

/// What one pass over a list saw.
#[derive(Debug, Default)]
pub(crate) struct ListOutcome {
    pub pages: u64,
    /// Items without a usable identity.
    pub skipped: u64,
    /// Items whose identity an earlier item of the walk had.
    pub duplicates: u64,
    /// The server's caching hint from the first page (stateless era).
    pub ttl_ms: Option<u64>,
    /// The most private `cacheScope` of any page (`None`: no page was read).
    pub cache_scope: Option<CacheScope>,
    /// Entries left out because they came through this mirror already (a mirror loop).
    pub looped: u64,
}

/// The one cursor walk of every kind, with its guards: follow `nextCursor` to the end, the
/// next page requested while this one is turned into rows and kept; a page cap
/// (`max_pages`), an item cap (`max_items`), a cursor loop (`max_pages_without_new` pages in a
/// row with nothing new), a duplicate listing kept once, and a stale cursor reported as such
/// so the caller restarts (`restarting_once`).
pub(crate) struct ListWalk<'a> {
    session: &'a Session,
    kind: Kind,
    limits: WalkLimits,
    /// The list method walked: the kind's own, or an upstream mirror's catalog of the kind.
    method: &'static str,
}

impl<'a> ListWalk<'a> {
    pub(crate) fn new(session: &'a Session, kind: Kind, limits: WalkLimits) -> Self {
        ListWalk {
            session,
            kind,
            limits,
            method: kind.list_method(),
        }
    }

    /// Walks `method` instead of the kind's own list method (its pages list the kind's
    /// entries under the same key): `catalog/tools` of an upstream mirror.
    pub(crate) fn of_method(mut self, method: &'static str) -> Self {
        self.method = method;
        self
    }

    /// Walks the list to its end: `to_row` turns each item into a row (`None`: skipped),
    /// `keep` takes each page's new rows. A server without templates (-32601 on the first
    /// page) has an empty list of them.
    // Over 100 lines: the one cursor walk's loop with all its guards (page and item caps, cursor
    // loops, duplicates, our own entries coming back, the stale-cursor restart) over state they
    // share per page; a candidate for a page step.
    pub(crate) async fn run<Row, Kept>(
        &self,
        mut to_row: impl FnMut(Box<RawValue>) -> Option<Row>,
        mut keep: impl FnMut(Vec<Row>) -> Kept,
    ) -> Result<ListOutcome, Attempt>
    where
        Row: Listed,
        Kept: Future<Output = Result<(), StoreError>>,
    {
        let (method, list_key, limits) = (self.method, self.kind.list_key(), self.limits);
        // Hashes of the identities seen so far: enough to tell new entries without holding
        // the catalog.
        let hasher = BuildHasherDefault::<DefaultHasher>::default();
        let mut seen: HashSet<u64> = HashSet::new();
        // Hashes of the entries left out as our own come back: a page of them new is progress
        // (a peer in a loop lists our entries before its own), the same ones again are not.
        let mut looped_seen: HashSet<u64> = HashSet::new();
        let mut outcome = ListOutcome::default();
        let upstream_mirror = self
            .session
            .hello
            .server_info
            .get(crate::protocol::INSTANCE_INFO_KEY)
            .and_then(Value::as_str)
            .filter(|id| !id.is_empty());
        if upstream_mirror.is_some() && upstream_mirror == crate::protocol::mirror_id() {
            return Err(WalkError::Failed(
                "a mirror loop: this server is this mirror's own HTTP face; remove it from [servers]"
                    .into(),
            )
            .into());
        }
        let upstream_mirror = &upstream_mirror;
        let mut pages_without_new = 0u64;
        // The page in hand, and whether it was asked for with a cursor (a stale cursor restarts).
        let mut fetched = self.session.list_page(method, list_key, None).await;
        let mut with_cursor = false;
        loop {
            let page = match fetched {
                Ok(page) => page,
                Err(error) if with_cursor && error.rpc_code() == Some(INVALID_PARAMS) => {
                    return Err(Attempt::StaleCursor(error))
                }
                // Many servers have resources but no templates method: that is an empty list.
                Err(error)
                    if !with_cursor
                        && self.kind == Kind::Template
                        && error.rpc_code() == Some(METHOD_NOT_FOUND) =>
                {
                    return Ok(outcome)
                }
                Err(error) => return Err(error.into()),
            };
            outcome.pages += 1;
            if outcome.pages == 1 {
                outcome.ttl_ms = page.ttl_ms;
            }
            // A snapshot is as private as its most private page.
            outcome.cache_scope = outcome.cache_scope.max(Some(page.cache_scope));
            let next_cursor = page.next_cursor;
            let page_cap_reached = outcome.pages >= limits.max_pages;
            let items = page.items;
            progress::count_page(items.len() as u64);
            let (seen, looped_seen, hasher, counts) =
                (&mut seen, &mut looped_seen, &hasher, &mut outcome);
            let (to_row, keep) = (&mut to_row, &mut keep);
            // This page becomes rows and is kept while the server prepares the next one.
            let this_page = async move {
                let mut rows = Vec::with_capacity(items.len());
                let mut new_looped = 0;
                for item in items {
                    let item = match take_entry(item, *upstream_mirror) {
                        Ok(item) => item,
                        Err(looped) => {
                            counts.looped += 1;
                            if looped_seen.len() as u64 <= limits.max_items
                                && looped_seen.insert(hasher.hash_one(looped.get()))
                            {
                                new_looped += 1;
                            }
                            continue;
                        }
                    };
                    let Some(row) = to_row(item) else {
                        counts.skipped += 1;
                        continue;
                    };
                    // The first listing wins, as a server's duplicate is a mistake.
                    if !seen.insert(hasher.hash_one(row.identity())) {
                        counts.duplicates += 1;
                        continue;
                    }
                    if seen.len() as u64 > limits.max_items {
                        return Err(Attempt::from(WalkError::Failed(format!(
                            "item cap reached: {method} lists more than {} entries (max_items)",
                            limits.max_items
                        ))));
                    }
                    rows.push(row);
                }
                let new_in_page = rows.len() + new_looped;
                keep(rows).await?;
                Ok::<usize, Attempt>(new_in_page)
            };
            let Some(next) = next_cursor else {
                this_page.await?;
                return Ok(outcome);
            };
            if page_cap_reached {
                this_page.await?;
                return Err(WalkError::Failed(format!(
                    "page cap reached: {method} has more than {} pages (max_pages)",
                    limits.max_pages
                ))
                .into());
            }
            // `join!` polls the request first, so it is on its way before this page is processed.
            let (next_page, new_in_page) = tokio::join!(
                self.session.list_page(method, list_key, Some(&next)),
                this_page
            );
            if new_in_page? == 0 {
                pages_without_new += 1;
                if pages_without_new >= limits.max_pages_without_new {
                    return Err(WalkError::Failed(format!(
                        "cursor loop: {pages_without_new} pages of {method} in a row listed nothing new (last cursor {next:?})"
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
}
