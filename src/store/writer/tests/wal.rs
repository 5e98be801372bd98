//! The write-ahead log: a first load copied once committed, the log's bounds, readers that overlap.

use super::*;

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
    let mut counts = StagedCounts::against(&connection, "large", false).expect("counts");
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
        wal.after_write(&connection, false, false);
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
