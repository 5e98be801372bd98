//! Following an upstream mcp-mirror through its change feed instead of walking it again: after
//! one full walk, each change costs a page of the feed and the entries of the keys it names
//! (`catalog/changes`, `catalog/entries`), applied as one delta with the cursor, as a
//! Kubernetes reflector lists once and then watches. Anything it cannot account for (a pruned
//! feed, another upstream database, a first load's `truncated` row, templates changed, counts
//! that disagree afterwards) falls back to one full walk, which moves the cursor too.

use std::collections::BTreeSet;
use std::time::Instant;

use serde::de::DeserializeOwned;
use serde_json::{json, Value};

use crate::config::WalkLimits;
use crate::protocol::{
    self as wire, CatalogChanges, CatalogEntries, ChangeKind, Kind, Method, FEED_CAPABILITY,
    FEED_VERSION, MAX_CHANGES_LIMIT,
};
use crate::store::{now_ms, FollowCursor, Store, WalkReport};
use crate::upstream::{ServerHello, Session};
use crate::walk::{self, resource_row, WalkError, WalkSummary};

/// Keys asked of the upstream per `catalog/entries` request (the method takes up to
/// `MAX_KEYS`; half keeps an answer of large entries within a few megabytes).
const KEYS_PER_REQUEST: usize = 500;
/// A delta naming more keys than this is walked instead: fetching that many by key costs more
/// than listing them in pages.
const MAX_DELTA_KEYS: usize = 50_000;

/// True when the server is an mcp-mirror whose feed this version can follow.
pub fn follows(hello: &ServerHello) -> bool {
    hello.capabilities["experimental"][FEED_CAPABILITY]["version"] == json!(FEED_VERSION)
}

/// Why a follow gave way to a full walk.
enum Fallback {
    Walk(String),
    Failed(WalkError),
}

impl<E: Into<WalkError>> From<E> for Fallback {
    fn from(error: E) -> Self {
        Fallback::Failed(error.into())
    }
}

/// Brings the server's resources and templates up to date: by its feed when it is a
/// followable mirror with a cursor here, else by a full walk (which records the cursor).
pub async fn walk_or_follow(
    session: &Session,
    store: &Store,
    server: &str,
    limits: WalkLimits,
) -> Result<WalkSummary, WalkError> {
    if !follows(&session.hello) {
        return walk::walk(session, store, server, limits).await;
    }
    match follow(session, store, server, limits).await {
        Ok(summary) => return Ok(summary),
        Err(Fallback::Failed(error)) => return Err(error),
        Err(Fallback::Walk(reason)) => {
            tracing::info!(
                server,
                reason,
                "walking the upstream mirror instead of following its feed"
            )
        }
    }
    // Where the feed stands before the walk: every change after it is in the walk or will be
    // replayed (a replay only fetches an entry again), so the cursor can never skip one.
    let position: KeyedPage = request(
        session,
        CatalogEntries::NAME,
        json!({"kind": "resource", "keys": []}),
    )
    .await?;
    let summary = walk::walk(session, store, server, limits).await?;
    let cursor = FollowCursor {
        instance: position.instance,
        seq: position.seq,
    };
    store.set_follow_cursor(server, Some(cursor)).await?;
    Ok(summary)
}

type KeyedPage = wire::KeyedEntriesResult<Box<serde_json::value::RawValue>>;

async fn request<T: DeserializeOwned>(
    session: &Session,
    method: &str,
    params: Value,
) -> Result<T, WalkError> {
    let answer = session.request(method, params).await?;
    serde_json::from_value(answer).map_err(|error| {
        WalkError::Failed(format!("{method}: an answer of another shape: {error}"))
    })
}

async fn follow(
    session: &Session,
    store: &Store,
    server: &str,
    limits: WalkLimits,
) -> Result<WalkSummary, Fallback> {
    let started = Instant::now();
    let started_at_ms = now_ms();
    let Some(cursor) = store.follow_cursor(server).await? else {
        return Err(Fallback::Walk("no cursor yet".into()));
    };
    // 1. The keys changed since the cursor, page by page.
    let (mut keys, mut since, mut pages) = (BTreeSet::new(), cursor.seq, 0u64);
    loop {
        let page: <CatalogChanges as Method>::Result = request(
            session,
            CatalogChanges::NAME,
            json!({"since": since, "limit": MAX_CHANGES_LIMIT}),
        )
        .await?;
        pages += 1;
        if page.instance.as_deref() != Some(cursor.instance.as_str()) {
            return Err(Fallback::Walk(
                "the upstream's database is another one".into(),
            ));
        }
        if page.truncated {
            return Err(Fallback::Walk("the feed was pruned past the cursor".into()));
        }
        for change in &page.changes {
            since = since.max(change.seq);
            match (change.kind, change.entry_kind, &change.uri) {
                (ChangeKind::Truncated, Kind::Resource | Kind::Template, _) => {
                    return Err(Fallback::Walk("a swap too large to list key by key".into()))
                }
                (_, Kind::Template, _) => return Err(Fallback::Walk("templates changed".into())),
                (_, Kind::Resource, Some(uri)) => {
                    keys.insert(uri.clone());
                }
                _ => {}
            }
        }
        if keys.len() > MAX_DELTA_KEYS {
            return Err(Fallback::Walk(format!(
                "more than {MAX_DELTA_KEYS} keys changed"
            )));
        }
        if !page.more {
            since = since.max(page.latest_seq);
            break;
        }
    }
    // 2. Their entries, as the upstream's merged catalog shows them now.
    let keys: Vec<String> = keys.into_iter().collect();
    let staged = store.begin_walk(server);
    let (mut removed, mut seqs, mut total) = (Vec::new(), Vec::new(), None);
    for chunk in keys.chunks(KEYS_PER_REQUEST) {
        let read: KeyedPage = request(
            session,
            CatalogEntries::NAME,
            json!({"kind": "resource", "keys": chunk}),
        )
        .await?;
        pages += 1;
        if read.instance != cursor.instance {
            return Err(Fallback::Walk(
                "the upstream's database is another one".into(),
            ));
        }
        let mut found = BTreeSet::new();
        let rows: Vec<_> = read
            .entries
            .into_iter()
            // As in a walk: no entry of ours back, the upstream in its chain, no secrets.
            .filter_map(|entry| crate::walk::take_entry(entry, Some(&cursor.instance)).ok())
            .filter_map(|entry| resource_row(entry, limits.max_entry_bytes))
            .filter(|row| found.insert(row.uri.clone()))
            .collect();
        removed.extend(chunk.iter().filter(|key| !found.contains(*key)).cloned());
        if !rows.is_empty() {
            staged.add_resources(rows).await?;
        }
        seqs.push(read.seq);
        total = read.total;
    }
    // The cursor moves to where the feed was listed, not to where the entries were read: a
    // change after it to a key not fetched here must still be replayed (a key fetched here
    // and changed again is fetched again then, which costs only its entry).
    let new_cursor = FollowCursor {
        instance: cursor.instance.clone(),
        seq: since,
    };
    let swap = staged.commit_delta(removed, new_cursor).await?;
    // 3. The snapshot must now count what the upstream counted, when every read saw the
    // catalog exactly as the feed was listed (else a count could differ by a later change).
    if let (Some(total), true) = (total, seqs.iter().all(|seq| *seq == since)) {
        if swap.resources != total {
            return Err(Fallback::Walk(format!(
                "after the delta this mirror holds {} resources and the upstream {total}",
                swap.resources
            )));
        }
    }
    Ok(WalkSummary {
        swap,
        report: WalkReport {
            started_at_ms,
            duration_ms: started.elapsed().as_millis() as i64,
            pages,
            duplicates: 0,
            skipped: 0,
        },
        ttl_ms: None,
        scopes: Vec::new(),
        looped: 0,
        entries: Vec::new(),
    })
}
