//! Reloads: a re-walk that changes much of a big snapshot is copied between other commits,
//! seen whole or not at all, and leaves no row behind, through a stop as well.

use super::*;
use crate::store::writer::swap::RELOAD_MIN_ROWS;

/// Rows no reader sees: resources of no server, and the pending and retired snapshots' rows.
fn rows_of_no_server(path: &std::path::Path) -> i64 {
    let connection = schema::open_reader(path).expect("reader");
    connection
        .query_row(
            "SELECT (SELECT count(*) FROM resources WHERE server_id NOT IN (SELECT id FROM servers))
                    + (SELECT count(*) FROM pending_loads)
                    + (SELECT count(*) FROM retired_snapshots)",
            [],
            |row| row.get(0),
        )
        .expect("count rows of no server")
}

async fn hits(store: &Store, word: &str) -> Vec<String> {
    let request = SearchRequest {
        raw: true,
        ..SearchRequest::new(word, 20)
    };
    store
        .read(move |reader| reader.search(&request))
        .await
        .expect("search")
        .hits
        .into_iter()
        .map(|hit| hit.uri)
        .collect()
}

/// 60,000 resources of `large` first loaded as "alpha", and their full text indexed.
async fn loaded(path: &std::path::Path) -> Store {
    let store = open_store(path, &["large", "small"]).await;
    let walk = store.begin_walk("large");
    for page in resources("large", 0..60_000, "alpha").chunks(1_000) {
        walk.add_resources(page.to_vec()).await.expect("stage");
    }
    walk.commit(WalkReport::default())
        .await
        .expect("first load");
    wait_until(
        "the first load's full text",
        Duration::from_secs(300),
        async || store.full_text_note().is_none(),
    )
    .await;
    store
}

/// The re-walk: 0..1,000 gone, 1,000..60,000 changed to "beta", 60,000..61,000 new.
async fn rewalk(store: &Store) -> crate::store::StagedWalk {
    let walk = store.begin_walk("large");
    for page in resources("large", 1_000..61_000, "beta").chunks(1_000) {
        walk.add_resources(page.to_vec()).await.expect("stage");
    }
    walk
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_big_rewalk_is_copied_between_other_commits_and_seen_whole_or_not_at_all() {
    const { assert!(61_000 >= RELOAD_MIN_ROWS) };
    let directory = tempfile::tempdir().expect("tempdir");
    let path = directory.path().join("catalog.db");
    let store = loaded(&path).await;
    let walk = rewalk(&store).await;
    let big = tokio::spawn(async move { walk.commit(WalkReport::default()).await });
    // The big commit is queued first; the other server's walk comes after it and is answered
    // while the copy goes on (in place, it waited for the whole diff to be applied).
    tokio::time::sleep(Duration::from_millis(50)).await;
    let small = store.begin_walk("small");
    small
        .add_resources(resources("small", 0..10, "gamma"))
        .await
        .expect("stage");
    let outcome = small.commit(WalkReport::default()).await.expect("commit");
    assert!(
        !big.is_finished(),
        "the other server's commit waited for the whole big swap"
    );
    assert_eq!(outcome.added, 10);
    // Meanwhile readers see one snapshot whole, the old one (or, the copy done, the new one).
    let (listed, _) = store
        .read(|reader| reader.list_resources(None, 1_000, &|_| true))
        .await
        .expect("list");
    let words: std::collections::BTreeSet<&str> = listed
        .iter()
        .map(|row| {
            if row.raw.contains("alpha") {
                "alpha"
            } else {
                "beta"
            }
        })
        .collect();
    assert_eq!(words.len(), 1, "one page of two snapshots: {words:?}");
    assert_eq!(resources_of(&store, "large").await, 60_000);

    let outcome = big.await.expect("join").expect("the reload");
    assert_eq!(
        (
            outcome.added,
            outcome.removed,
            outcome.changed,
            outcome.resources
        ),
        (1_000, 1_000, 59_000, 60_000)
    );
    assert_eq!(resources_of(&store, "large").await, 60_000);
    let (listed, _) = store
        .read(|reader| reader.list_resources(None, 1_000, &|_| true))
        .await
        .expect("list");
    assert_eq!(listed[0].key, "test://large/001000");
    assert!(listed
        .iter()
        .all(|row| row.server == "large" && row.raw.contains("beta document")));
    wait_until(
        "the old snapshot's rows to be deleted and the full text indexed",
        Duration::from_secs(300),
        async || rows_of_no_server(&path) == 0 && store.full_text_note().is_none(),
    )
    .await;
    assert_eq!(hits(&store, "beta").await.len(), 20);
    assert!(hits(&store, "alpha").await.is_empty());
    assert_eq!(hits(&store, "gamma").await.len(), 10);
    assert_eq!(
        store
            .read(|reader| reader.merged_resource_count())
            .await
            .expect("count"),
        60_010
    );
    store.close().await;
    let connection = schema::open_writer(&path).expect("writer");
    assert_full_text_is_exact(&connection);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_cut_off_by_a_stop_leaves_the_old_snapshot_and_no_row_behind() {
    let directory = tempfile::tempdir().expect("tempdir");
    let path = directory.path().join("catalog.db");
    {
        let store = loaded(&path).await;
        let walk = rewalk(&store).await;
        let big = tokio::spawn(async move { walk.commit(WalkReport::default()).await });
        tokio::time::sleep(Duration::from_millis(50)).await;
        // Answered once the reload has begun: the stop comes in the middle of its copy.
        let small = store.begin_walk("small");
        small.commit(WalkReport::default()).await.expect("commit");
        store.close().await;
        let outcome = big.await.expect("join");
        assert!(
            outcome.is_err(),
            "the walk is told its reload did not get in"
        );
    }
    let store = Store::open(&path).expect("open");
    assert_eq!(resources_of(&store, "large").await, 60_000);
    assert_eq!(hits(&store, "alpha").await.len(), 20);
    assert!(hits(&store, "beta").await.is_empty());
    wait_until(
        "the copied rows to be deleted",
        Duration::from_secs(120),
        async || rows_of_no_server(&path) == 0,
    )
    .await;

    // Promoted, then stopped at once: the old rows the stop left are deleted at the next start.
    let outcome = rewalk(&store)
        .await
        .commit(WalkReport::default())
        .await
        .expect("the reload");
    assert_eq!(outcome.changed, 59_000);
    store.close().await;
    let store = Store::open(&path).expect("open");
    wait_until(
        "the replaced snapshot's rows to be deleted",
        Duration::from_secs(120),
        async || rows_of_no_server(&path) == 0 && store.full_text_note().is_none(),
    )
    .await;
    assert_eq!(resources_of(&store, "large").await, 60_000);
    assert_eq!(hits(&store, "beta").await.len(), 20);
    assert!(hits(&store, "alpha").await.is_empty());
    store.close().await;
    let connection = schema::open_writer(&path).expect("writer");
    assert_full_text_is_exact(&connection);
}
