//! Index: what one entry costs each of the two indexes, measured in this process: the search
//! index (tantivy) replacing a server's listings with 200,000 resources shaped like the fast
//! peer's (the keeper's path for a large catch-up), the same entries on a large first load's
//! path (its builder's segments, written during the walk), and SQLite's FTS5 indexing the same rows
//! (the full-text backlog's statement). CPU seconds are this process's (tantivy's own threads
//! included), so a figure is a cost, not a wall-clock time that another core could hide.

use std::time::Instant;

use mcp_mirror::protocol::Kind;
use mcp_mirror::search::{Entry, SearchIndex, ServerDiff};

use crate::measure::cpu_seconds;
use crate::paths::work_dir;
use crate::report::{Report, Samples};

const RESOURCES: usize = 200_000;
const ROUNDS: usize = 3;

/// The fast peer's resource `index` (bench/fast-peer), as the index keeps it.
fn resource(index: usize) -> Entry {
    Entry {
        kind: Kind::Resource,
        server: "fast".into(),
        uri: format!("fast://fast/docs/{index:06}.md"),
        name: format!("doc-{index:06}"),
        title: Some(format!("Document {index}")),
        description: Some(format!(
            "Synthetic document number {index} about topic-{}",
            index % 37
        )),
        mime_type: Some("text/markdown".into()),
        inputs: None,
    }
}

fn own_cpu() -> f64 {
    cpu_seconds(std::process::id()).unwrap_or(f64::NAN)
}

/// Waits until this process uses no more CPU (its background threads done), at most 30 s.
fn settle() {
    let deadline = Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let before = own_cpu();
        std::thread::sleep(std::time::Duration::from_millis(200));
        if own_cpu() - before < 0.005 || Instant::now() > deadline {
            return;
        }
    }
}

/// Runs `index_them` on a new empty index in its own directory with the resources, and
/// returns the microseconds of CPU and of wall time it took per entry; the directory goes after.
fn index_round(
    name: &str,
    index_them: impl FnOnce(&SearchIndex, Vec<Entry>) -> anyhow::Result<()>,
) -> anyhow::Result<(f64, f64)> {
    let directory = work_dir().join(name);
    let _ = std::fs::remove_dir_all(&directory);
    std::fs::create_dir_all(&directory)?;
    let (index, _) = SearchIndex::open(&directory, 2)?;
    let entries: Vec<Entry> = (0..RESOURCES).map(resource).collect();
    let cpu = own_cpu();
    let started = Instant::now();
    index_them(&index, entries)?;
    let wall = started.elapsed().as_secs_f64();
    index.close();
    drop(index);
    // Tantivy's merges go on after its writer is dropped: they are this round's cost, and
    // would otherwise be counted in the next round's.
    settle();
    let cpu = own_cpu() - cpu;
    let _ = std::fs::remove_dir_all(&directory);
    let per_entry = |seconds: f64| seconds * 1e6 / RESOURCES as f64;
    Ok((per_entry(cpu), per_entry(wall)))
}

/// Microseconds of CPU and of wall time per entry for the search index's replace.
fn search_index_round(round: usize) -> anyhow::Result<(f64, f64)> {
    index_round(&format!("index-cost-{round}"), |index, entries| {
        index.apply(ServerDiff {
            generation: 1,
            server: "fast".into(),
            kind: Kind::Resource,
            replace: true,
            removed: Vec::new(),
            upserted: entries,
        })?;
        Ok(())
    })
}

/// Microseconds of CPU per entry for the first load's builder (`prebuild::write_detached`: a
/// `SegmentWriter` on this thread, no commit, no merge), the path a large first load takes.
fn builder_round(round: usize) -> anyhow::Result<f64> {
    let (cpu, _) = index_round(&format!("index-builder-{round}"), |index, entries| {
        mcp_mirror::search::prebuild::write_detached(index, "fast", entries)?;
        Ok(())
    })?;
    Ok(cpu)
}

/// Microseconds of CPU per row for FTS5 indexing the rows of `resources` (the migrations'
/// table definition and tokenizer), the rows inserted beforehand.
fn full_text_round(round: usize) -> anyhow::Result<f64> {
    let path = work_dir().join(format!("fts-cost-{round}.db"));
    let _ = std::fs::remove_file(&path);
    let connection = rusqlite::Connection::open(&path)?;
    connection.execute_batch(
        "PRAGMA journal_mode = WAL;
         CREATE TABLE resources (id INTEGER PRIMARY KEY, uri TEXT NOT NULL, name TEXT NOT NULL,
             title TEXT, description TEXT);
         CREATE VIRTUAL TABLE resources_fts USING fts5(uri, name, title, description,
             content = 'resources', content_rowid = 'id',
             tokenize = 'unicode61 remove_diacritics 2');",
    )?;
    let transaction = connection.unchecked_transaction()?;
    {
        let mut insert = transaction.prepare(
            "INSERT INTO resources (uri, name, title, description) VALUES (?1, ?2, ?3, ?4)",
        )?;
        for entry in (0..RESOURCES).map(resource) {
            insert.execute((&entry.uri, &entry.name, &entry.title, &entry.description))?;
        }
    }
    transaction.commit()?;
    let cpu = own_cpu();
    connection.execute_batch(
        "INSERT INTO resources_fts (rowid, uri, name, title, description)
         SELECT id, uri, name, title, description FROM resources;",
    )?;
    let cpu = own_cpu() - cpu;
    drop(connection);
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
    }
    Ok(cpu * 1e6 / RESOURCES as f64)
}

pub fn run(report: &mut Report) -> anyhow::Result<()> {
    let mut index_cpu = Samples::default();
    let mut index_wall = Samples::default();
    let mut builder_cpu = Samples::default();
    let mut fts_cpu = Samples::default();
    for round in 0..ROUNDS {
        let (cpu, wall) = search_index_round(round)?;
        index_cpu.push(cpu);
        index_wall.push(wall);
        builder_cpu.push(builder_round(round)?);
        fts_cpu.push(full_text_round(round)?);
    }
    report.line("## Index: the cost of one entry in each index");
    report.line("");
    report.line(format!(
        "Host: {}. {RESOURCES} resources shaped like the fast peer's, {ROUNDS} rounds, median \
         (min-max), microseconds per entry. The search index: `SearchIndex::apply` replacing a \
         server's listings (one writer thread, its commit and its merges), CPU of this process. \
         The first load's builder: the same entries written into segments on this thread as a \
         large first load's pages are during its walk (no commit, no merge), CPU. FTS5: the full-text backlog's `INSERT ... SELECT` over the rows, CPU.",
        crate::cpu_and_vector_flags()
    ));
    report.line("");
    report.table(
        &[
            "search index CPU µs/entry",
            "search index wall µs/entry",
            "first load's builder CPU µs/entry",
            "FTS5 CPU µs/entry",
        ],
        &[vec![
            index_cpu.summary(2),
            index_wall.summary(2),
            builder_cpu.summary(2),
            fts_cpu.summary(2),
        ]],
    );
    Ok(())
}
