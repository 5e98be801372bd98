//! `walk_or_follow`: read a mirror upstream's change feed since our cursor and apply it, or fall back to a walk.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;

use super::answers;
use super::answers::KeyedAnswer;
use crate::config::WalkLimits;
use crate::protocol::{
    self as wire, CacheScope, CatalogChanges, CatalogEntries, ChangeKind, ChangesParams,
    FallbackReason, KeysParams, Kind, Method, MAX_CHANGES_LIMIT,
};
use crate::store::{now_ms, DeltaOutcome, FollowCursor, ScopeUpdate, StagedWalk, Store};
use crate::upstream::Session;
use crate::walk::definitions::followed_entry_row;
use crate::walk::{self, resource_row, template_row, WalkError, WalkSummary};

/// Keys asked of the upstream per `catalog/entries` request (the method takes up to
/// `MAX_KEYS`; half keeps an answer of large entries within a few megabytes).
const KEYS_PER_REQUEST: usize = 500;
/// A delta naming more keys than this is walked instead: fetching that many by key costs more
/// than listing them in pages.
const MAX_DELTA_KEYS: usize = 50_000;
/// A delta whose changed keys take more bytes than this (all together) is walked instead, so
/// an upstream naming huge keys cannot grow the follower's memory past it.
const MAX_DELTA_KEY_BYTES: usize = 16 << 20;

/// Why a follow gave way to a full walk: the reason counted, and what the log says of it.
enum Fallback {
    Walk {
        reason: FallbackReason,
        detail: String,
    },
    Failed(WalkError),
}

impl Fallback {
    fn walk(reason: FallbackReason, detail: impl Into<String>) -> Fallback {
        Fallback::Walk {
            reason,
            detail: detail.into(),
        }
    }
}

impl<E: Into<WalkError>> From<E> for Fallback {
    fn from(error: E) -> Self {
        Fallback::Failed(error.into())
    }
}

/// Brings the server's `kinds` (resources with templates, tools, prompts) up to date: by its
/// feed when there is a cursor here, else by a full walk of each (which records the cursor).
///
/// A follower that holds a snapshot does not walk an upstream whose servers have not all
/// committed a first load (a new upstream database starting over): that catalog is emptier
/// than it will be. With `may_hold` it swaps nothing and says which servers it waits for
/// (`WalkSummary::upstream_loading`); the session tries again, and stops waiting after
/// `upstream_load_wait`.
pub async fn walk_or_follow(
    session: &Session,
    store: &Store,
    server: &str,
    limits: WalkLimits,
    kinds: &[Kind],
    may_hold: bool,
) -> Result<WalkSummary, WalkError> {
    let name = server.to_string();
    let cursor = store
        .read(move |reader| reader.follow_cursor(&name))
        .await?;
    let (reason, detail) = match &cursor {
        None => (FallbackReason::NoCursor, "no cursor yet".to_string()),
        Some(cursor) => match follow(session, store, server, limits, kinds, cursor).await {
            Ok(summary) => return Ok(summary),
            Err(Fallback::Failed(error)) => return Err(error),
            Err(Fallback::Walk { reason, detail }) => (reason, detail),
        },
    };
    tracing::info!(
        server,
        reason = detail,
        "walking the upstream mirror instead of following its feed"
    );
    let started = Instant::now();
    // Where the feed stands before the walk: every change after it is in the walk or will be
    // replayed (a replay only fetches an entry again), so the cursor can never skip one.
    let position = entries_request(session, Kind::Resource, &[], &mut None).await?;
    let name = server.to_string();
    if may_hold
        && !position.loading.is_empty()
        && store
            .read(move |reader| reader.holds_entries(&name))
            .await?
    {
        tracing::info!(
            server,
            loading = ?position.loading,
            "keeping the snapshot: the upstream mirror has servers that have not loaded yet"
        );
        let mut summary = WalkSummary::empty(now_ms());
        summary.upstream_loading = position.loading;
        return Ok(summary);
    }
    let mut summary = match kinds.contains(&Kind::Resource) {
        true => walk::walk(session, store, server, limits).await?,
        false => WalkSummary::empty(now_ms()),
    };
    crate::walk::definitions::walk_entry_kinds(session, store, server, limits, kinds, &mut summary)
        .await?;
    summary.report.duration_ms = started.elapsed().as_millis() as i64;
    summary.listed = true;
    summary.fallback = Some(reason);
    let cursor = FollowCursor {
        instance: position.instance,
        seq: position.seq,
    };
    store.set_follow_cursor(server, Some(cursor)).await?;
    Ok(summary)
}

/// One request to the upstream and its answer as `T`; the answer's `cacheScope`, when it
/// declares one, goes into `scope` (the most private so far), read as a walk reads a page's.
/// The answer is parsed from its text straight into `T`, never through a tree of values.
async fn request<M: Method>(
    session: &Session,
    params: &M::Params,
    scope: &mut Option<CacheScope>,
) -> Result<M::Result, WalkError> {
    let method = M::NAME;
    let answer = session.request_text(method, params).await?;
    if let Some(hint) = answers::scope_hint(answer.get()) {
        *scope = (*scope).max(Some(hint));
    }
    serde_json::from_str(answer.get()).map_err(|error| {
        WalkError::Failed(format!("{method}: an answer of another shape: {error}"))
    })
}

/// Asks the upstream for the entries of `keys` of `kind`; only theirs are kept of the answer,
/// while it is parsed (an upstream answering with entries never asked costs nothing kept).
async fn entries_request(
    session: &Session,
    kind: Kind,
    keys: &[String],
    scope: &mut Option<CacheScope>,
) -> Result<KeyedAnswer, WalkError> {
    let answer = session
        .request_text(
            CatalogEntries::NAME,
            &KeysParams {
                kind,
                keys: keys.to_vec(),
            },
        )
        .await?;
    let asked: BTreeSet<&str> = keys.iter().map(String::as_str).collect();
    let read = answers::keyed_answer(answer.get(), kind, &asked).map_err(|error| {
        WalkError::Failed(format!(
            "{}: an answer of another shape: {error}",
            CatalogEntries::NAME
        ))
    })?;
    if let Some(hint) = read.cache_scope {
        *scope = (*scope).max(Some(hint));
    }
    Ok(read)
}

/// What the `catalog/entries` reads of one delta saw.
#[derive(Default)]
struct Reads {
    /// The feed seq each read reflects.
    seqs: Vec<i64>,
    /// The upstream's count of each kind read (the last read's), when it gave one.
    totals: Vec<(Kind, u64)>,
    requests: u64,
    /// Entries left out because they came through this mirror already (a loop of mirrors).
    looped: u64,
}

/// What fetching one delta's entries needs and gathers: the upstream, the cursor its answers
/// must match, the walk's bounds, what the reads saw and the scope their answers declared.
struct Fetcher<'a> {
    session: &'a Session,
    cursor: &'a FollowCursor,
    limits: WalkLimits,
    reads: Reads,
    scope: Option<CacheScope>,
}

impl Fetcher<'_> {
    /// Asks the upstream for the entries of `keys` (of any kind), stages those it lists, and
    /// returns the keys it no longer lists. Only the keys asked count: an entry of another key
    /// in the answer is left out, as a walk leaves out a duplicate.
    async fn fetch_keys(
        &mut self,
        staged: &StagedWalk,
        kind: Kind,
        keys: &[String],
    ) -> Result<Vec<String>, Fallback> {
        let (session, cursor, limits) = (self.session, self.cursor, self.limits);
        let (reads, scope) = (&mut self.reads, &mut self.scope);
        let mut gone = Vec::new();
        for chunk in keys.chunks(KEYS_PER_REQUEST) {
            let read = entries_request(session, kind, chunk, scope).await?;
            reads.requests += 1;
            if read.instance != cursor.instance {
                return Err(Fallback::walk(
                    FallbackReason::AnotherDatabase,
                    "the upstream's database is another one",
                ));
            }
            // As in a walk: no entry of ours back, the upstream in its chain, no secrets.
            let entries = read.entries.into_iter().filter_map(|entry| {
                let taken = crate::walk::take_entry(entry, Some(&cursor.instance)).ok();
                reads.looped += u64::from(taken.is_none());
                taken
            });
            let asked: BTreeSet<&str> = chunk.iter().map(String::as_str).collect();
            let mut found = BTreeSet::new();
            match kind {
                Kind::Template => {
                    let rows: Vec<_> = entries
                        .filter_map(|entry| template_row(&entry, &limits).ok().flatten())
                        .filter(|row| asked_once(&asked, &mut found, &row.uri_template))
                        .collect();
                    if !rows.is_empty() {
                        staged.add_templates(rows).await?;
                    }
                }
                Kind::Tool | Kind::Prompt => {
                    let rows: Vec<_> = entries
                        .filter_map(|entry| followed_entry_row(kind, entry, limits.max_entry_bytes))
                        .filter(|row| asked_once(&asked, &mut found, &row.name))
                        .collect();
                    if !rows.is_empty() {
                        staged.add_entries(kind, rows).await?;
                    }
                }
                Kind::Resource => {
                    let rows: Vec<_> = entries
                        .filter_map(|entry| resource_row(entry, limits.max_entry_bytes))
                        .filter(|row| asked_once(&asked, &mut found, &row.uri))
                        .collect();
                    if !rows.is_empty() {
                        staged.add_resources(rows).await?;
                    }
                }
            }
            gone.extend(chunk.iter().filter(|key| !found.contains(*key)).cloned());
            reads.seqs.push(read.seq);
            reads.totals.retain(|(read_kind, _)| *read_kind != kind);
            reads.totals.extend(read.total.map(|total| (kind, total)));
        }
        Ok(gone)
    }
}

/// True the first time an answer holds an entry of `key` when `key` was asked for; an entry
/// of a key not asked for, or of one already taken, is left out.
fn asked_once(asked: &BTreeSet<&str>, found: &mut BTreeSet<String>, key: &str) -> bool {
    asked.contains(key) && found.insert(key.to_string())
}

/// Whether entries of `kind` are mirrored here (templates ride with resources).
fn followed_kind(kind: Kind, kinds: &[Kind]) -> bool {
    match kind {
        Kind::Template => kinds.contains(&Kind::Resource),
        kind => kinds.contains(&kind),
    }
}

/// The key a row of the feed names, with its kind; `None` for a kind not mirrored here.
fn feed_key(change: &wire::Change, kinds: &[Kind]) -> Option<(Kind, String)> {
    if !followed_kind(change.entry_kind, kinds) {
        return None;
    }
    match change.entry_kind {
        Kind::Resource | Kind::Template => Some((change.entry_kind, change.uri.clone()?)),
        // A tool's or prompt's key upstream: its server there, then its name (key) there.
        Kind::Tool | Kind::Prompt => Some((
            change.entry_kind,
            format!("{}/{}", change.server, change.name.as_deref()?),
        )),
    }
}

/// Brings the server's snapshot up to date from the upstream's feed in three steps: reading
/// the feed from the cursor (`read_feed`), fetching the changed keys' entries into one delta
/// (`fetch_delta`, committed with the new cursor), and verifying the counts after it
/// (`verify_counts`). Anything it cannot account for is a `Fallback` to one full walk.
async fn follow(
    session: &Session,
    store: &Store,
    server: &str,
    limits: WalkLimits,
    kinds: &[Kind],
    cursor: &FollowCursor,
) -> Result<WalkSummary, Fallback> {
    let started = Instant::now();
    let started_at_ms = now_ms();
    let mut fetcher = Fetcher {
        session,
        cursor,
        limits,
        reads: Reads::default(),
        scope: None,
    };
    // 1. The keys changed since the cursor, page by page, by kind.
    let feed = read_feed(&mut fetcher, kinds).await?;
    let since = feed.since;
    // 2. Their entries, as the upstream's catalog shows them now.
    let delta = fetch_delta(&mut fetcher, store, server, feed.keys).await?;
    let pages = feed.pages + fetcher.reads.requests;
    // The scope goes with the snapshot as a walk's does: the more private of the old and the
    // new one while the delta is applied, then the new. An upstream whose answers declare no
    // scope leaves the stored one (its last walk's). The hints are the view's, whatever kind.
    let scopes: Vec<(Kind, CacheScope)> = fetcher
        .scope
        .map(|scope| {
            let mut touched = vec![(Kind::Resource, scope), (Kind::Template, scope)];
            touched.extend(delta.entries.iter().map(|(kind, _, _)| (*kind, scope)));
            touched
        })
        .unwrap_or_default();
    store
        .record_scopes(server, scopes.clone(), ScopeUpdate::Tighten)
        .await?;
    // The cursor moves to where the feed was listed, not to where the entries were read: a
    // change after it to a key not fetched here must still be replayed (a key fetched here
    // and changed again is fetched again then, which costs only its entry).
    let new_cursor = FollowCursor {
        instance: cursor.instance.clone(),
        seq: since,
    };
    let outcome = delta
        .staged
        .commit_delta(delta.removed, delta.templates, delta.entries, new_cursor)
        .await?;
    store
        .record_scopes(server, scopes.clone(), ScopeUpdate::Set)
        .await?;
    // 3. The snapshot must now count what the upstream counted.
    verify_counts(&fetcher.reads, since, &outcome)?;
    let mut summary = WalkSummary::empty(started_at_ms);
    summary.swap = outcome.swap;
    summary.entries = outcome.entries;
    summary.scopes = scopes;
    summary.report.pages = pages;
    summary.looped = fetcher.reads.looped;
    summary.report.duration_ms = started.elapsed().as_millis() as i64;
    Ok(summary)
}

/// What the feed named since the cursor: the changed keys by kind, the seq it was listed to
/// and how many pages that took.
struct FeedKeys {
    keys: BTreeMap<Kind, BTreeSet<String>>,
    since: i64,
    pages: u64,
}

/// Reads the feed from the cursor to its end, page by page, gathering the changed keys of the
/// kinds mirrored here. A feed page of another database, a pruned feed, a page that moves the
/// cursor back or names more changes than asked, a swap too large to list, too many keys or
/// key bytes, a feed that says more and lists nothing or never ends: each is a `Fallback`.
async fn read_feed(fetcher: &mut Fetcher<'_>, kinds: &[Kind]) -> Result<FeedKeys, Fallback> {
    let (session, cursor, limits) = (fetcher.session, fetcher.cursor, fetcher.limits);
    let (mut since, mut pages) = (cursor.seq, 0u64);
    let mut keys: BTreeMap<Kind, BTreeSet<String>> = BTreeMap::new();
    let mut key_bytes = 0usize;
    loop {
        let asked = ChangesParams::after(since, Some(MAX_CHANGES_LIMIT as u64));
        let page = request::<CatalogChanges>(session, &asked, &mut fetcher.scope).await?;
        pages += 1;
        if page.instance.as_deref() != Some(cursor.instance.as_str()) {
            return Err(Fallback::walk(
                FallbackReason::AnotherDatabase,
                "the upstream's database is another one",
            ));
        }
        if page.truncated {
            return Err(Fallback::walk(
                FallbackReason::Pruned,
                "the feed was pruned past the cursor",
            ));
        }
        // A feed page that moves the cursor back, or names more changes than asked, is not
        // the feed this follows; a feed that never ends is cut at the walk's page bound.
        let before = since;
        if page.changes.len() > MAX_CHANGES_LIMIT {
            return Err(Fallback::walk(
                FallbackReason::FeedPageTooLarge,
                format!(
                    "a feed page of {} changes, over the {MAX_CHANGES_LIMIT} asked",
                    page.changes.len()
                ),
            ));
        }
        for change in &page.changes {
            if change.seq <= since {
                return Err(Fallback::walk(
                    FallbackReason::FeedWentBack,
                    format!("the feed went back from seq {since} to {}", change.seq),
                ));
            }
            since = change.seq;
            if change.kind == ChangeKind::Truncated {
                if followed_kind(change.entry_kind, kinds) {
                    return Err(Fallback::walk(
                        FallbackReason::SwapTooLarge,
                        "a swap too large to list key by key",
                    ));
                }
                continue;
            }
            if let Some((kind, key)) = feed_key(change, kinds) {
                let length = key.len();
                if keys.entry(kind).or_default().insert(key) {
                    key_bytes += length;
                }
            }
        }
        if keys.values().map(BTreeSet::len).sum::<usize>() > MAX_DELTA_KEYS {
            return Err(Fallback::walk(
                FallbackReason::TooManyKeys,
                format!("more than {MAX_DELTA_KEYS} keys changed"),
            ));
        }
        if key_bytes > MAX_DELTA_KEY_BYTES {
            return Err(Fallback::walk(
                FallbackReason::KeysTooLarge,
                format!("the changed keys take more than {MAX_DELTA_KEY_BYTES} bytes"),
            ));
        }
        if !page.more {
            since = since.max(page.latest_seq);
            break;
        }
        if since == before {
            return Err(Fallback::walk(
                FallbackReason::FeedStuck,
                format!("the feed says more after seq {since} and lists nothing"),
            ));
        }
        if pages >= limits.max_pages {
            return Err(Fallback::walk(
                FallbackReason::FeedEndless,
                format!("the feed did not end within {} pages", limits.max_pages),
            ));
        }
    }
    Ok(FeedKeys { keys, since, pages })
}

/// A delta's entries fetched and staged, ready to commit with the cursor.
struct FetchedDelta {
    /// The walk the resources and templates are staged in.
    staged: StagedWalk,
    /// The resource keys the upstream no longer lists.
    removed: Vec<String>,
    /// The template keys the feed named, when it named any.
    templates: Option<Vec<String>>,
    /// Each touched kind of tools and prompts, its walk and the keys the feed named.
    entries: Vec<(Kind, StagedWalk, Vec<String>)>,
}

/// Fetches the entries of the keys the feed named, as the upstream's catalog shows them now,
/// and stages them. Tools and prompts are staged by walks of their own (a kind's staging is
/// keyed by name alone).
async fn fetch_delta(
    fetcher: &mut Fetcher<'_>,
    store: &Store,
    server: &str,
    mut keys: BTreeMap<Kind, BTreeSet<String>>,
) -> Result<FetchedDelta, Fallback> {
    let mut take = |kind: Kind| -> Vec<String> {
        keys.remove(&kind)
            .map(|keys| keys.into_iter().collect())
            .unwrap_or_default()
    };
    let (resource_keys, template_keys) = (take(Kind::Resource), take(Kind::Template));
    let entry_keys: Vec<(Kind, Vec<String>)> = Kind::ENTRY_KINDS
        .iter()
        .map(|kind| (*kind, take(*kind)))
        .filter(|(_, keys)| !keys.is_empty())
        .collect();
    let staged = store.begin_delta(server);
    let removed = fetcher
        .fetch_keys(&staged, Kind::Resource, &resource_keys)
        .await?;
    if !template_keys.is_empty() {
        fetcher
            .fetch_keys(&staged, Kind::Template, &template_keys)
            .await?;
    }
    let mut entries = Vec::new();
    for (kind, keys) in entry_keys {
        let entry_staged = store.begin_delta(server);
        fetcher.fetch_keys(&entry_staged, kind, &keys).await?;
        entries.push((kind, entry_staged, keys));
    }
    Ok(FetchedDelta {
        staged,
        removed,
        templates: (!template_keys.is_empty()).then_some(template_keys),
        entries,
    })
}

/// After the delta the snapshot must count what the upstream counted, when every read saw the
/// catalog exactly as the feed was listed (`since`; else a count could differ by a later
/// change).
fn verify_counts(reads: &Reads, since: i64, outcome: &DeltaOutcome) -> Result<(), Fallback> {
    if !reads.seqs.iter().all(|seq| *seq == since) {
        return Ok(());
    }
    for (kind, total) in &reads.totals {
        let held = match kind {
            Kind::Template => outcome.swap.templates,
            Kind::Resource => outcome.swap.resources,
            entry_kind @ (Kind::Tool | Kind::Prompt) => outcome
                .entries
                .iter()
                .find(|(swapped, _)| swapped == entry_kind)
                .map_or(0, |(_, swap)| swap.entries),
        };
        if held != *total {
            return Err(Fallback::walk(
                FallbackReason::CountsDiffer,
                format!(
                    "after the delta this mirror holds {held} {kind}s and the upstream {total}"
                ),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_keys_asked_are_taken_each_once() {
        let asked: BTreeSet<&str> = ["a", "b"].into_iter().collect();
        let mut found = BTreeSet::new();
        let answered = ["a", "x", "b", "a", "y"];
        let taken: Vec<&str> = answered
            .into_iter()
            .filter(|key| asked_once(&asked, &mut found, key))
            .collect();
        assert_eq!(taken, ["a", "b"]);
    }
}
