//! The full-text backlog and the swap's bounded scans: a small swap never scans a large
//! snapshot, a large swap leaves its FTS5 rows to the backlog, resumed after a crash.

use super::*;

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
    commit_small_walk(&store).await;
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

    backlog_indexed(&store).await;
    store.close().await;
}

/// While the search index reads a committed first load's pages back (it holds the
/// `ReadingBack` the load's `Promoted` event brought), the writer leaves the load's full-text
/// backlog, and still commits other walks at once; once the index drops it, the backlog is
/// indexed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_full_text_backlog_waits_while_the_index_reads_a_first_load_back() {
    let directory = tempfile::tempdir().expect("tempdir");
    let path = directory.path().join("catalog.db");
    let store = open_store(&path, &["large", "small"]).await;
    let (feed, events) = std::sync::mpsc::channel();
    store.feed_first_loads(feed);
    // Nothing takes the pages: past the walk's room for a few of them, the others go on
    // without the index, which would read them back after the commit.
    let walk = store.begin_walk("large");
    for page in resources("large", 0..20_000, "alpha").chunks(1_000) {
        walk.add_resources(page.to_vec()).await.expect("stage");
    }
    walk.commit(WalkReport::default()).await.expect("commit");
    let reading_back = events
        .try_iter()
        .find_map(|event| match event {
            crate::store::LoadEvent::Promoted { read_back, .. } => Some(read_back),
            _ => None,
        })
        .expect("the load's end is told before its commit is answered")
        .expect("pages went without the index: it reads them back");

    commit_small_walk(&store).await;
    // Four batches of 5,000 take the writer some tens of milliseconds when it does not wait
    // (a few hundred in a debug build).
    tokio::time::sleep(Duration::from_secs(2)).await;
    let behind = store.full_text_behind.load(Ordering::Acquire);
    assert!(
        behind >= 20_000,
        "the backlog went on during the read-back: {behind} ids left"
    );

    drop(reading_back);
    backlog_indexed(&store).await;
    store.close().await;
}

/// Stages and commits 10 resources of server "small" (text "beta"), and checks they were added.
async fn commit_small_walk(store: &Store) {
    let walk = store.begin_walk("small");
    walk.add_resources(resources("small", 0..10, "beta"))
        .await
        .expect("stage");
    let outcome = walk.commit(WalkReport::default()).await.expect("commit");
    assert_eq!(outcome.added, 10);
}

/// Whether merging `index` would do any work now: FTS5's `merge`, in a transaction rolled back,
/// changes 2 rows or more when a level holds enough segments to merge.
fn merge_pending(connection: &mut Connection, index: &str) -> bool {
    let transaction = connection
        .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
        .expect("begin");
    let before = transaction.total_changes();
    transaction
        .execute(
            &format!("INSERT INTO {index} ({index}, rank) VALUES ('merge', 64)"),
            [],
        )
        .expect("merge");
    let pending = transaction.total_changes() - before >= 2;
    transaction.rollback().expect("rollback");
    pending
}

/// A swap commits without merging the full-text index's segments (FTS5's `automerge` is off):
/// a small delta never pays a merge of older segments, and a fleet of followers applying one
/// change never all merge on it. The writer merges them once it has been idle a moment.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn full_text_segments_are_merged_when_the_writer_is_idle_not_in_a_swap() {
    let directory = tempfile::tempdir().expect("tempdir");
    let path = directory.path().join("catalog.db");
    {
        let mut connection = writer_connection(&path, &["small"]);
        for index in ["resources_fts", "entries_fts"] {
            let automerge: i64 = connection
                .query_row(
                    &format!("SELECT v FROM {index}_config WHERE k = 'automerge'"),
                    [],
                    |row| row.get(0),
                )
                .expect("automerge");
            assert_eq!(automerge, 0, "{index}");
        }
        // Eight swaps, each changing a row's text: eight segments on FTS5's first level,
        // none merged by the swaps themselves.
        let behind = AtomicU64::new(0);
        let mut rows = resources("small", 0..100, "alpha");
        for round in 1..=8u64 {
            rows[round as usize] = resource("small", round as usize, "beta");
            walk(&mut connection, round, "small", &rows, &behind);
        }
        assert!(
            merge_pending(&mut connection, "resources_fts"),
            "the swaps merged the segments themselves"
        );
    }
    let store = open_store(&path, &["small"]).await;
    let mut connection = schema::open_writer(&path).expect("open");
    wait_until(
        "the idle writer to merge the full-text segments",
        Duration::from_secs(60),
        async || !merge_pending(&mut connection, "resources_fts"),
    )
    .await;
    store.close().await;
    assert_full_text_is_exact(&connection);
    assert_eq!(full_text_matches(&connection, "beta"), 8);
}
