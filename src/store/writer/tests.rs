//! The writer's tests, on a real database file: a small swap's full scans, the full-text backlog, and first loads in flight.

use std::ops::AsyncFnMut;
use std::time::{Duration, Instant};

use super::full_text::BULK_INDEX_MIN_ROWS;
use super::*;
use crate::protocol::TransportKind;
use crate::store::{schema, SearchRequest, ServerEntry, Store};

fn configured(names: &[&str]) -> ServerSync {
    ServerSync {
        configured: names
            .iter()
            .map(|name| ServerEntry {
                name: name.to_string(),
                priority: 0,
                transport: TransportKind::Stdio,
                read_cache_bytes: None,
            })
            .collect(),
        untouched: Vec::new(),
        removed: RemovedServers::Drop,
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
    let (outcome, _) =
        commit_walk(connection, walk_id, &counts, server, &report, behind).expect("swap");
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

fn foreign_key_violations(path: &std::path::Path) -> i64 {
    let connection = schema::open_reader(path).expect("reader");
    let mut statement = connection
        .prepare("PRAGMA foreign_key_check")
        .expect("check");
    let rows = statement.query_map([], |_| Ok(())).expect("rows");
    rows.count() as i64
}

async fn resources_of(store: &Store, server: &str) -> u64 {
    let status = store.read(|reader| reader.status()).await.expect("status");
    status
        .iter()
        .find(|row| row.name == server)
        .map_or(0, |row| row.resources)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_first_load_in_flight_is_seen_by_no_reader_and_holds_up_no_other_commit() {
    let directory = tempfile::tempdir().expect("tempdir");
    let path = directory.path().join("catalog.db");
    let store = open_store(&path, &["large", "small"]).await;
    let large = resources("large", 0..100_000, "alpha");
    let walk = store.begin_walk("large");
    for page in large[..50_000].chunks(1_000) {
        walk.add_resources(page.to_vec()).await.expect("stage");
    }

    // The other server's walk is queued after half the load's pages and commits before
    // the load does; when it is answered, those pages are in `resources`, pending.
    let small = store.begin_walk("small");
    small
        .add_resources(resources("small", 0..10, "beta"))
        .await
        .expect("stage");
    let outcome = small.commit(WalkReport::default()).await.expect("commit");
    assert_eq!(outcome.added, 10);
    assert_eq!(
        pending_rows(&path),
        50_001,
        "the load's pages and its pending row"
    );

    // No reader sees any of them.
    assert_eq!(resources_of(&store, "large").await, 0);
    assert_eq!(resources_of(&store, "small").await, 10);
    let (listed, more) = store
        .read(|reader| reader.list_resources(None, 1_000))
        .await
        .expect("list");
    assert!(!more);
    assert_eq!(listed.len(), 10);
    assert!(listed.iter().all(|row| row.server == "small"));
    assert_eq!(
        store
            .read(|reader| reader.merged_resource_count())
            .await
            .expect("count"),
        10
    );
    let alpha = SearchRequest {
        raw: true,
        ..SearchRequest::new("alpha", 20)
    };
    let hits = {
        let alpha = alpha.clone();
        store.read(move |reader| reader.search(&alpha)).await
    }
    .expect("search")
    .hits;
    assert!(hits.is_empty(), "a search found a pending row");
    let uri = large[0].uri.clone();
    assert!(store
        .read(move |reader| reader.read_target(&uri))
        .await
        .expect("read target")
        .is_none());

    // The server's tools, swapped mid-load under its old id, move with it at the swap.
    let tool = crate::store::EntryRow {
        name: "lookup".to_string(),
        title: None,
        description: Some("finds things".to_string()),
        inputs: String::new(),
        raw: serde_json::json!({"name": "lookup", "inputSchema": {"type": "object"}}).to_string(),
        hash: 1,
        oversized: false,
    };
    store
        .swap_entries("large", Kind::Tool, vec![tool])
        .await
        .expect("swap tools");

    // The rest of the pages, then the swap: everything at once, nothing left pending.
    for page in large[50_000..].chunks(1_000) {
        walk.add_resources(page.to_vec()).await.expect("stage");
    }
    let outcome = walk.commit(WalkReport::default()).await.expect("commit");
    assert_eq!(outcome.added, 100_000);
    assert_eq!(outcome.resources, 100_000);
    assert_eq!(pending_rows(&path), 0);
    assert_eq!(foreign_key_violations(&path), 0);
    assert_eq!(resources_of(&store, "large").await, 100_000);
    assert_eq!(
        store
            .read(|reader| reader.merged_resource_count())
            .await
            .expect("count"),
        100_010
    );
    let (listed, _) = store
        .read(|reader| reader.list_resources(None, 20))
        .await
        .expect("list");
    assert!(listed.iter().all(|row| row.server == "large"));
    let (tools, _) = store
        .read(|reader| reader.list_entries(Kind::Tool, Some("large"), None, 10))
        .await
        .expect("tools");
    assert_eq!(tools.len(), 1, "the server's tools were lost at the swap");
    assert_eq!(tools[0].name, "lookup");
    wait_until(
        "the backlog to be indexed",
        Duration::from_secs(300),
        async || store.full_text_note().is_none(),
    )
    .await;
    let hits = store
        .read(move |reader| reader.search(&alpha))
        .await
        .expect("search")
        .hits;
    assert_eq!(hits.len(), 20);
    store.close().await;
    let connection = schema::open_writer(&path).expect("writer");
    assert_full_text_is_exact(&connection);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_first_load_that_fails_or_is_dropped_leaves_no_rows() {
    let directory = tempfile::tempdir().expect("tempdir");
    let path = directory.path().join("catalog.db");
    let store = open_store(&path, &["large"]).await;
    // A walk dropped mid-load (failed or superseded: the session drops it).
    let walk = store.begin_walk("large");
    for page in resources("large", 0..20_000, "alpha").chunks(1_000) {
        walk.add_resources(page.to_vec()).await.expect("stage");
    }
    drop(walk);
    // A walk whose server a reload removed mid-load: its commit fails.
    let walk = store.begin_walk("large");
    for page in resources("large", 0..5_000, "alpha").chunks(1_000) {
        walk.add_resources(page.to_vec()).await.expect("stage");
    }
    store
        .apply_servers(configured(&[]))
        .await
        .expect("drop the server");
    let failed = walk.commit(WalkReport::default()).await;
    assert!(
        failed.is_err(),
        "a load of a server removed meanwhile committed"
    );
    store
        .apply_servers(configured(&["large"]))
        .await
        .expect("record it again");
    wait_until(
        "the pending rows to be discarded",
        Duration::from_secs(120),
        async || pending_rows(&path) == 0,
    )
    .await;
    assert_eq!(resources_of(&store, "large").await, 0);
    assert_eq!(
        store
            .read(|reader| reader.merged_resource_count())
            .await
            .expect("count"),
        0
    );

    // The next walk loads everything, exactly.
    let walk = store.begin_walk("large");
    for page in resources("large", 0..3_000, "alpha").chunks(1_000) {
        walk.add_resources(page.to_vec()).await.expect("stage");
    }
    let outcome = walk.commit(WalkReport::default()).await.expect("commit");
    assert_eq!(outcome.added, 3_000);
    assert_eq!(resources_of(&store, "large").await, 3_000);
    assert_eq!(foreign_key_violations(&path), 0);
    store.close().await;
    let connection = schema::open_writer(&path).expect("writer");
    assert_full_text_is_exact(&connection);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pending_rows_left_by_a_crash_are_discarded_at_start_and_the_walk_repeats() {
    let directory = tempfile::tempdir().expect("tempdir");
    let path = directory.path().join("catalog.db");
    {
        // Half a first load is staged, then the process dies: the pages are on disk.
        let mut connection = writer_connection(&path, &["large", "small"]);
        walk(
            &mut connection,
            1,
            "small",
            &resources("small", 0..10, "beta"),
            &AtomicU64::new(0),
        );
        let mut counts = StagedCounts::against(&connection, "large").expect("counts");
        let rows = resources("large", 0..12_000, "alpha");
        stage_pages(&mut connection, 2, &mut counts, &rows);
    }
    assert_eq!(pending_rows(&path), 12_001);
    let store = Store::open(&path).expect("open");
    assert_eq!(resources_of(&store, "large").await, 0);
    assert_eq!(
        store
            .read(|reader| reader.merged_resource_count())
            .await
            .expect("count"),
        10
    );
    wait_until(
        "the pending rows to be discarded",
        Duration::from_secs(120),
        async || pending_rows(&path) == 0,
    )
    .await;
    let walk = store.begin_walk("large");
    for page in resources("large", 0..12_000, "alpha").chunks(1_000) {
        walk.add_resources(page.to_vec()).await.expect("stage");
    }
    let outcome = walk.commit(WalkReport::default()).await.expect("commit");
    assert_eq!(outcome.added, 12_000);
    assert_eq!(resources_of(&store, "large").await, 12_000);
    assert_eq!(
        store
            .read(|reader| reader.merged_resource_count())
            .await
            .expect("count"),
        12_010
    );
    assert_eq!(foreign_key_violations(&path), 0);
    wait_until(
        "the backlog to be indexed",
        Duration::from_secs(300),
        async || store.full_text_note().is_none(),
    )
    .await;
    store.close().await;
    let connection = schema::open_writer(&path).expect("writer");
    assert_full_text_is_exact(&connection);
}

fn file_bytes(path: &std::path::Path) -> u64 {
    std::fs::metadata(path)
        .map(|found| found.len())
        .unwrap_or(0)
}

fn log_path(path: &std::path::Path) -> std::path::PathBuf {
    path.with_extension("db-wal")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_first_load_is_copied_from_the_log_only_once_it_is_committed() {
    let directory = tempfile::tempdir().expect("tempdir");
    let path = directory.path().join("catalog.db");
    let store = open_store(&path, &["large"]).await;
    store.ping_writer().await.expect("ping");
    let before = file_bytes(&path);
    let walk = store.begin_walk("large");
    for page in resources("large", 0..20_000, "alpha").chunks(100) {
        walk.add_resources(page.to_vec()).await.expect("stage");
    }
    // A ping commits the open batch: every page is in the log, none in the database file.
    store.ping_writer().await.expect("ping");
    assert_eq!(pending_rows(&path), 20_001);
    assert!(
        file_bytes(&log_path(&path)) > 4 << 20,
        "the load is in the log"
    );
    assert!(
        file_bytes(&path) < before + (1 << 20),
        "a checkpoint ran during the load: {} -> {} bytes",
        before,
        file_bytes(&path)
    );
    let outcome = walk.commit(WalkReport::default()).await.expect("commit");
    assert_eq!(outcome.added, 20_000);
    wait_until("the log copied back", Duration::from_secs(30), async || {
        file_bytes(&path) > before + (4 << 20)
    })
    .await;
    assert_eq!(resources_of(&store, "large").await, 20_000);
    // A clean stop leaves everything in the database file.
    store.close().await;
    assert_eq!(file_bytes(&log_path(&path)), 0, "the log outlived the stop");
}

#[test]
fn the_log_stays_bounded_during_a_load_that_reaches_its_limit() {
    let directory = tempfile::tempdir().expect("tempdir");
    let path = directory.path().join("catalog.db");
    let mut connection = writer_connection(&path, &["large"]);
    let before = file_bytes(&path);
    let mut counts = StagedCounts::against(&connection, "large").expect("counts");
    let mut wal = WriteAheadLog::take_over(&connection, 1 << 20);
    let mut largest_log = 0;
    for page in resources("large", 0..20_000, "alpha").chunks(100) {
        stage_page(&mut wal, &mut connection, 1, &mut counts, page);
        largest_log = largest_log.max(file_bytes(&log_path(&path)));
    }
    wal.commit_batch(&connection).expect("commit");
    // Still pending, so only the limit can have copied the log back (the checkpointer from
    // half of it, the writer at it), and the log restarted each time.
    assert_eq!(pending_rows(&path), 20_001);
    assert!(
        file_bytes(&path) > before + (4 << 20),
        "the database file did not grow: {} -> {} bytes",
        before,
        file_bytes(&path)
    );
    assert!(
        largest_log < 4 << 20,
        "the log outgrew its limit: {largest_log} bytes"
    );
    wal.close(&connection);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_first_loads_pending_id_is_committed_before_its_pages_batch() {
    let directory = tempfile::tempdir().expect("tempdir");
    let path = directory.path().join("catalog.db");
    let store = open_store(&path, &["large"]).await;
    let walk = store.begin_walk("large");
    walk.add_resources(resources("large", 0..100, "alpha"))
        .await
        .expect("stage");
    // The batch holding the page stays open (nothing else asked the writer for anything),
    // but the id is taken for good: a batch rolled back must not free it for another load.
    let pending_ids = |path: &std::path::Path| -> i64 {
        let connection = schema::open_reader(path).expect("reader");
        connection
            .query_row("SELECT count(*) FROM pending_loads", [], |row| row.get(0))
            .expect("count pending loads")
    };
    wait_until(
        "the pending id committed",
        Duration::from_secs(10),
        async || pending_ids(&path) == 1,
    )
    .await;
    assert_eq!(pending_rows(&path), 1, "the page's batch is still open");
    store.ping_writer().await.expect("ping");
    assert_eq!(pending_rows(&path), 101, "a ping commits the batch");
}

/// Readers whose read transactions overlap without a gap (each holds its snapshot a moment,
/// the next begins before it ends) never leave a passive checkpoint a moment to restart the
/// log; past `WAL_RESTART_BYTES` a `RESTART` does, so the log stays near that size.
#[test]
fn readers_that_overlap_without_a_gap_do_not_keep_the_log_from_restarting() {
    let largest_log = log_under_overlapping_readers(Duration::from_millis(20));
    assert!(
        largest_log < 64 << 20,
        "the log grew to {largest_log} bytes while readers overlapped"
    );
}

/// Reads that last longer than a `RESTART`'s first wait (600 ms, as a loaded daemon's large
/// pages do): the waits grow until one outlasts them.
#[test]
fn long_reads_that_overlap_do_not_keep_the_log_from_restarting() {
    let largest_log = log_under_overlapping_readers(Duration::from_millis(600));
    assert!(
        largest_log < 80 << 20,
        "the log grew to {largest_log} bytes while long readers overlapped"
    );
}

/// The largest the log grows while the writer commits 96 MiB, 64 KiB at a time with gaps
/// between, and two readers hold snapshots for `hold` each, one begun halfway through the
/// other's.
fn log_under_overlapping_readers(hold: Duration) -> u64 {
    use std::sync::atomic::AtomicBool;
    let directory = tempfile::tempdir().expect("tempdir");
    let path = directory.path().join("catalog.db");
    let connection = writer_connection(&path, &[]);
    connection
        .execute_batch("CREATE TABLE blobs (b BLOB)")
        .expect("a table");
    let mut wal = WriteAheadLog::take_over(&connection, WAL_LIMIT_BYTES);
    let stop = Arc::new(AtomicBool::new(false));
    let readers: Vec<_> = (0..2u32)
        .map(|offset| {
            let stop = stop.clone();
            let path = path.clone();
            std::thread::spawn(move || {
                let reader = schema::open_reader(&path).expect("reader");
                std::thread::sleep(hold / 2 * offset);
                while !stop.load(Ordering::Acquire) {
                    reader.execute_batch("BEGIN").expect("begin");
                    let _: i64 = reader
                        .query_row("SELECT count(*) FROM blobs", [], |row| row.get(0))
                        .expect("read");
                    std::thread::sleep(hold);
                    reader.execute_batch("COMMIT").expect("end");
                }
            })
        })
        .collect();
    let mut largest_log = 0;
    for _ in 0..1_536 {
        connection
            .execute("INSERT INTO blobs VALUES (zeroblob(65536))", [])
            .expect("insert");
        wal.after_write(&connection, false);
        largest_log = largest_log.max(file_bytes(&log_path(&path)));
        std::thread::sleep(Duration::from_millis(1));
    }
    stop.store(true, Ordering::Release);
    for reader in readers {
        reader.join().expect("reader");
    }
    wal.close(&connection);
    largest_log
}
