//! Unit tests of the search index: query semantics, the merged view, and repair after faults.

use super::*;

fn entry(server: &str, uri: &str, name: &str, title: &str, description: &str) -> Entry {
    Entry {
        server: server.into(),
        uri: uri.into(),
        name: name.into(),
        title: (!title.is_empty()).then(|| title.into()),
        description: (!description.is_empty()).then(|| description.into()),
        mime_type: Some("text/plain".into()),
        kind: Kind::Resource,
        inputs: None,
    }
}

/// A tool (or prompt, with `kind`) of `server`; `inputs` are its property names and texts.
fn tool(kind: Kind, server: &str, name: &str, description: &str, inputs: &str) -> Entry {
    Entry {
        kind,
        server: server.into(),
        uri: String::new(),
        name: name.into(),
        title: None,
        description: (!description.is_empty()).then(|| description.into()),
        mime_type: None,
        inputs: (!inputs.is_empty()).then(|| inputs.into()),
    }
}

fn priorities(servers: &[(&str, i64)]) -> Priorities {
    servers
        .iter()
        .map(|(name, priority)| (name.to_string(), *priority))
        .collect()
}

fn open(directory: &Path) -> (SearchIndex, Opened) {
    SearchIndex::open(directory, 4).expect("open")
}

fn load(index: &SearchIndex, generation: u64, server: &str, entries: Vec<Entry>) {
    index
        .apply(ServerDiff {
            generation,
            server: server.into(),
            kind: entries.first().map_or(Kind::Resource, |entry| entry.kind),
            replace: true,
            removed: Vec::new(),
            upserted: entries,
        })
        .expect("apply");
}

fn uris(index: &SearchIndex, query: SearchQuery) -> Vec<String> {
    index
        .search(&query)
        .expect("search")
        .hits
        .into_iter()
        .map(|hit| hit.uri)
        .collect()
}

fn find(index: &SearchIndex, text: &str) -> Vec<String> {
    uris(index, SearchQuery::new(text, 50))
}

/// A small catalog of one server.
fn catalog(directory: &Path) -> SearchIndex {
    let (index, opened) = open(directory);
    assert_eq!(opened, Opened::Created);
    index
        .set_priorities(&priorities(&[("docs", 10)]))
        .expect("priorities");
    load(
        &index,
        1,
        "docs",
        vec![
            entry(
                "docs",
                "file:///guide/readme.md",
                "readme",
                "Read me first",
                "How to start",
            ),
            entry(
                "docs",
                "file:///api/errors.md",
                "errors",
                "Error codes",
                "Every (odd) error: -32602 and NEAR misses",
            ),
            entry(
                "docs",
                "file:///caf\u{e9}/men\u{fc}.txt",
                "men\u{fc}",
                "Caf\u{e9} men\u{fc}",
                "Gr\u{fc}\u{df}e aus K\u{f6}ln",
            ),
            entry(
                "docs",
                "file:///notes/start.md",
                "notes",
                "Notes",
                "Mentions readme in passing",
            ),
            entry(
                "docs",
                "file:///deep/document.md",
                "deep",
                "Deep dive",
                "A long document about errors and readme files",
            ),
        ],
    );
    index
}

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
        .search(&SearchQuery::new("error codes", 10))
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
        .search(&SearchQuery::new("README", 10))
        .expect("search");
    assert!(page.hits[0].exact);
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
        .search(&SearchQuery::new("erorrs", 10))
        .expect("search");
    assert_eq!(page.mode, MatchMode::Typo);
    assert!(page
        .hits
        .iter()
        .any(|hit| hit.uri == "file:///api/errors.md"));
    // Short words get no typo tolerance.
    let page = index.search(&SearchQuery::new("nots", 10)).expect("search");
    assert!(page.hits.is_empty(), "{page:?}");
    let page = index
        .search(&SearchQuery::new("readme zebra", 10))
        .expect("search");
    assert_eq!(page.mode, MatchMode::Any);
    assert_eq!(page.hits.len(), 3);
    let page = index
        .search(&SearchQuery::new("zebra", 10))
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
        if let Err(error) = index.search(&SearchQuery::new(query, 10)) {
            panic!("{query:?} failed: {error}");
        }
    }
    assert_eq!(find(&index, "(odd"), vec!["file:///api/errors.md"]);
    assert_eq!(find(&index, "NEAR"), vec!["file:///api/errors.md"]);
    // "title" is no word of the catalog, so this finds entries with any of the words.
    let page = index
        .search(&SearchQuery::new("title:readme", 10))
        .expect("search");
    assert_eq!((page.mode, page.hits.len()), (MatchMode::Any, 3));
    assert_eq!(find(&index, "read*").len(), 3);
}

#[test]
fn snippets_mark_matches_with_bounded_markers_and_cursors_page() {
    let directory = tempfile::tempdir().expect("tempdir");
    let index = catalog(&directory.path().join("catalog.search"));
    let mut query = SearchQuery::new("error", 10);
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
    let mut query = SearchQuery::new("file", 2);
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

#[test]
fn filters_and_the_merged_view() {
    let directory = tempfile::tempdir().expect("tempdir");
    let (index, _) = open(&directory.path().join("catalog.search"));
    index
        .set_priorities(&priorities(&[("alpha", 10), ("beta", 5), ("gamma", 10)]))
        .expect("priorities");
    load(
        &index,
        1,
        "alpha",
        vec![
            entry("alpha", "shared://one", "one", "Shared one", "from alpha"),
            entry("alpha", "alpha://only", "only", "Alpha only", "from alpha"),
        ],
    );
    load(
        &index,
        2,
        "beta",
        vec![entry(
            "beta",
            "shared://one",
            "one",
            "Shared one",
            "from beta",
        )],
    );
    load(
        &index,
        3,
        "gamma",
        vec![entry(
            "gamma",
            "shared://one",
            "one",
            "Shared one",
            "from gamma",
        )],
    );
    let servers_of = |query: SearchQuery| -> Vec<(String, String)> {
        index
            .search(&query)
            .expect("search")
            .hits
            .into_iter()
            .map(|hit| (hit.server, hit.uri))
            .collect()
    };
    // Merged: one hit per URI, beta wins by priority.
    assert_eq!(
        servers_of(SearchQuery::new("shared", 10)),
        vec![("beta".into(), "shared://one".into())]
    );
    let mut only_alpha = SearchQuery::new("shared", 10);
    only_alpha.server = Some("alpha".into());
    assert_eq!(
        servers_of(only_alpha.clone()),
        vec![("alpha".into(), "shared://one".into())]
    );
    // A loser's own words do not find the URI in the merged view.
    assert_eq!(
        servers_of(SearchQuery::new("alpha", 10)),
        vec![("alpha".into(), "alpha://only".into())]
    );
    // Beta stops listing it: alpha and gamma tie on priority, the lower name wins.
    index
        .apply(ServerDiff {
            generation: 4,
            server: "beta".into(),
            kind: Kind::Resource,
            replace: false,
            removed: vec!["shared://one".into()],
            upserted: Vec::new(),
        })
        .expect("apply");
    assert_eq!(
        servers_of(SearchQuery::new("shared", 10)),
        vec![("alpha".into(), "shared://one".into())]
    );
    // Priorities change: gamma now wins.
    index
        .set_priorities(&priorities(&[("alpha", 10), ("beta", 5), ("gamma", 1)]))
        .expect("priorities");
    assert_eq!(
        servers_of(SearchQuery::new("shared", 10)),
        vec![("gamma".into(), "shared://one".into())]
    );
    // Gamma is dropped from the configuration: alpha wins again.
    index
        .set_priorities(&priorities(&[("alpha", 10), ("beta", 5)]))
        .expect("priorities");
    assert_eq!(
        servers_of(SearchQuery::new("shared", 10)),
        vec![("alpha".into(), "shared://one".into())]
    );
    assert_eq!(index.generation(), Some(4));
    // Filters by MIME type and kind are index terms too.
    let mut json_only = SearchQuery::new("alpha", 10);
    json_only.mime_type = Some("application/json".into());
    assert!(servers_of(json_only).is_empty());
    let mut resources = SearchQuery::new("alpha", 10);
    resources.kinds = vec![Kind::Resource];
    assert_eq!(servers_of(resources).len(), 2);
    let mut tools = SearchQuery::new("alpha", 10);
    tools.kinds = vec![Kind::Tool];
    assert!(servers_of(tools).is_empty());
}

#[test]
fn diffs_and_a_rebuild_agree() {
    let directory = tempfile::tempdir().expect("tempdir");
    let servers = priorities(&[("a", 1), ("b", 2)]);
    let (incremental, _) = open(&directory.path().join("one.search"));
    incremental.set_priorities(&servers).expect("priorities");
    let make = |server: &str, range: std::ops::Range<usize>| -> Vec<Entry> {
        range
            .map(|index| {
                entry(
                    server,
                    &format!("shared://{index:04}"),
                    &format!("doc-{index:04}"),
                    &format!("Document {index}"),
                    &format!(
                        "Synthetic document number {index} about topic-{} from {server}",
                        index % 7
                    ),
                )
            })
            .collect()
    };
    load(&incremental, 1, "a", make("a", 0..300));
    load(&incremental, 2, "b", make("b", 200..400));
    incremental
        .apply(ServerDiff {
            generation: 3,
            server: "a".into(),
            kind: Kind::Resource,
            replace: false,
            removed: (250..300)
                .map(|index| format!("shared://{index:04}"))
                .collect(),
            upserted: make("a", 0..10)
                .into_iter()
                .map(|mut entry| {
                    entry.title = Some("Changed title".into());
                    entry
                })
                .collect::<Vec<_>>(),
        })
        .expect("apply");

    let (rebuilt, _) = open(&directory.path().join("two.search"));
    let mut every: Vec<Entry> = make("a", 0..250)
        .into_iter()
        .map(|mut entry| {
            if entry.uri.as_str() < "shared://0010" {
                entry.title = Some("Changed title".into());
            }
            entry
        })
        .chain(make("b", 200..400))
        .collect();
    every.sort_by(|x, y| x.uri.cmp(&y.uri).then(x.server.cmp(&y.server)));
    let total = every.len() as u64;
    rebuilt.rebuild(&servers, 3, total, every).expect("rebuild");
    assert_eq!(rebuilt.status().documents, 450);
    assert_eq!(incremental.status().documents, 450);
    for text in [
        "document",
        "topic 3",
        "changed",
        "from b",
        "from a",
        "doc-02",
        "synthetic 1",
    ] {
        let everything = |index: &SearchIndex| {
            let mut query = SearchQuery::new(text, 1000);
            query.time_limit = Duration::from_secs(30);
            let mut found: Vec<(String, String)> = index
                .search(&query)
                .expect("search")
                .hits
                .into_iter()
                .map(|hit| (hit.server, hit.uri))
                .collect();
            found.sort();
            found
        };
        assert_eq!(everything(&incremental), everything(&rebuilt), "{text}");
    }
    // 250..300 came from b alone after a removed them; 200..250 are shared and a wins.
    let found = uris(&incremental, SearchQuery::new("from b", 1000));
    assert_eq!(found.len(), 150);
    let unordered = vec![
        entry("a", "z://1", "z", "", ""),
        entry("a", "a://1", "a", "", ""),
    ];
    assert!(matches!(
        rebuilt.rebuild(&servers, 4, 2, unordered),
        Err(SearchError::Unordered { .. })
    ));
    assert_eq!(rebuilt.generation(), Some(3));
}

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
    let mut query = SearchQuery::new("readme", 10);
    query.time_limit = Duration::from_millis(50);
    let started = Instant::now();
    assert!(matches!(index.search(&query), Err(SearchError::Busy)));
    assert!(started.elapsed() >= Duration::from_millis(50));
    drop(held);
    assert_eq!(index.search(&query).expect("search").hits.len(), 3);
    query.time_limit = Duration::ZERO;
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

/// Every kind in one index: a tool found by a word of an input property, the kinds filter an
/// index term (a tools search never returns the many resources that match better), exact
/// names first, templates by their URI template and name, and each kind's own diffs.
#[test]
fn every_kind_in_one_index_with_kinds_as_a_filter() {
    let directory = tempfile::tempdir().expect("tempdir");
    let (index, _) = open(&directory.path().join("catalog.search"));
    index
        .set_priorities(&priorities(&[("docs", 10), ("tools", 20), ("wiki", 30)]))
        .expect("priorities");
    // Many resources that say "weather" in name and title, which outrank a description.
    load(
        &index,
        1,
        "docs",
        (0..40)
            .map(|i| {
                entry(
                    "docs",
                    &format!("file:///weather/{i}"),
                    &format!("weather-{i}"),
                    "Weather report",
                    "weather weather",
                )
            })
            .collect(),
    );
    load(
        &index,
        2,
        "tools",
        vec![
            tool(
                Kind::Tool,
                "tools",
                "get_forecast",
                "Forecast for a place",
                "city The city whose weather is wanted",
            ),
            tool(Kind::Tool, "tools", "weather", "Current conditions", ""),
        ],
    );
    load(
        &index,
        3,
        "tools",
        vec![tool(
            Kind::Prompt,
            "tools",
            "summarize",
            "Summarize a text",
            "style Bullet points or prose",
        )],
    );
    let mut template = entry(
        "wiki",
        "wiki://pages/{title}",
        "page-by-title",
        "Page by title",
        "A wiki page",
    );
    template.kind = Kind::Template;
    load(&index, 4, "wiki", vec![template]);
    assert_eq!(index.status().documents, 44);

    let found = |text: &str, kinds: &[Kind], limit: usize| -> Vec<(Kind, String)> {
        let mut query = SearchQuery::new(text, limit);
        query.kinds = kinds.to_vec();
        index
            .search(&query)
            .expect("search")
            .hits
            .into_iter()
            .map(|hit| (hit.kind, hit.name))
            .collect()
    };
    // A word only an input property's description has.
    assert_eq!(
        found("city", &[], 10),
        vec![(Kind::Tool, "get_forecast".to_string())]
    );
    // 41 entries say "weather"; tools only, with a limit below the resources that match.
    assert_eq!(
        found("weather", &[Kind::Tool], 5),
        vec![
            (Kind::Tool, "weather".to_string()),
            (Kind::Tool, "get_forecast".to_string())
        ]
    );
    let two_kinds = found("weather", &[Kind::Tool, Kind::Prompt], 5);
    assert!(
        two_kinds.iter().all(|(kind, _)| *kind == Kind::Tool),
        "{two_kinds:?}"
    );
    assert_eq!(two_kinds.len(), 2);
    let three_kinds = found("weather", &[Kind::Template, Kind::Tool, Kind::Prompt], 50);
    assert_eq!(three_kinds.len(), 2, "{three_kinds:?}");
    assert_eq!(found("weather", &[Kind::Resource], 50).len(), 40);
    // The exact name comes first, whatever the kinds.
    assert_eq!(
        found("weather", &[], 3)[0],
        (Kind::Tool, "weather".to_string())
    );
    assert_eq!(found("weather", &[], 100).len(), 42);
    // Prompts by an argument's description; templates by URI template words and name.
    assert_eq!(
        found("bullet", &[], 10),
        vec![(Kind::Prompt, "summarize".to_string())]
    );
    assert_eq!(
        found("wiki://pages/{title}", &[], 10)[0],
        (Kind::Template, "page-by-title".to_string())
    );
    assert_eq!(
        found("page-by-title", &[Kind::Template], 10),
        vec![(Kind::Template, "page-by-title".to_string())]
    );
    let hit = &index
        .search(&SearchQuery::new("forecast", 10))
        .expect("search")
        .hits[0];
    assert_eq!((hit.uri.as_str(), hit.server.as_str()), ("", "tools"));

    // A change of one tool leaves the other kinds of its server alone.
    index
        .apply(ServerDiff {
            generation: 5,
            server: "tools".into(),
            kind: Kind::Tool,
            replace: false,
            removed: vec!["weather".into()],
            upserted: vec![tool(
                Kind::Tool,
                "tools",
                "get_forecast",
                "Forecast for a place",
                "town The town whose sky is wanted",
            )],
        })
        .expect("apply");
    assert!(found("city", &[], 10).is_empty());
    assert_eq!(found("town", &[], 10).len(), 1);
    assert_eq!(found("weather", &[Kind::Tool], 5), Vec::new());
    assert_eq!(found("bullet", &[], 10).len(), 1, "the prompt stays");
    // Replacing a server's prompts leaves its tools.
    index
        .apply(ServerDiff {
            generation: 6,
            server: "tools".into(),
            kind: Kind::Prompt,
            replace: true,
            removed: Vec::new(),
            upserted: Vec::<Entry>::new(),
        })
        .expect("apply");
    assert!(found("bullet", &[], 10).is_empty());
    assert_eq!(found("town", &[], 10).len(), 1);

    // Two servers' tools of one name are two tools, both found; templates merge by URI
    // template like resources.
    load(
        &index,
        7,
        "docs",
        vec![tool(
            Kind::Tool,
            "docs",
            "get_forecast",
            "Another forecast",
            "",
        )],
    );
    assert_eq!(found("forecast", &[Kind::Tool], 10).len(), 2);
    let mut copy = entry(
        "docs",
        "wiki://pages/{title}",
        "page-copy",
        "Page by title",
        "A copy",
    );
    copy.kind = Kind::Template;
    load(&index, 8, "docs", vec![copy]);
    let pages = index
        .search(&SearchQuery::new("page", 10))
        .expect("search")
        .hits;
    assert_eq!(pages.len(), 1, "{pages:?}");
    assert_eq!(pages[0].server, "docs", "docs has the lower priority");

    // A rebuild from the same entries, in the order the store gives them, agrees.
    let (rebuilt, _) = open(&directory.path().join("rebuilt.search"));
    let mut resources: Vec<Entry> = (0..40)
        .map(|i| {
            entry(
                "docs",
                &format!("file:///weather/{i}"),
                &format!("weather-{i}"),
                "Weather report",
                "weather weather",
            )
        })
        .collect();
    resources.sort_by(|a, b| a.uri.cmp(&b.uri));
    let mut wiki_page = entry(
        "wiki",
        "wiki://pages/{title}",
        "page-by-title",
        "Page by title",
        "A wiki page",
    );
    wiki_page.kind = Kind::Template;
    let mut docs_page = entry(
        "docs",
        "wiki://pages/{title}",
        "page-copy",
        "Page by title",
        "A copy",
    );
    docs_page.kind = Kind::Template;
    let every: Vec<Entry> = resources
        .into_iter()
        .chain([docs_page, wiki_page])
        .chain([
            tool(Kind::Tool, "docs", "get_forecast", "Another forecast", ""),
            tool(
                Kind::Tool,
                "tools",
                "get_forecast",
                "Forecast for a place",
                "town The town whose sky is wanted",
            ),
        ])
        .collect();
    let servers = index.priorities();
    rebuilt.rebuild(&servers, 8, 0, every).expect("rebuild");
    assert_eq!(rebuilt.status().documents, index.status().documents);
    for text in ["weather", "forecast", "town", "page", "title"] {
        let everything = |index: &SearchIndex| {
            let mut hits: Vec<(Kind, String, String, String)> = index
                .search(&SearchQuery::new(text, 100))
                .expect("search")
                .hits
                .into_iter()
                .map(|hit| (hit.kind, hit.server, hit.uri, hit.name))
                .collect();
            hits.sort();
            hits
        };
        assert_eq!(everything(&index), everything(&rebuilt), "{text}");
    }
    // Tools before templates is out of the rebuild's order.
    let unordered = vec![tool(Kind::Tool, "a", "t", "", ""), {
        let mut template = entry("a", "x://{y}", "x", "", "");
        template.kind = Kind::Template;
        template
    }];
    assert!(matches!(
        rebuilt.rebuild(&servers, 9, 2, unordered),
        Err(SearchError::Unordered { .. })
    ));
}

/// A first load built beside the index (`prebuild`) and adopted in one commit: searches see
/// none of it before and all of it after; later diffs change and remove its entries like any
/// other's; a load whose URIs another server lists is refused (its flags would be wrong).
#[test]
fn a_load_built_beside_the_index_is_adopted_whole_and_changes_like_any_other() {
    use crate::store::LoadEvent;
    let directory = tempfile::tempdir().expect("tempdir");
    let (index, _) = open(&directory.path().join("index"));
    let index = std::sync::Arc::new(index);
    index
        .set_priorities(&priorities(&[("docs", 10), ("big", 20)]))
        .expect("priorities");
    load(
        &index,
        1,
        "docs",
        vec![entry("docs", "x://shared", "shared", "", "alpha")],
    );
    let big = |range: std::ops::Range<usize>, word: &str| -> Vec<Entry> {
        range
            .map(|i| entry("big", &format!("b://{i}"), &format!("b{i}"), "", word))
            .collect()
    };
    // The walk's room for pages on their way to the index; each is given back once written.
    let room = std::sync::Arc::new(tokio::sync::Semaphore::new(12));
    let permit = || room.clone().try_acquire_owned().expect("room");
    let (feed, events) = std::sync::mpsc::channel();
    for page in 0..12 {
        let first = page as i64 * 1000 + 1;
        feed.send(LoadEvent::Page {
            id: -7,
            server: "big".into(),
            ids: (first, first + 999),
            entries: big(page * 1000..(page + 1) * 1000, "gamma"),
            room: permit(),
        })
        .expect("page");
    }
    feed.send(LoadEvent::Promoted {
        id: -7,
        resources: 12_000,
        ranges: vec![(1, 12_000)],
    })
    .expect("promoted");
    drop(feed);
    let database = directory.path().join("no.db");
    index
        .prebuilder
        .clone()
        .run(index.clone(), events, &database);
    assert_eq!(room.available_permits(), 12, "every page's room given back");
    let mut all = SearchQuery::new("gamma", 20_000);
    all.time_limit = Duration::from_secs(30);
    assert!(
        uris(&index, all.clone()).is_empty(),
        "seen before its commit"
    );
    let built = index
        .prebuilder
        .take("big", -7, 12_000, Duration::from_secs(1))
        .expect("built");
    assert!(index.adopt_load(built, 2).expect("adopt"));
    assert_eq!(uris(&index, all.clone()).len(), 12_000);
    assert_eq!(index.generation(), Some(2));
    // A change and a removal reach the adopted segments.
    index
        .apply(ServerDiff {
            generation: 3,
            server: "big".into(),
            kind: Kind::Resource,
            replace: false,
            removed: vec!["b://1".into()],
            upserted: vec![entry("big", "b://0", "b0", "", "delta")],
        })
        .expect("change");
    assert_eq!(uris(&index, all.clone()).len(), 11_998);
    assert_eq!(find(&index, "delta"), vec!["b://0".to_string()]);

    // Another load lists a URI of `docs`: refused, and nothing changes.
    let (feed, events) = std::sync::mpsc::channel();
    let mut entries = big(20_000..31_000, "epsilon");
    for entry in &mut entries {
        entry.server = "copy".into();
    }
    entries[5].uri = "x://shared".into();
    feed.send(LoadEvent::Page {
        id: -8,
        server: "copy".into(),
        ids: (20_001, 31_000),
        entries,
        room: permit(),
    })
    .expect("page");
    feed.send(LoadEvent::Promoted {
        id: -8,
        resources: 11_000,
        ranges: vec![(20_001, 31_000)],
    })
    .expect("promoted");
    drop(feed);
    index
        .prebuilder
        .clone()
        .run(index.clone(), events, &database);
    let built = index
        .prebuilder
        .take("copy", -8, 11_000, Duration::from_secs(1))
        .expect("built");
    assert!(!index.adopt_load(built, 4).expect("adopt"));
    assert!(find(&index, "epsilon").is_empty());
    assert_eq!(index.generation(), Some(3));
    // A load whose count differs from the committed one's is not handed out.
    assert!(index
        .prebuilder
        .take("copy", -8, 11_000, Duration::from_millis(10))
        .is_none());
}
