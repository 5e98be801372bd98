//! Writes: the merged view, diffs against a rebuild, every kind in one index.

use super::*;

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
    let servers_of = |query: SearchRequest| -> Vec<(String, String)> {
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
        servers_of(SearchRequest::new("shared", 10)),
        vec![("beta".into(), "shared://one".into())]
    );
    let mut only_alpha = SearchRequest::new("shared", 10);
    only_alpha.server = Some("alpha".into());
    assert_eq!(
        servers_of(only_alpha.clone()),
        vec![("alpha".into(), "shared://one".into())]
    );
    // A loser's own words do not find the URI in the merged view.
    assert_eq!(
        servers_of(SearchRequest::new("alpha", 10)),
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
        servers_of(SearchRequest::new("shared", 10)),
        vec![("alpha".into(), "shared://one".into())]
    );
    // Priorities change: gamma now wins.
    index
        .set_priorities(&priorities(&[("alpha", 10), ("beta", 5), ("gamma", 1)]))
        .expect("priorities");
    assert_eq!(
        servers_of(SearchRequest::new("shared", 10)),
        vec![("gamma".into(), "shared://one".into())]
    );
    // Gamma is dropped from the configuration: alpha wins again.
    index
        .set_priorities(&priorities(&[("alpha", 10), ("beta", 5)]))
        .expect("priorities");
    assert_eq!(
        servers_of(SearchRequest::new("shared", 10)),
        vec![("alpha".into(), "shared://one".into())]
    );
    assert_eq!(index.generation(), Some(4));
    // Filters by MIME type and kind are index terms too.
    let mut json_only = SearchRequest::new("alpha", 10);
    json_only.mime_type = Some("application/json".into());
    assert!(servers_of(json_only).is_empty());
    let mut resources = SearchRequest::new("alpha", 10);
    resources.kinds = vec![Kind::Resource];
    assert_eq!(servers_of(resources).len(), 2);
    let mut tools = SearchRequest::new("alpha", 10);
    tools.kinds = vec![Kind::Tool];
    assert!(servers_of(tools).is_empty());
}

#[test]
fn a_uri_holding_a_nul_is_a_group_of_its_own() {
    let directory = tempfile::tempdir().expect("tempdir");
    let (index, _) = open(&directory.path().join("catalog.search"));
    // Keys are `kind \0 URI \0 server`: unescaped, beta's first URI would be read as alpha's
    // URI listed by a server "beta\0beta", and lose to it in the merged view.
    load(
        &index,
        1,
        "beta",
        vec![
            entry("beta", "nul://a\0beta", "second", "", "nulcase"),
            entry("beta", "nul://a\u{1}0beta", "third", "", "nulcase"),
        ],
    );
    load(
        &index,
        2,
        "alpha",
        vec![entry("alpha", "nul://a", "first", "", "nulcase")],
    );
    let mut found = uris(&index, SearchRequest::new("nulcase", 10));
    found.sort();
    assert_eq!(found, ["nul://a", "nul://a\0beta", "nul://a\u{1}0beta"]);
    // The exact URI finds its own listing first.
    assert_eq!(
        uris(&index, SearchRequest::new("nul://a", 10))[0],
        "nul://a"
    );
    // Removing beta's listings leaves alpha's alone, still winning.
    index
        .apply(ServerDiff {
            generation: 3,
            server: "beta".into(),
            kind: Kind::Resource,
            replace: false,
            removed: vec!["nul://a\0beta".into(), "nul://a\u{1}0beta".into()],
            upserted: Vec::new(),
        })
        .expect("apply");
    assert_eq!(uris(&index, SearchRequest::new("nulcase", 10)), ["nul://a"]);
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
            let mut query = SearchRequest::new(text, 1000);
            query.deadline = Some(Instant::now() + Duration::from_secs(30));
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
    let found = uris(&incremental, SearchRequest::new("from b", 1000));
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
        let mut query = SearchRequest::new(text, limit);
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
        .search(&SearchRequest::new("forecast", 10))
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
        .search(&SearchRequest::new("page", 10))
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
                .search(&SearchRequest::new(text, 100))
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
        read_back: None,
    })
    .expect("promoted");
    drop(feed);
    let database = directory.path().join("no.db");
    index
        .prebuilder
        .clone()
        .run(index.clone(), events, &database);
    assert_eq!(room.available_permits(), 12, "every page's room given back");
    let mut all = SearchRequest::new("gamma", 20_000);
    all.deadline = Some(Instant::now() + Duration::from_secs(30));
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
        read_back: None,
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
