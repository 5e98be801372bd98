//! What the search index's tests share: entries and tools, priorities, an index opened or
//! loaded with one server's entries, and the URIs a query finds.

use super::*;

pub(super) fn entry(server: &str, uri: &str, name: &str, title: &str, description: &str) -> Entry {
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
pub(super) fn tool(kind: Kind, server: &str, name: &str, description: &str, inputs: &str) -> Entry {
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

pub(super) fn priorities(servers: &[(&str, i64)]) -> Priorities {
    servers
        .iter()
        .map(|(name, priority)| (name.to_string(), *priority))
        .collect()
}

pub(super) fn open(directory: &Path) -> (SearchIndex, Opened) {
    SearchIndex::open(directory, 4).expect("open")
}

pub(super) fn load(index: &SearchIndex, generation: u64, server: &str, entries: Vec<Entry>) {
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

pub(super) fn uris(index: &SearchIndex, query: SearchRequest) -> Vec<String> {
    index
        .search(&query)
        .expect("search")
        .hits
        .into_iter()
        .map(|hit| hit.uri)
        .collect()
}

pub(super) fn find(index: &SearchIndex, text: &str) -> Vec<String> {
    uris(index, SearchRequest::new(text, 50))
}

/// A small catalog of one server.
pub(super) fn catalog(directory: &Path) -> SearchIndex {
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
