//! The index on disk and its bounds: generations, faults, the searcher slots, status, unclean stops.

use super::*;

#[test]
fn generations_persist_and_faults_are_detected() {
    let directory = tempfile::tempdir().expect("tempdir");
    let path = directory.path().join("catalog.search");
    {
        let index = catalog(&path);
        assert_eq!(index.generation(), Some(1));
        assert!(index.status().bytes > 0);
    }
    let (index, opened) = open(&path);
    assert_eq!(opened, Opened::Existing);
    assert_eq!(index.repair_needed(1), Repair::Nothing);
    assert_eq!(index.repair_needed(5), Repair::CatchUp { from: 1 });
    assert!(matches!(index.repair_needed(0), Repair::Rebuild { .. }));
    assert_eq!(index.status().documents, 5);
    assert_eq!(index.priorities(), priorities(&[("docs", 10)]));
    drop(index);

    // Deleted: a new empty index that needs a rebuild.
    std::fs::remove_dir_all(&path).expect("remove");
    let (index, opened) = open(&path);
    assert_eq!(opened, Opened::Created);
    assert!(matches!(index.repair_needed(1), Repair::Rebuild { .. }));
    load(&index, 7, "docs", vec![entry("docs", "x://1", "x", "", "")]);
    drop(index);

    // An older schema version in the commit payload: reset.
    let meta_path = path.join("meta.json");
    let meta = std::fs::read_to_string(&meta_path).expect("meta");
    let older = meta.replace(
        &format!("\\\"schema\\\":{SCHEMA_VERSION}"),
        &format!("\\\"schema\\\":{}", SCHEMA_VERSION - 1),
    );
    assert_ne!(meta, older, "{meta}");
    std::fs::write(&meta_path, older).expect("write");
    let (index, opened) = open(&path);
    assert!(matches!(opened, Opened::Reset { .. }), "{opened:?}");
    assert_eq!(index.generation(), None);
    load(&index, 8, "docs", vec![entry("docs", "x://1", "x", "", "")]);
    drop(index);

    // Corrupt: garbage where tantivy keeps its metadata.
    std::fs::write(&meta_path, b"{ not json").expect("write");
    let (index, opened) = open(&path);
    assert!(matches!(opened, Opened::Reset { .. }), "{opened:?}");
    assert_eq!(index.status().documents, 0);
    drop(index);

    // A directory that is not ours is never emptied.
    let foreign = directory.path().join("foreign.search");
    std::fs::create_dir_all(&foreign).expect("mkdir");
    std::fs::write(foreign.join("meta.json"), b"{").expect("write");
    assert!(matches!(
        SearchIndex::open(&foreign, 1),
        Err(SearchError::NotOurs { .. })
    ));
    assert!(foreign.join("meta.json").exists());
}

#[test]
fn searches_beyond_the_limit_wait_and_time_out() {
    let directory = tempfile::tempdir().expect("tempdir");
    let index = catalog(&directory.path().join("catalog.search"));
    let slots = &index.slots;
    let held: Vec<SearcherSlot<'_>> = (0..4)
        .map(|_| slots.enter(Instant::now()).expect("a free slot"))
        .collect();
    let mut query = SearchRequest::new("readme", 10);
    query.deadline = Some(Instant::now() + Duration::from_millis(50));
    let started = Instant::now();
    assert!(matches!(index.search(&query), Err(SearchError::Busy)));
    assert!(started.elapsed() >= Duration::from_millis(50));
    drop(held);
    query.deadline = Some(Instant::now() + Duration::from_secs(2));
    assert_eq!(index.search(&query).expect("search").hits.len(), 3);
    query.deadline = Some(Instant::now() + Duration::ZERO);
    assert!(matches!(
        index.search(&query),
        Err(SearchError::TimedOut(_) | SearchError::Busy)
    ));
}

#[test]
fn status_reports_phase_generation_documents_and_bytes() {
    let directory = tempfile::tempdir().expect("tempdir");
    let index = catalog(&directory.path().join("catalog.search"));
    let mut watcher = index.watch();
    index.set_phase(Phase::Ready);
    assert!(index.is_ready());
    assert!(watcher.has_changed().unwrap_or(false));
    let status = serde_json::to_value(watcher.borrow_and_update().clone()).expect("json");
    assert_eq!(status["state"], "ready");
    assert_eq!(status["generation"], 1);
    assert_eq!(status["documents"], 5);
    index.set_phase(Phase::Rebuilding { percent: 42 });
    let status = serde_json::to_value(index.status()).expect("json");
    assert_eq!(status["state"], "rebuilding");
    assert_eq!(status["percent"], 42);
    assert!(!index.is_ready());
}

#[test]
fn files_are_checked_after_an_unclean_stop_only() {
    let directory = tempfile::tempdir().expect("tempdir");
    let path = directory.path().join("catalog.search");
    {
        let index = catalog(&path);
        index.close();
    }
    let (index, _) = open(&path);
    assert_eq!(index.damage(), None, "a clean close is trusted");
    drop(index);
    // No close this time (as after kill -9), and a segment file damaged (as after a power cut).
    let segment = std::fs::read_dir(&path)
        .expect("read_dir")
        .flatten()
        .map(|entry| entry.path())
        .find(|path| path.extension().is_some_and(|extension| extension == "idx"))
        .expect("a segment's term file");
    let mut bytes = std::fs::read(&segment).expect("read");
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0xff;
    std::fs::write(&segment, bytes).expect("write");
    let (index, opened) = open(&path);
    assert_eq!(opened, Opened::Existing);
    let damage = index.damage().expect("the damage is found");
    assert!(damage.contains("damaged"), "{damage}");
}
