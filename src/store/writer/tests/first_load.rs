//! First loads in flight: pending rows no reader sees, failures, drops and crashes that leave none.

use super::*;

fn foreign_key_violations(path: &std::path::Path) -> i64 {
    let connection = schema::open_reader(path).expect("reader");
    let mut statement = connection
        .prepare("PRAGMA foreign_key_check")
        .expect("check");
    let rows = statement.query_map([], |_| Ok(())).expect("rows");
    rows.count() as i64
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
        .read(|reader| reader.list_resources(None, 1_000, &|_| true))
        .await
        .expect("list");
    assert!(more.is_none());
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
        .read(|reader| reader.list_resources(None, 20, &|_| true))
        .await
        .expect("list");
    assert!(listed.iter().all(|row| row.server == "large"));
    let (tools, _) = store
        .read(|reader| reader.list_entries(Kind::Tool, Some("large"), None, 10))
        .await
        .expect("tools");
    assert_eq!(tools.len(), 1, "the server's tools were lost at the swap");
    assert_eq!(tools[0].name, "lookup");
    backlog_indexed(&store).await;
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
        let mut counts = StagedCounts::against(&connection, "large", false).expect("counts");
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
    backlog_indexed(&store).await;
    store.close().await;
    let connection = schema::open_writer(&path).expect("writer");
    assert_full_text_is_exact(&connection);
}
