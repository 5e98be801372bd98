//! The writer's tests, on a real database file: a small swap's full scans, the full-text backlog, and first loads in flight.

use std::ops::AsyncFnMut;
use std::time::{Duration, Instant};

use super::full_text::BULK_INDEX_MIN_ROWS;
use super::staged::WalkToCommit;
use super::*;
use crate::protocol::TransportKind;
use crate::store::{schema, SearchRequest, ServerEntry, Store};

mod first_load;
mod reload;
mod wal;

fn configured(names: &[&str]) -> ServerSync {
    ServerSync {
        configured: names
            .iter()
            .map(|name| ServerEntry {
                name: name.to_string(),
                priority: 0,
                transport: TransportKind::Stdio,
                read_cache_bytes: None,
                history: false,
            })
            .collect(),
        untouched: Vec::new(),
        removed: RemovedServers::Drop,
        history_bounds: Default::default(),
    }
}

/// Resource `index` of `server`, its description naming `word`.
fn resource(server: &str, index: usize, word: &str) -> ResourceRow {
    let uri = format!("test://{server}/{index:06}");
    let name = format!("{server}-{index}");
    let description = format!("{word} document number {index}");
    let raw = serde_json::json!({"uri": uri, "name": name, "description": description}).to_string();
    ResourceRow {
        hash: crate::store::entry::content_hash(raw.as_bytes()),
        uri,
        name,
        title: None,
        description: Some(description),
        mime_type: None,
        size: None,
        annotations: None,
        icons: None,
        meta: None,
        raw,
        oversized: false,
    }
}

fn resources(server: &str, indexes: std::ops::Range<usize>, word: &str) -> Vec<ResourceRow> {
    indexes.map(|index| resource(server, index, word)).collect()
}

/// A writer connection on a real database file, with the servers recorded.
fn writer_connection(path: &std::path::Path, servers: &[&str]) -> Connection {
    let mut connection = schema::open_writer(path).expect("open the database");
    connection.execute_batch(STAGING_SCHEMA).expect("staging");
    super::history::register_digest(&connection).expect("history_digest");
    sync_servers(&mut connection, &configured(servers)).expect("record the servers");
    connection
}

/// A store on `path` with `servers` configured.
pub(super) async fn open_store(path: &std::path::Path, servers: &[&str]) -> Store {
    let store = Store::open(path).expect("open");
    store
        .apply_servers(configured(servers))
        .await
        .expect("servers");
    store
}

/// Stages `rows` in pages of 100, in the writer's batches (`wal.rs`), all committed.
fn stage_pages(
    connection: &mut Connection,
    walk_id: u64,
    counts: &mut StagedCounts,
    rows: &[ResourceRow],
) {
    let mut wal = WriteAheadLog::take_over(connection, WAL_LIMIT_BYTES);
    for page in rows.chunks(100) {
        stage_page(&mut wal, connection, walk_id, counts, page);
    }
    wal.close(connection);
}

/// Stages one page as the writer does: into its open batch.
fn stage_page(
    wal: &mut WriteAheadLog,
    connection: &mut Connection,
    walk_id: u64,
    counts: &mut StagedCounts,
    page: &[ResourceRow],
) {
    let bytes = page.iter().map(|row| row.raw.len()).sum();
    wal.stage_page(connection, walk_id, bytes).expect("a batch");
    stage_resources(connection, walk_id, counts, page).expect("stage");
}

/// Stages `rows` as one walk of `server` and swaps it in, as the writer thread does.
fn walk(
    connection: &mut Connection,
    walk_id: u64,
    server: &str,
    rows: &[ResourceRow],
    behind: &AtomicU64,
) -> SwapOutcome {
    let mut counts = StagedCounts::against(connection, server).expect("counts");
    stage_pages(connection, walk_id, &mut counts, rows);
    let report = WalkReport::default();
    let commit = WalkToCommit {
        walk_id,
        counts: &counts,
        server,
        report: &report,
        full_text_behind: behind,
    };
    let Committed::Swapped(outcome, _) = commit_walk(connection, &commit).expect("swap") else {
        panic!("a walk committed on a bare connection is swapped in, not reloaded");
    };
    discard_staging(connection, walk_id);
    outcome
}

fn full_text_matches(connection: &Connection, query: &str) -> i64 {
    connection
        .query_row(
            "SELECT count(*) FROM resources_fts WHERE resources_fts MATCH ?1",
            [query],
            |row| row.get(0),
        )
        .expect("match")
}

/// FTS5's own check that the index holds exactly the text of the content table's rows.
fn assert_full_text_is_exact(connection: &Connection) {
    connection
        .execute(
            "INSERT INTO resources_fts (resources_fts, rank) VALUES ('integrity-check', 1)",
            [],
        )
        .expect("the full-text index matches the resources exactly");
}

/// Statements that read a range of row ids of one server (or of the servers) are driven by
/// the ids: SQLite's own choice was the servers' index, which visits every row of the server
/// for each range (a million-row first load's backlog took 12.5 s of the writer, not 3).
#[test]
fn a_range_of_row_ids_is_read_by_the_ids() {
    let directory = tempfile::tempdir().expect("tempdir");
    let connection = writer_connection(&directory.path().join("catalog.db"), &["a", "b"]);
    for sql in [
        super::full_text::BACKLOG_BATCH_SQL,
        super::pending::FIRST_LOAD_FEED_SQL,
        super::history::RESOURCES_AFTER_SQL,
    ] {
        let mut statement = connection
            .prepare(&format!("EXPLAIN QUERY PLAN {sql}"))
            .expect("plan");
        let count = statement.parameter_count();
        let plan: Vec<String> = statement
            .query_map(rusqlite::params_from_iter((0..count).map(|_| 1)), |row| {
                row.get::<_, String>(3)
            })
            .expect("query")
            .collect::<Result<_, _>>()
            .expect("rows");
        // Each step on the resources table (`r` or by name) looks rows up by id.
        let on_resources: Vec<&String> = plan
            .iter()
            .filter(|step| matches!(step.split(' ').nth(1), Some("r" | "resources")))
            .collect();
        assert!(!on_resources.is_empty(), "{sql}: {plan:?}");
        assert!(
            on_resources
                .iter()
                .all(|step| step.contains("USING INTEGER PRIMARY KEY")),
            "{sql}: {plan:?}"
        );
    }
}

#[test]
fn a_small_rewalk_beside_a_large_snapshot_never_full_scans() {
    let directory = tempfile::tempdir().expect("tempdir");
    let path = directory.path().join("catalog.db");
    let mut connection = writer_connection(&path, &["large", "small"]);
    let behind = AtomicU64::new(0);
    let large = resources("large", 0..20_000, "alpha");
    walk(&mut connection, 1, "large", &large, &behind);
    let small = resources("small", 0..100, "beta");
    walk(&mut connection, 2, "small", &small, &behind);

    // The counter sees a full scan when there is one.
    full_scans::take();
    let _: i64 = query_one(
        &connection,
        "SELECT count(*) FROM resources WHERE name LIKE '%large%'",
        [],
    )
    .expect("scan");
    assert!(
        full_scans::take() >= 20_000,
        "the counter missed a full scan"
    );

    // A re-walk that changes nothing, then one that adds, removes and changes a few rows:
    // neither swap steps through more rows than the small server has.
    let outcome = walk(&mut connection, 3, "small", &small, &behind);
    assert_eq!(outcome.added + outcome.removed + outcome.changed, 0);
    let steps = full_scans::take();
    assert!(
        steps < 1_000,
        "a no-change swap took {steps} full-scan steps"
    );
    let mut changed = small[10..].to_vec();
    changed[0] = resource("small", 10, "gamma");
    changed.push(resource("small", 100, "gamma"));
    let outcome = walk(&mut connection, 4, "small", &changed, &behind);
    assert_eq!(
        (outcome.added, outcome.removed, outcome.changed),
        (1, 10, 1)
    );
    let steps = full_scans::take();
    assert!(steps < 1_000, "a small swap took {steps} full-scan steps");
}

#[test]
fn a_large_swap_leaves_its_full_text_to_the_backlog_and_rows_changed_meanwhile_stay_exact() {
    let directory = tempfile::tempdir().expect("tempdir");
    let path = directory.path().join("catalog.db");
    let mut connection = writer_connection(&path, &["large", "other"]);
    let behind = AtomicU64::new(0);
    walk(
        &mut connection,
        1,
        "other",
        &resources("other", 0..50, "alpha"),
        &behind,
    );
    assert_eq!(
        behind.load(Ordering::Acquire),
        0,
        "a small load is indexed inline"
    );
    assert_eq!(full_text_matches(&connection, "alpha"), 50);

    let large = resources("large", 0..20_000, "alpha");
    let outcome = walk(&mut connection, 2, "large", &large, &behind);
    assert_eq!(outcome.added, 20_000);
    assert_eq!(behind.load(Ordering::Acquire), 20_000);
    assert_eq!(full_text_backlog(&connection).expect("backlog"), 20_000);
    // Committed and visible, but not in the full-text index yet; the note says so.
    assert_eq!(full_text_matches(&connection, "alpha"), 50);
    let reader = crate::store::Reader::open_file(&path).expect("reader");
    let alpha = SearchRequest {
        raw: true,
        server: Some("large".into()),
        ..SearchRequest::new("alpha", 10)
    };
    let page = reader.search(&alpha).expect("search");
    assert!(page.hits.is_empty(), "{:?}", page.hits);
    let note = page.note.expect("a note while behind");
    assert!(note.contains("20000 resources"), "{note}");

    // Before a batch ran: a row changes, one goes, one comes (a small, inline swap). The
    // index must not be told to forget text it never had.
    let mut next = large.clone();
    next[5] = resource("large", 5, "omega");
    next.remove(6);
    next.push(resource("large", 20_000, "omega"));
    let outcome = walk(&mut connection, 3, "large", &next, &behind);
    assert_eq!((outcome.added, outcome.removed, outcome.changed), (1, 1, 1));

    let mut batches = 0;
    while index_full_text_batch(&mut connection, &behind) {
        batches += 1;
        assert!(batches < 100, "the backlog does not shrink");
    }
    assert!(batches >= 3, "20,000 ids took {batches} batches");
    assert_eq!(behind.load(Ordering::Acquire), 0);
    assert_eq!(reader.search(&alpha).expect("search").note, None);
    assert_full_text_is_exact(&connection);
    assert_eq!(full_text_matches(&connection, "omega"), 2);
    assert_eq!(full_text_matches(&connection, "alpha"), 50 + 19_998);

    // A swap that replaces most of the catalog empties the index and lists every row.
    let replaced = resources("large", 0..20_000, "delta");
    let outcome = walk(&mut connection, 4, "large", &replaced, &behind);
    assert!(outcome.changed >= BULK_INDEX_MIN_ROWS, "{outcome:?}");
    assert!(behind.load(Ordering::Acquire) >= 20_050);
    assert_eq!(full_text_matches(&connection, "alpha"), 0);
    while index_full_text_batch(&mut connection, &behind) {}
    assert_full_text_is_exact(&connection);
    assert_eq!(full_text_matches(&connection, "delta"), 20_000);
    assert_eq!(full_text_matches(&connection, "alpha"), 50);
}

/// Polls `ready` until it holds, failing after `limit`.
async fn wait_until(what: &str, limit: Duration, mut ready: impl AsyncFnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !ready().await {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backlog_left_by_a_crash_is_resumed_at_start() {
    let directory = tempfile::tempdir().expect("tempdir");
    let path = directory.path().join("catalog.db");
    {
        // The swap commits and the process dies before any batch: the backlog is on disk.
        let mut connection = writer_connection(&path, &["large"]);
        let behind = AtomicU64::new(0);
        let large = resources("large", 0..15_000, "alpha");
        walk(&mut connection, 1, "large", &large, &behind);
        assert_eq!(behind.load(Ordering::Acquire), 15_000);
    }
    let store = Store::open(&path).expect("reopen");
    let raw = SearchRequest {
        raw: true,
        ..SearchRequest::new("\"number 14999\"", 10)
    };
    wait_until(
        "the backlog to be indexed",
        Duration::from_secs(120),
        async || {
            let found = {
                let raw = raw.clone();
                store.read(move |reader| reader.search(&raw)).await
            }
            .expect("search");
            if found.hits.is_empty() {
                // Not found yet: only while the note says the index is behind.
                assert!(found.note.is_some(), "a silent miss");
                return false;
            }
            found.note.is_none()
        },
    )
    .await;
    store.close().await;
    let connection = schema::open_writer(&path).expect("open");
    assert_eq!(full_text_backlog(&connection).expect("backlog"), 0);
    assert_full_text_is_exact(&connection);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_servers_swap_commits_while_a_large_first_load_is_indexed() {
    let directory = tempfile::tempdir().expect("tempdir");
    let path = directory.path().join("catalog.db");
    let store = open_store(&path, &["large", "small"]).await;
    let walk = store.begin_walk("large");
    for page in resources("large", 0..100_000, "alpha").chunks(1_000) {
        walk.add_resources(page.to_vec()).await.expect("stage");
    }
    let outcome = walk.commit(WalkReport::default()).await.expect("commit");
    assert_eq!(outcome.added, 100_000);
    assert!(
        store.full_text_note().is_some(),
        "the load's text is left to the backlog"
    );

    // The other server's walk and swap go through the writer between two batches of the
    // backlog: its commit is answered while most of the load is still being indexed.
    let walk = store.begin_walk("small");
    walk.add_resources(resources("small", 0..10, "beta"))
        .await
        .expect("stage");
    let outcome = walk.commit(WalkReport::default()).await.expect("commit");
    assert_eq!(outcome.added, 10);
    let behind = store.full_text_behind.load(Ordering::Acquire);
    assert!(
        behind > 50_000,
        "the small swap waited for the load's indexing: {behind} ids left"
    );
    let small = SearchRequest {
        raw: true,
        ..SearchRequest::new("beta", 20)
    };
    let hits = store
        .read(move |reader| reader.search(&small))
        .await
        .expect("search")
        .hits;
    assert_eq!(hits.len(), 10, "a small swap is indexed in its own commit");

    wait_until(
        "the backlog to be indexed",
        Duration::from_secs(300),
        async || store.full_text_note().is_none(),
    )
    .await;
    store.close().await;
}

/// Resources whose server id no server has: a first load's pending rows.
fn pending_rows(path: &std::path::Path) -> i64 {
    let connection = schema::open_reader(path).expect("reader");
    connection
        .query_row(
            "SELECT (SELECT count(*) FROM resources WHERE server_id NOT IN (SELECT id FROM servers))
                    + (SELECT count(*) FROM pending_loads)",
            [],
            |row| row.get(0),
        )
        .expect("count pending rows")
}

async fn resources_of(store: &Store, server: &str) -> u64 {
    let status = store.read(|reader| reader.status()).await.expect("status");
    status
        .iter()
        .find(|row| row.name == server)
        .map_or(0, |row| row.resources)
}

/// A resource's kept versions, oldest first: (digest, body id, first seen, last seen).
fn versions_of(connection: &Connection, uri: &str) -> Vec<(String, i64, i64, Option<i64>)> {
    let mut statement = connection
        .prepare(
            "SELECT digest, body_id, first_seen, last_seen FROM history_versions
             WHERE kind = ?1 AND key = ?2 ORDER BY id",
        )
        .expect("prepare");
    let rows = statement
        .query_map(params![Kind::Resource, uri], |row| {
            Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?))
        })
        .expect("query");
    rows.collect::<Result<_, _>>().expect("rows")
}

/// A swap records its resource versions set-based (`history::record_pending`): in one swap,
/// entries flip back to an old body (its body row reused), one is removed and one added; a
/// later swap re-adds the removed one with an old body, and one at a lowered bound prunes
/// each entry to its newest versions, never the accepted one, keeping a body a new version
/// points at again. Digests are `body_digest`'s (XXH3-128 of the text, in SQL).
#[test]
fn a_set_based_swap_records_flip_flops_removals_and_prunes_as_the_hooks_did() {
    let directory = tempfile::tempdir().expect("tempdir");
    let connection = &mut writer_connection(&directory.path().join("catalog.db"), &["h"]);
    connection
        .execute(
            "UPDATE servers SET history_resources = 1 WHERE name = 'h'",
            [],
        )
        .expect("history on");
    let behind = AtomicU64::new(0);
    let pause = || std::thread::sleep(Duration::from_millis(3));
    let alpha = resources("h", 0..5, "alpha");
    let beta = resources("h", 0..5, "beta");
    let uri = |index: usize| alpha[index].uri.clone();
    let digest =
        |row: &ResourceRow| format!("{:032x}", xxhash_rust::xxh3::xxh3_128(row.raw.as_bytes()));
    walk(connection, 1, "h", &alpha, &behind);
    pause();
    // Every row changed: each gets its old text seeded (when the first load recorded none),
    // then its new one.
    walk(connection, 2, "h", &beta, &behind);
    pause();
    // Rows 0 and 1 flip back, 2 and 3 stay, 4 is removed, 5 is added.
    let third = vec![
        alpha[0].clone(),
        alpha[1].clone(),
        beta[2].clone(),
        beta[3].clone(),
        resource("h", 5, "alpha"),
    ];
    let outcome = walk(connection, 3, "h", &third, &behind);
    assert_eq!((outcome.added, outcome.removed, outcome.changed), (1, 1, 2));
    pause();
    let mut fourth = third.clone();
    fourth.push(alpha[4].clone());
    assert_eq!(walk(connection, 4, "h", &fourth, &behind).added, 1);

    for index in [0, 1] {
        let versions = versions_of(connection, &uri(index));
        let digests: Vec<&str> = versions.iter().map(|v| v.0.as_str()).collect();
        assert_eq!(
            digests,
            [
                digest(&alpha[index]),
                digest(&beta[index]),
                digest(&alpha[index])
            ],
            "{versions:?}"
        );
        // The flip-flop points at the body kept for the first version.
        assert_eq!(versions[2].1, versions[0].1);
        assert_ne!(versions[1].1, versions[0].1);
        // Each version closed when the next one was first seen; the newest is open.
        assert_eq!(versions[0].3, Some(versions[1].2));
        assert_eq!(versions[1].3, Some(versions[2].2));
        assert_eq!(versions[2].3, None);
        assert!(versions[1].2 < versions[2].2);
    }
    let unchanged = versions_of(connection, &uri(2));
    assert_eq!(unchanged.len(), 2, "{unchanged:?}");
    assert_eq!(unchanged[1].0, digest(&beta[2]));
    assert_eq!(unchanged[1].3, None);
    // Removed at the third swap, re-added with its first text at the fourth.
    let readded = versions_of(connection, &uri(4));
    assert_eq!(readded.len(), 3, "{readded:?}");
    assert_eq!(readded[2].0, digest(&alpha[4]));
    assert_eq!(readded[2].1, readded[0].1);
    assert_eq!(readded[1].3, Some(versions_of(connection, &uri(0))[2].2));
    assert!(readded[1].3 < Some(readded[2].2));
    assert_eq!(readded[2].3, None);
    let added = versions_of(connection, &resource("h", 5, "alpha").uri);
    assert_eq!(added.len(), 1);
    assert_eq!(added[0].0, digest(&resource("h", 5, "alpha")));
    // Bodies are the texts, sized in bytes, and their total is kept.
    let (body, bytes): (String, i64) = connection
        .query_row(
            "SELECT body, bytes FROM history_bodies WHERE id = ?1",
            [versions_of(connection, &uri(0))[0].1],
            |row| Ok((row.get(0)?, row.get(1)?)),
        )
        .expect("body");
    assert_eq!(
        (body.as_str(), bytes),
        (alpha[0].raw.as_str(), alpha[0].raw.len() as i64)
    );
    let (total, summed): (i64, i64) = connection
        .query_row(
            "SELECT total_bytes, (SELECT sum(bytes) FROM history_bodies) FROM history_settings",
            [],
            |row| Ok((row.get(0)?, row.get(1)?)),
        )
        .expect("total");
    assert_eq!(total, summed);

    // Row 1's first text is accepted; at two versions a key, every row flips to beta again.
    connection
        .execute(
            "INSERT INTO accepted_entries (server_id, kind, name, raw, accepted_at)
             VALUES ((SELECT id FROM servers WHERE name = 'h'), ?1, ?2, ?3, 0)",
            params![Kind::Resource, uri(1), alpha[1].raw],
        )
        .expect("accept");
    connection
        .execute("UPDATE history_settings SET versions_per_key = 2", [])
        .expect("bound");
    let before = versions_of(connection, &uri(0));
    pause();
    let mut fifth = fourth.clone();
    fifth[0] = beta[0].clone();
    fifth[1] = beta[1].clone();
    assert_eq!(walk(connection, 5, "h", &fifth, &behind).changed, 2);
    let pruned = versions_of(connection, &uri(0));
    assert_eq!(pruned.len(), 2, "{pruned:?}");
    assert_eq!(
        pruned[0],
        (before[2].0.clone(), before[2].1, before[2].2, pruned[0].3)
    );
    assert!(pruned[0].3.is_some());
    // The new version reuses the body of the pruned one of the same text, which stays.
    assert_eq!(pruned[1].0, digest(&beta[0]));
    assert_eq!(pruned[1].1, before[1].1);
    let body_kept: bool = connection
        .query_row(
            "SELECT EXISTS (SELECT 1 FROM history_bodies WHERE id = ?1)",
            [before[1].1],
            |row| row.get(0),
        )
        .expect("body kept");
    assert!(body_kept);
    // The accepted version stays beyond the bound.
    let accepted = versions_of(connection, &uri(1));
    let digests: Vec<&str> = accepted.iter().map(|v| v.0.as_str()).collect();
    assert_eq!(
        digests,
        [digest(&alpha[1]), digest(&alpha[1]), digest(&beta[1])],
        "{accepted:?}"
    );
}
