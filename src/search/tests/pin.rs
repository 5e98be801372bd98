//! A pinned commit (`SearchIndex::pin`): searches answer from it, whole, while later commits
//! hold part of a change and a merge deletes its segments' files; dropped, the last commit
//! answers again.

use super::*;
use crate::search::error::lock;

/// How many entries the catalog holds; every search asks for all of them.
const ENTRIES: usize = 1_000;

fn old_entry(number: usize) -> Entry {
    entry(
        "docs",
        &format!("x://{number:04}"),
        &format!("doc{number}"),
        "",
        "walrus text",
    )
}

fn new_entry(number: usize) -> Entry {
    entry(
        "docs",
        &format!("x://{number:04}"),
        &format!("doc{number}"),
        "",
        "narwhal text",
    )
}

/// One batch of a split catch-up: entries `numbers` changed, committed at `generation`.
fn batch(index: &SearchIndex, generation: u64, numbers: std::ops::Range<usize>) {
    index
        .apply_kinds(vec![ServerDiff {
            generation,
            server: "docs".into(),
            kind: Kind::Resource,
            replace: false,
            removed: Vec::new(),
            upserted: numbers.map(new_entry).collect(),
        }])
        .expect("batch");
}

/// How many entries a search finds (each URI once: every entry when it is `ENTRIES`), and
/// the generation of the commit that answered.
fn every_uri(index: &SearchIndex, word: &str) -> (usize, u64) {
    let mut query = SearchRequest::new(word, ENTRIES + 1);
    query.deadline = Some(Instant::now() + Duration::from_secs(60));
    let page = index.search(&query).expect("search");
    let uris: std::collections::BTreeSet<String> =
        page.hits.into_iter().map(|hit| hit.uri).collect();
    (uris.len(), page.generation)
}

/// The files in the index's directory.
fn files(directory: &Path) -> Vec<String> {
    std::fs::read_dir(directory)
        .expect("read the directory")
        .map(|file| {
            file.expect("entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .collect()
}

#[test]
fn a_pinned_commit_answers_whole_while_later_commits_hold_part_of_a_change_and_its_files_are_deleted(
) {
    let directory = tempfile::tempdir().expect("tempdir");
    let (index, _) = open(directory.path());
    index
        .set_priorities(&priorities(&[("docs", 10)]))
        .expect("priorities");
    load(&index, 1, "docs", (0..ENTRIES).map(old_entry).collect());
    index.set_phase(Phase::Ready);

    let pin = index.pin(index.last_commit().expect("a commit"));
    index.set_phase(Phase::CatchingUp);
    assert_eq!(index.status().pinned_generation, Some(1));
    // Two batches of the change committed at the old generation, as a split catch-up does.
    batch(&index, 1, 0..300);
    batch(&index, 1, 300..600);
    let live = |word: &str| {
        let mut query = SearchRequest::new(word, ENTRIES + 1);
        query.deadline = Some(Instant::now() + Duration::from_secs(60));
        crate::search::query::run(
            &index.reader.searcher(),
            &index.fields,
            &query,
            Instant::now() + Duration::from_secs(60),
            Duration::from_secs(60),
            0,
        )
        .expect("search")
        .hits
        .len()
    };
    assert_eq!(
        (live("walrus"), live("narwhal")),
        (400, 600),
        "the last commit holds part of the change"
    );
    assert_eq!(every_uri(&index, "walrus"), (ENTRIES, 1));
    assert_eq!(every_uri(&index, "narwhal"), (0, 1));

    // Every segment merged into one, and the files no commit lists deleted: the pinned
    // commit's segments are gone from the directory, and it still answers, texts included.
    let pinned_segments: Vec<String> = lock(&index.pinned)
        .as_ref()
        .expect("pinned")
        .searcher
        .segment_readers()
        .iter()
        .map(|segment| segment.segment_id().uuid_string())
        .collect();
    {
        let mut writer = lock(&index.writer);
        let segments = index.index.searchable_segment_ids().expect("segments");
        assert!(segments.len() > 1, "{segments:?}");
        writer.merge(&segments).wait().expect("merge");
        writer.garbage_collect_files().wait().expect("collect");
    }
    index.reader.reload().expect("reload");
    let left = files(directory.path());
    for segment in &pinned_segments {
        assert!(
            !left.iter().any(|file| file.starts_with(segment.as_str())),
            "segment {segment} of the pinned commit is still on disk: {left:?}"
        );
    }
    let mut query = SearchRequest::new("walrus", ENTRIES + 1);
    query.deadline = Some(Instant::now() + Duration::from_secs(60));
    let page = index.search(&query).expect("search");
    assert_eq!(page.hits.len(), ENTRIES);
    assert!(page.hits.iter().all(
        |hit| hit.name.starts_with("doc") && hit.description.as_deref() == Some("walrus text")
    ));
    assert_eq!(every_uri(&index, "narwhal"), (0, 1));

    // The last batch at the new generation; once the index is ready and the pin dropped,
    // the last commit answers.
    batch(&index, 2, 600..ENTRIES);
    index.set_phase(Phase::Ready);
    assert_eq!(
        every_uri(&index, "narwhal"),
        (ENTRIES, 2),
        "ready: the last commit answers, pinned or not"
    );
    drop(pin);
    assert_eq!(index.status().pinned_generation, None);
    assert!(lock(&index.pinned).is_none());
    assert_eq!(every_uri(&index, "walrus"), (0, 2));
    assert_eq!(every_uri(&index, "narwhal"), (ENTRIES, 2));
}
