//! What the writer's tests share: servers, resource rows, a writer connection or a store on a
//! real file, staging and swapping as the writer does, and polling with a deadline.

use super::*;

pub(super) fn configured(names: &[&str]) -> ServerSync {
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
pub(super) fn resource(server: &str, index: usize, word: &str) -> ResourceRow {
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

pub(super) fn resources(
    server: &str,
    indexes: std::ops::Range<usize>,
    word: &str,
) -> Vec<ResourceRow> {
    indexes.map(|index| resource(server, index, word)).collect()
}

/// A writer connection on a real database file, with the servers recorded.
pub(super) fn writer_connection(path: &std::path::Path, servers: &[&str]) -> Connection {
    let mut connection = schema::open_writer(path).expect("open the database");
    connection.execute_batch(STAGING_SCHEMA).expect("staging");
    super::history::register_digest(&connection).expect("history_digest");
    sync_servers(&mut connection, &configured(servers)).expect("record the servers");
    connection
}

/// A store on `path` with `servers` configured.
pub(in crate::store::writer) async fn open_store(
    path: &std::path::Path,
    servers: &[&str],
) -> Store {
    let store = Store::open(path).expect("open");
    store
        .apply_servers(configured(servers))
        .await
        .expect("servers");
    store
}

/// Stages `rows` in pages of 100, in the writer's batches (`wal.rs`), all committed.
pub(super) fn stage_pages(
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
pub(super) fn stage_page(
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
pub(super) fn walk(
    connection: &mut Connection,
    walk_id: u64,
    server: &str,
    rows: &[ResourceRow],
    behind: &AtomicU64,
) -> SwapOutcome {
    let mut counts = StagedCounts::against(connection, server, false).expect("counts");
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

pub(super) fn full_text_matches(connection: &Connection, query: &str) -> i64 {
    connection
        .query_row(
            "SELECT count(*) FROM resources_fts WHERE resources_fts MATCH ?1",
            [query],
            |row| row.get(0),
        )
        .expect("match")
}

/// FTS5's own check that the index holds exactly the text of the content table's rows.
pub(super) fn assert_full_text_is_exact(connection: &Connection) {
    connection
        .execute(
            "INSERT INTO resources_fts (resources_fts, rank) VALUES ('integrity-check', 1)",
            [],
        )
        .expect("the full-text index matches the resources exactly");
}

/// Polls `ready` until it holds, failing after `limit`.
/// Waits (up to 300 s) until the full-text backlog is indexed.
pub(super) async fn backlog_indexed(store: &Store) {
    wait_until(
        "the backlog to be indexed",
        Duration::from_secs(300),
        async || store.full_text_note().is_none(),
    )
    .await;
}

pub(super) async fn wait_until(what: &str, limit: Duration, mut ready: impl AsyncFnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !ready().await {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Resources whose server id no server has: a first load's pending rows.
pub(super) fn pending_rows(path: &std::path::Path) -> i64 {
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

pub(super) async fn resources_of(store: &Store, server: &str) -> u64 {
    let status = store.read(|reader| reader.status()).await.expect("status");
    status
        .iter()
        .find(|row| row.name == server)
        .map_or(0, |row| row.resources)
}
