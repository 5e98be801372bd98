//! The keeper's tests: repair, catch-up from the feed, first loads built during their walk.

use std::sync::Arc;
use std::time::Duration;
use std::time::Instant;

use super::*;
use crate::search::SearchIndex;
use crate::store::SearchRequest;
use crate::store::Store;
use crate::store::{RemovedServers, ResourceRow, ServerEntry, ServerSync, WalkReport};

fn row(uri: &str, name: &str, description: &str) -> ResourceRow {
    let raw =
        format!("{{\"uri\":\"{uri}\",\"name\":\"{name}\",\"description\":\"{description}\"}}");
    ResourceRow {
        uri: uri.into(),
        name: name.into(),
        title: None,
        description: Some(description.into()),
        mime_type: Some("text/plain".into()),
        size: None,
        annotations: None,
        icons: None,
        meta: None,
        hash: crate::store::entry::content_hash(raw.as_bytes()),
        oversized: false,
        raw,
    }
}

fn sync(configured: Vec<ServerEntry>) -> ServerSync {
    ServerSync {
        configured,
        untouched: Vec::new(),
        removed: RemovedServers::Drop,
        history_bounds: Default::default(),
    }
}

async fn walk(store: &Store, server: &str, rows: Vec<ResourceRow>) {
    let walk = store.begin_walk(server);
    walk.add_resources(rows).await.expect("stage");
    walk.commit(WalkReport::default()).await.expect("commit");
}

fn found(index: &SearchIndex, text: &str) -> Vec<(String, String)> {
    let mut query = SearchRequest::new(text, 5000);
    query.deadline = Some(Instant::now() + Duration::from_secs(30));
    let mut hits: Vec<(String, String)> = index
        .search(&query)
        .expect("search")
        .hits
        .into_iter()
        .map(|hit| (hit.server, hit.uri))
        .collect();
    hits.sort();
    hits
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_feed_brings_the_index_up_to_date() {
    let directory = tempfile::tempdir().expect("tempdir");
    let database = directory.path().join("catalog.db");
    let store = Store::open(&database).expect("store");
    let servers = |docs: i64| {
        vec![
            ServerEntry {
                name: "docs".into(),
                priority: docs,
                transport: crate::protocol::TransportKind::Stdio,
                read_cache_bytes: None,
                history: false,
            },
            ServerEntry {
                name: "wiki".into(),
                priority: 50,
                transport: crate::protocol::TransportKind::Stdio,
                read_cache_bytes: None,
                history: false,
            },
        ]
    };
    store
        .apply_servers(sync(servers(10)))
        .await
        .expect("servers");
    walk(
        &store,
        "docs",
        (0..50)
            .map(|i| row(&format!("x://{i}"), &format!("doc{i}"), "alpha from docs"))
            .collect(),
    )
    .await;
    walk(
        &store,
        "wiki",
        (40..60)
            .map(|i| row(&format!("x://{i}"), &format!("wiki{i}"), "alpha from wiki"))
            .collect(),
    )
    .await;

    let (index, _) = SearchIndex::open(&crate::search::directory_for(&database), 2).expect("index");
    keep_up(&index, &database, true).expect("rebuild");
    assert!(index.is_ready());
    let generation = store
        .read(|reader| reader.latest_change_seq())
        .await
        .expect("seq") as u64;
    assert_eq!(index.generation(), Some(generation));
    assert_eq!(found(&index, "alpha").len(), 60);
    assert_eq!(
        found(&index, "wiki").len(),
        10,
        "x://50..60 only: docs wins 40..50"
    );

    // A small swap: a catch-up from the feed, one URI at a time.
    walk(
        &store,
        "docs",
        (0..45)
            .map(|i| {
                row(
                    &format!("x://{i}"),
                    &format!("doc{i}"),
                    if i == 0 { "beta" } else { "alpha from docs" },
                )
            })
            .collect(),
    )
    .await;
    keep_up(&index, &database, false).expect("catch up");
    assert_eq!(found(&index, "beta"), vec![("docs".into(), "x://0".into())]);
    assert_eq!(
        found(&index, "wiki").len(),
        15,
        "x://45..50 went over to wiki"
    );
    // Priorities change with no swap: wiki wins the URIs it shares with docs.
    store
        .apply_servers(sync(servers(90)))
        .await
        .expect("servers");
    keep_up(&index, &database, false).expect("catch up");
    assert_eq!(found(&index, "wiki").len(), 20, "x://40..45 now from wiki");
    // A swap with more changes than the feed records one by one: the server is re-read.
    walk(
        &store,
        "wiki",
        (0..1500)
            .map(|i| row(&format!("y://{i}"), &format!("wiki{i}"), "gamma"))
            .collect(),
    )
    .await;
    keep_up(&index, &database, false).expect("catch up");
    assert_eq!(found(&index, "gamma").len(), 1500);
    assert_eq!(found(&index, "wiki").len(), 1500);
    assert_eq!(found(&index, "alpha").len(), 44, "x://0 says beta");
    assert_eq!(
        index.generation(),
        Some(
            store
                .read(|reader| reader.latest_change_seq())
                .await
                .expect("seq") as u64
        )
    );
    store.close().await;
}

/// The store at `database` with one configured server, `big`.
async fn store_with_big(database: &std::path::Path) -> Store {
    let store = Store::open(database).expect("store");
    store
        .apply_servers(sync(vec![ServerEntry {
            name: "big".into(),
            priority: 10,
            transport: crate::protocol::TransportKind::Stdio,
            read_cache_bytes: None,
            history: false,
        }]))
        .await
        .expect("servers");
    store
}

/// A store with one server `big`, its empty index, and the first loads' page events for the
/// index's builder; walks wait for no builder (the first load's hold is zero).
async fn big_server() -> (
    tempfile::TempDir,
    Store,
    Arc<SearchIndex>,
    std::sync::mpsc::Receiver<crate::store::LoadEvent>,
) {
    let directory = tempfile::tempdir().expect("tempdir");
    let database = directory.path().join("catalog.db");
    let store = store_with_big(&database).await;
    let (index, _) = SearchIndex::open(&crate::search::directory_for(&database), 2).expect("index");
    let index = Arc::new(index);
    keep_up(&index, &database, true).expect("empty index");
    let (feed, events) = std::sync::mpsc::channel();
    store.feed_first_loads(feed);
    store.set_first_load_index_hold(Duration::ZERO);
    (directory, store, index, events)
}

/// One walk of `big`'s 40,000 resources in pages of 5,000, resource `i` described by
/// `description(i)`.
async fn walk_big(store: &Store, description: impl Fn(usize) -> &'static str) {
    let walk = store.begin_walk("big");
    for page in 0..8 {
        walk.add_resources(
            (page * 5000..(page + 1) * 5000)
                .map(|i| row(&format!("b://{i:06}"), &format!("b{i}"), description(i)))
                .collect(),
        )
        .await
        .expect("stage");
    }
    walk.commit(WalkReport::default()).await.expect("commit");
}

/// The index's builder started on the first loads' `events`, then, once it has read back
/// `read_back` rows, one catch-up to the end. The daemon's builder takes each page as the walk
/// stages it, so it knows a load long before the commit's catch-up asks for it; here every
/// event waits in the channel until the builder starts, and a catch-up started with it could
/// ask before the builder has seen the load (and index the load itself).
async fn build_and_catch_up(
    index: &Arc<SearchIndex>,
    directory: &tempfile::TempDir,
    events: std::sync::mpsc::Receiver<crate::store::LoadEvent>,
    read_back: u64,
) -> std::thread::JoinHandle<()> {
    let database = directory.path().join("catalog.db");
    let builder = {
        let (index, database) = (index.clone(), database.clone());
        std::thread::spawn(move || {
            index
                .prebuilder
                .clone()
                .run(index.clone(), events, &database)
        })
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while index.prebuilder.counts().0 < read_back && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let kept = {
        let index = index.clone();
        tokio::task::spawn_blocking(move || keep_up(&index, &database, false))
    };
    kept.await.expect("join").expect("catch up");
    builder
}

/// A first load whose walk stops waiting for the index (its hold used up: here at once,
/// the builder not running yet) is still adopted whole: the builder reads the pages it had
/// no room for from the database after the commit (20,000 rows: on a host of two cores or
/// more, two threads read back half each, `READ_BACK_SHARED_FROM`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_first_load_the_index_had_no_room_for_is_read_back_and_adopted_whole() {
    let (directory, store, index, events) = big_server().await;
    // Pages of 5,000: the first four have room (enough to start the build), the rest go
    // without while no builder runs.
    walk_big(&store, |_| "gamma").await;
    let builder = build_and_catch_up(&index, &directory, events, 20_000).await;
    let (read_back, handed_out) = index.prebuilder.counts();
    assert_eq!(read_back, 20_000, "the four pages without room");
    assert_eq!(handed_out, 1, "the load's segments were adopted");
    assert_eq!(index.status().documents, 40_000);
    // Taken during the walk; the first and last read back by each thread.
    for (name, uri) in [
        ("b0", "b://000000"),
        ("b19999", "b://019999"),
        ("b20000", "b://020000"),
        ("b29999", "b://029999"),
        ("b30000", "b://030000"),
        ("b39999", "b://039999"),
    ] {
        assert_eq!(
            found(&index, name),
            vec![("big".to_string(), uri.to_string())]
        );
    }
    assert_eq!(
        index.generation(),
        Some(
            store
                .read(|reader| reader.latest_change_seq())
                .await
                .expect("seq") as u64
        )
    );
    store.close().await;
    drop(store);
    builder.join().expect("builder");
}

/// A server that swaps again before the index takes its first load's index built during the
/// walk: that index is older than the catalog, so the catalog is read again (issue 32.3: the
/// second swap's change was lost, the search index adopting the first load as current).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_first_load_built_during_its_walk_is_not_taken_after_a_second_swap() {
    let (directory, store, index, events) = big_server().await;
    walk_big(&store, |_| "gamma").await;
    // The second walk lists the same 40,000, one of them described anew.
    walk_big(&store, |i| if i == 7 { "delta" } else { "gamma" }).await;
    let builder = build_and_catch_up(&index, &directory, events, 0).await;
    assert_eq!(index.status().documents, 40_000);
    assert_eq!(
        found(&index, "delta"),
        vec![("big".to_string(), "b://000007".to_string())],
        "the second swap's change is in the index"
    );
    store.close().await;
    drop(store);
    builder.join().expect("builder");
}

fn template(uri_template: &str, name: &str, description: &str) -> crate::store::TemplateRow {
    crate::store::TemplateRow {
        uri_template: uri_template.into(),
        name: name.into(),
        title: None,
        description: Some(description.into()),
        mime_type: None,
        raw: format!("{{\"uriTemplate\":\"{uri_template}\",\"description\":\"{description}\"}}"),
        oversized: false,
    }
}

fn tool(name: &str, description: &str, inputs: &str) -> crate::store::EntryRow {
    let raw = format!(
        "{{\"name\":\"{name}\",\"description\":\"{description}\",\"inputs\":\"{inputs}\"}}"
    );
    crate::store::EntryRow {
        name: name.into(),
        title: None,
        description: Some(description.into()),
        inputs: inputs.into(),
        hash: crate::store::entry::content_hash(raw.as_bytes()),
        oversized: false,
        raw,
    }
}

fn kinds_found(index: &SearchIndex, text: &str) -> Vec<(crate::protocol::Kind, String)> {
    let mut query = SearchRequest::new(text, 100);
    query.deadline = Some(Instant::now() + Duration::from_secs(30));
    let mut hits: Vec<(crate::protocol::Kind, String)> = index
        .search(&query)
        .expect("search")
        .hits
        .into_iter()
        .map(|hit| (hit.kind, hit.name))
        .collect();
    hits.sort();
    hits
}

/// Templates, tools and prompts reach the index through the feed like resources: a
/// rebuild reads every kind, a catch-up the changes of each (server, kind).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_kind_reaches_the_index_through_the_feed() {
    use crate::protocol::Kind;
    let directory = tempfile::tempdir().expect("tempdir");
    let database = directory.path().join("catalog.db");
    let store = Store::open(&database).expect("store");
    store
        .apply_servers(sync(vec![ServerEntry {
            name: "fx".into(),
            priority: 10,
            transport: crate::protocol::TransportKind::Stdio,
            read_cache_bytes: None,
            history: false,
        }]))
        .await
        .expect("servers");
    let walk_with = |templates: Vec<crate::store::TemplateRow>| {
        let store = store.clone();
        async move {
            let walk = store.begin_walk("fx");
            walk.add_resources(vec![row("x://1", "doc", "plain words")])
                .await
                .expect("stage");
            walk.add_templates(templates).await.expect("stage");
            walk.commit(WalkReport::default()).await.expect("commit");
        }
    };
    walk_with(vec![template(
        "x://pages/{id}",
        "page-by-id",
        "Pages by id",
    )])
    .await;
    store
        .swap_entries(
            "fx",
            Kind::Tool,
            vec![tool(
                "get_forecast",
                "Forecast",
                "region Which meteorological region",
            )],
        )
        .await
        .expect("tools");
    store
        .swap_entries(
            "fx",
            Kind::Prompt,
            vec![tool("brief", "A briefing", "audience Who reads it")],
        )
        .await
        .expect("prompts");

    let (index, _) = SearchIndex::open(&crate::search::directory_for(&database), 2).expect("index");
    keep_up(&index, &database, true).expect("rebuild");
    assert_eq!(index.status().documents, 4);
    assert_eq!(
        kinds_found(&index, "meteorological"),
        vec![(Kind::Tool, "get_forecast".to_string())]
    );
    assert_eq!(
        kinds_found(&index, "pages"),
        vec![(Kind::Template, "page-by-id".to_string())]
    );
    assert_eq!(
        kinds_found(&index, "audience"),
        vec![(Kind::Prompt, "brief".to_string())]
    );

    // A tool changes, a template is replaced: each reaches the index by a catch-up.
    store
        .swap_entries(
            "fx",
            Kind::Tool,
            vec![tool(
                "get_forecast",
                "Forecast",
                "zone Which climatological zone",
            )],
        )
        .await
        .expect("tools");
    walk_with(vec![template(
        "x://posts/{id}",
        "post-by-id",
        "Posts by id",
    )])
    .await;
    let changes = store
        .read(|reader| reader.changes(None, 100, Some(&[Kind::Template])))
        .await
        .expect("feed");
    let feed: Vec<(String, Option<String>)> = changes
        .changes
        .iter()
        .map(|change| (change.kind.to_string(), change.uri.clone()))
        .collect();
    assert_eq!(
        feed,
        [
            ("added".to_string(), Some("x://pages/{id}".to_string())),
            ("removed".to_string(), Some("x://pages/{id}".to_string())),
            ("added".to_string(), Some("x://posts/{id}".to_string())),
        ]
    );
    assert!(matches!(
        index.repair_needed(
            store
                .read(|reader| reader.latest_change_seq())
                .await
                .expect("seq") as u64
        ),
        crate::search::Repair::CatchUp { .. }
    ));
    keep_up(&index, &database, false).expect("catch up");
    assert!(kinds_found(&index, "meteorological").is_empty());
    assert_eq!(
        kinds_found(&index, "climatological"),
        vec![(Kind::Tool, "get_forecast".to_string())]
    );
    assert!(kinds_found(&index, "pages").is_empty());
    assert_eq!(
        kinds_found(&index, "posts"),
        vec![(Kind::Template, "post-by-id".to_string())]
    );
    assert_eq!(index.status().documents, 4);
    assert_eq!(
        index.generation(),
        Some(
            store
                .read(|reader| reader.latest_change_seq())
                .await
                .expect("seq") as u64
        )
    );
    store.close().await;
}

/// A read of every entry of a big server reads page by page, each page from the newest
/// state: a swap committed while it runs is seen by the pages after it, and the read pins no
/// snapshot, so a checkpoint copies the whole log back (a reload's million entries took
/// minutes to index, and the log grew to 2 GB behind the one read transaction).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_read_of_every_entry_reads_the_newest_state_and_pins_no_snapshot() {
    let (directory, store, _index, _events) = big_server().await;
    let rows = |count: usize| -> Vec<ResourceRow> {
        (0..count)
            .map(|i| row(&format!("b://{i:06}"), &format!("b{i}"), "first"))
            .collect()
    };
    walk(&store, "big", rows(5_000)).await;
    let database = directory.path().join("catalog.db");
    let handle = tokio::runtime::Handle::current();
    let (seen, checkpoint) = tokio::task::spawn_blocking(move || {
        let mut source = crate::store::IndexSource::open(&database).expect("source");
        let snapshot = source.snapshot().expect("snapshot");
        let seen = snapshot
            .with_entries(Some(("big", crate::protocol::Kind::Resource)), |entries| {
                entries.next().expect("a first entry");
                // While the read is on its first page: one more resource, after every key.
                handle.block_on(walk(&store, "big", rows(5_001)));
                1 + entries.count()
            })
            .expect("read");
        let checker = rusqlite::Connection::open(&database).expect("open");
        let checkpoint: (i64, i64, i64) = checker
            .query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |row| {
                Ok((row.get(0)?, row.get(1)?, row.get(2)?))
            })
            .expect("checkpoint");
        drop(snapshot);
        (seen, checkpoint)
    })
    .await
    .expect("join");
    assert_eq!(
        seen, 5_001,
        "the pages after the swap read its new resource"
    );
    let (busy, log, copied) = checkpoint;
    assert_eq!(
        (busy, copied),
        (0, log),
        "no frame of the log is held back by the read"
    );
}

/// How many resources the split catch-up's server lists: three batches (two committed at the
/// old generation, the last at the new one).
const SPLIT_ENTRIES: usize = 2 * CATCH_UP_BATCH_ENTRIES + 2_000;

/// Every URI a search of `word` finds (none left out by a limit), and the generation of the
/// commit that answered.
fn every_found(index: &SearchIndex, word: &str) -> (usize, u64) {
    let mut query = SearchRequest::new(word, SPLIT_ENTRIES + 1);
    query.deadline = Some(Instant::now() + Duration::from_secs(120));
    let page = index.search(&query).expect("search");
    (page.hits.len(), page.generation)
}

/// The same search of the index's last commit, whatever is pinned.
fn last_commit_finds(index: &SearchIndex, word: &str) -> usize {
    let mut query = SearchRequest::new(word, SPLIT_ENTRIES + 1);
    let deadline = Instant::now() + Duration::from_secs(120);
    query.deadline = Some(deadline);
    crate::search::query::run(
        &index.reader.searcher(),
        &index.fields,
        &query,
        deadline,
        Duration::from_secs(120),
        0,
    )
    .expect("search")
    .hits
    .len()
}

/// A keeper's pass held between two of its commits (`catch_up_held_between_batches`).
struct HeldCatchUp {
    _directory: tempfile::TempDir,
    store: Store,
    index: Arc<SearchIndex>,
    /// The generation the index had before the pass.
    before: u64,
    pass: std::thread::JoinHandle<Result<(), KeepError>>,
}

/// A served index, then a re-walk that changes every one of `SPLIT_ENTRIES` resources
/// ("walrus" becomes "narwhal"), and the keeper's pass of it on a thread, held between its
/// first and second commit: the returned lock of the index writer holds it there.
async fn catch_up_held_between_batches() -> (
    HeldCatchUp,
    std::sync::MutexGuard<'static, tantivy::IndexWriter>,
) {
    let directory = tempfile::tempdir().expect("tempdir");
    let database = directory.path().join("catalog.db");
    let store = store_with_big(&database).await;
    let rows = |word: &'static str| {
        (0..SPLIT_ENTRIES)
            .map(|i| row(&format!("b://{i:06}"), &format!("b{i}"), word))
            .collect()
    };
    walk(&store, "big", rows("walrus")).await;
    let (index, _) = SearchIndex::open(&crate::search::directory_for(&database), 2).expect("index");
    // Leaked so the held writer lock can outlive this function's borrow; a test's few
    // megabytes.
    let index: &'static Arc<SearchIndex> = Box::leak(Box::new(Arc::new(index)));
    keep_up(index, &database, true).expect("rebuild");
    assert!(index.is_ready());
    let before = index.generation().expect("a generation");
    walk(&store, "big", rows("narwhal")).await;

    // The pass waits for the writer at its first commit, after pinning.
    let writer = crate::search::error::lock(&index.writer);
    let pass = {
        let index = index.clone();
        std::thread::spawn(move || keep_up(&index, &database, false))
    };
    let waited = Instant::now();
    // The pass pins, then says it is catching up.
    while index.status().phase != crate::search::Phase::CatchingUp {
        assert!(
            waited.elapsed() < Duration::from_secs(120),
            "the pass never pinned"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(index.status().phase, crate::search::Phase::CatchingUp);
    assert_eq!(index.status().pinned_generation, Some(before));
    // Let the first batch commit, and take the lock again before the second: the pass reads
    // the next batch's 5,000 entries from SQLite before it wants it.
    let reloaded_from = index.reader.searcher().generation().generation_id();
    drop(writer);
    let writer = loop {
        let writer = crate::search::error::lock(&index.writer);
        if index.reader.searcher().generation().generation_id() != reloaded_from {
            break writer;
        }
        drop(writer);
        std::thread::sleep(Duration::from_millis(1));
    };
    (
        HeldCatchUp {
            _directory: directory,
            store,
            index: index.clone(),
            before,
            pass,
        },
        writer,
    )
}

/// While a re-walk's change is split over commits, searches answer from the commit before it,
/// whole (every entry with its old word, none with its new one), never from the last commit
/// that holds part of it; once the last batch commits and the index is ready, from that.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_split_catch_up_answers_from_the_commit_before_it_until_its_last_batch() {
    let (held, writer) = catch_up_held_between_batches().await;
    let index = &held.index;
    assert_eq!(index.status().pinned_generation, Some(held.before));
    let (old, new) = (
        last_commit_finds(index, "walrus"),
        last_commit_finds(index, "narwhal"),
    );
    assert!(
        (CATCH_UP_BATCH_ENTRIES..SPLIT_ENTRIES).contains(&new) && old + new == SPLIT_ENTRIES,
        "the last commit holds part of the change: {old} old, {new} new"
    );
    assert_eq!(every_found(index, "walrus"), (SPLIT_ENTRIES, held.before));
    assert_eq!(every_found(index, "narwhal"), (0, held.before));
    drop(writer);
    held.pass.join().expect("join").expect("catch up");
    let after = index.generation().expect("a generation");
    assert!(after > held.before);
    assert!(index.is_ready());
    assert_eq!(index.status().pinned_generation, None);
    assert_eq!(every_found(index, "walrus"), (0, after));
    assert_eq!(every_found(index, "narwhal"), (SPLIT_ENTRIES, after));
    held.store.close().await;
}

/// A split catch-up that stops half way (here cancelled, as at shutdown) drops its pin: its
/// commits hold part of the change, and nothing answers from the index until a pass is done.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_split_catch_up_that_stops_half_way_drops_its_pin() {
    let (held, writer) = catch_up_held_between_batches().await;
    let index = &held.index;
    index.cancel();
    drop(writer);
    let outcome = held.pass.join().expect("join");
    assert!(
        matches!(
            outcome,
            Err(KeepError::Index(crate::search::SearchError::Cancelled))
        ),
        "{outcome:?}"
    );
    assert_eq!(index.status().pinned_generation, None);
    assert!(crate::search::error::lock(&index.pinned).is_none());
    assert_eq!(index.generation(), Some(held.before));
    assert!(!index.is_ready());
    held.store.close().await;
}
