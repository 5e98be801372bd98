//! Queries: words, prefixes, typos, ranking, hostile text, snippets and paging.

use super::*;

#[test]
fn words_all_match_and_the_last_is_a_prefix() {
    let directory = tempfile::tempdir().expect("tempdir");
    let index = catalog(&directory.path().join("catalog.search"));
    assert_eq!(find(&index, "error codes"), vec!["file:///api/errors.md"]);
    assert_eq!(find(&index, "rea"), find(&index, "readme"));
    assert_eq!(find(&index, "readme").len(), 3);
    // Both words must match: only the deep dive has "long" and a word starting with "read".
    assert_eq!(find(&index, "long read"), vec!["file:///deep/document.md"]);
    assert_eq!(
        find(&index, "cafe"),
        vec!["file:///caf\u{e9}/men\u{fc}.txt"]
    );
    assert_eq!(
        find(&index, "K\u{f6}ln"),
        vec!["file:///caf\u{e9}/men\u{fc}.txt"]
    );
    assert_eq!(find(&index, "-32602"), vec!["file:///api/errors.md"]);
    let page = index
        .search(&SearchRequest::new("error codes", 10))
        .expect("search");
    assert_eq!(page.mode, MatchMode::All);
    assert_eq!(page.generation, 1);
}

#[test]
fn exact_names_and_uris_rank_first_and_names_outrank_descriptions() {
    let directory = tempfile::tempdir().expect("tempdir");
    let index = catalog(&directory.path().join("catalog.search"));
    let found = find(&index, "readme");
    assert_eq!(found[0], "file:///guide/readme.md");
    let page = index
        .search(&SearchRequest::new("README", 10))
        .expect("search");
    assert_eq!(page.hits[0].name, "readme", "an exact name comes first");
    let found = find(&index, "file:///deep/document.md");
    assert_eq!(
        found.first().map(String::as_str),
        Some("file:///deep/document.md")
    );
    // "errors" is the name of one entry and in the description of another.
    assert_eq!(find(&index, "errors")[0], "file:///api/errors.md");
}

#[test]
fn nothing_for_all_words_falls_back_to_typos_then_to_any_word() {
    let directory = tempfile::tempdir().expect("tempdir");
    let index = catalog(&directory.path().join("catalog.search"));
    let page = index
        .search(&SearchRequest::new("erorrs", 10))
        .expect("search");
    assert_eq!(page.mode, MatchMode::Typo);
    assert!(page
        .hits
        .iter()
        .any(|hit| hit.uri == "file:///api/errors.md"));
    // Short words get no typo tolerance.
    let page = index
        .search(&SearchRequest::new("nots", 10))
        .expect("search");
    assert!(page.hits.is_empty(), "{page:?}");
    let page = index
        .search(&SearchRequest::new("readme zebra", 10))
        .expect("search");
    assert_eq!(page.mode, MatchMode::Any);
    assert_eq!(page.hits.len(), 3);
    let page = index
        .search(&SearchRequest::new("zebra", 10))
        .expect("search");
    assert!(page.hits.is_empty());
    assert_eq!(page.mode, MatchMode::All);
}

#[test]
fn hostile_text_is_plain_words() {
    let directory = tempfile::tempdir().expect("tempdir");
    let index = catalog(&directory.path().join("catalog.search"));
    let long = "readme ".repeat(10_000);
    for query in [
        "\"",
        "'",
        "-",
        "-readme",
        "title:readme",
        "*",
        "read*",
        "(readme",
        "NEAR(readme errors)",
        "readme AND",
        "^readme",
        "{uri}: x",
        "",
        "   ",
        long.as_str(),
        "\u{1f600}",
        "\0",
        "a\"b\"c",
        ".*",
        "\\",
        "[",
        "$^",
        "x{2}",
    ] {
        if let Err(error) = index.search(&SearchRequest::new(query, 10)) {
            panic!("{query:?} failed: {error}");
        }
    }
    assert_eq!(find(&index, "(odd"), vec!["file:///api/errors.md"]);
    assert_eq!(find(&index, "NEAR"), vec!["file:///api/errors.md"]);
    // "title" is no word of the catalog, so this finds entries with any of the words.
    let page = index
        .search(&SearchRequest::new("title:readme", 10))
        .expect("search");
    assert_eq!((page.mode, page.hits.len()), (MatchMode::Any, 3));
    assert_eq!(find(&index, "read*").len(), 3);
}

#[test]
fn snippets_mark_matches_with_bounded_markers_and_cursors_page() {
    let directory = tempfile::tempdir().expect("tempdir");
    let index = catalog(&directory.path().join("catalog.search"));
    let mut query = SearchRequest::new("error", 10);
    query.highlight = ("<".into(), ">".into());
    let page = index.search(&query).expect("search");
    let snippet = page.hits[0].snippet.clone().expect("a snippet");
    assert!(snippet.contains("<Error>"), "{snippet}");
    query.highlight = ("x".repeat(MAX_MARKER_BYTES + 1), ">".into());
    assert!(matches!(
        index.search(&query),
        Err(SearchError::InvalidQuery(_))
    ));

    let everything = find(&index, "file");
    assert_eq!(everything.len(), 5);
    let mut paged = Vec::new();
    let mut query = SearchRequest::new("file", 2);
    loop {
        let page = index.search(&query).expect("search");
        paged.extend(page.hits.into_iter().map(|hit| hit.uri));
        match page.next_offset {
            Some(next) => query.offset = next,
            None => break,
        }
    }
    assert_eq!(paged, everything);
}
