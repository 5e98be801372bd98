//! A throwaway probe of the search index at a million fixture-shaped entries: build time, size, latency per query class, peak RSS.
//!
//! Not part of CI. Run: `cargo run --release --example search_probe [ENTRIES] [DIR]`.

use std::time::{Duration, Instant};

use mcp_mirror::protocol::Kind;
use mcp_mirror::search::{Entry, Priorities, SearchIndex, SearchQuery, ServerDiff};

const SERVERS: usize = 10;
const MIME_TYPES: [&str; 3] = ["text/markdown", "text/plain", "application/json"];

/// Entry `index` as the fixture makes it (the server's name in the URI, as there).
fn fixture_entry(server: &str, index: usize) -> Entry {
    Entry {
        server: server.to_string(),
        uri: format!("fixture://{server}/docs/{index:06}.md"),
        name: format!("doc-{index:06}"),
        title: Some(format!("Document {index}")),
        description: Some(format!(
            "Synthetic document number {index} about topic-{}",
            index % 37
        )),
        mime_type: Some(MIME_TYPES[index % MIME_TYPES.len()].to_string()),
        kind: Kind::Resource,
        inputs: None,
    }
}

/// Resident memory now, split into anonymous and file-backed (the index's mmaps) pages.
fn rss_split() -> String {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .filter(|line| line.starts_with("RssAnon:") || line.starts_with("RssFile:"))
        .map(|line| line.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect::<Vec<_>>()
        .join(", ")
}

fn vm_hwm_mb() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find(|line| line.starts_with("VmHWM:"))
                .and_then(|line| line.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<f64>().ok())
        })
        .unwrap_or(0.0)
        / 1024.0
}

type Class = (&'static str, Box<dyn Fn(usize) -> SearchQuery>);

fn classes(total: usize) -> Vec<Class> {
    let per_server = total / SERVERS;
    vec![
        (
            "one word, rare (a 6-digit id)",
            Box::new(move |i| SearchQuery::new(format!("{:06}", (i * 7919) % per_server), 10)),
        ),
        (
            "`document` + a number",
            Box::new(move |i| {
                SearchQuery::new(format!("document {}", (i * 104_729) % per_server), 10)
            }),
        ),
        (
            "prefix (4 digits)",
            Box::new(|i| SearchQuery::new(format!("{:04}", (i * 31) % 10_000), 10)),
        ),
        (
            "`topic-N doc`",
            Box::new(|i| SearchQuery::new(format!("topic-{} doc", i % 37), 10)),
        ),
        (
            "`document` (every entry)",
            Box::new(|_| SearchQuery::new("document", 10)),
        ),
        (
            "`synth` (prefix, every entry)",
            Box::new(|_| SearchQuery::new("synth", 10)),
        ),
        (
            "two common words AND",
            Box::new(|i| {
                let pairs = [
                    "synthetic document",
                    "document number",
                    "about synthetic",
                    "number about",
                ];
                SearchQuery::new(pairs[i % pairs.len()], 10)
            }),
        ),
        (
            "a typo (`documnet N`, `sythetic`)",
            Box::new(move |i| {
                if i % 2 == 0 {
                    SearchQuery::new(format!("documnet {}", (i * 7919) % per_server), 10)
                } else {
                    SearchQuery::new("sythetic", 10)
                }
            }),
        ),
        (
            "server filter, `document` (10 servers)",
            Box::new(|i| {
                let mut query = SearchQuery::new("document", 10);
                query.server = Some(format!("server-{}", i % SERVERS));
                query
            }),
        ),
        (
            "server filter, `topic-N doc`",
            Box::new(|i| {
                let mut query = SearchQuery::new(format!("topic-{} doc", i % 37), 10);
                query.server = Some(format!("server-{}", i % SERVERS));
                query
            }),
        ),
        (
            "no match (`zzzzqqq`: AND, typo, then nothing)",
            Box::new(|_| SearchQuery::new("zzzzqqq", 10)),
        ),
        (
            "OR fallback (`document zzzzqqq`)",
            Box::new(|_| SearchQuery::new("document zzzzqqq", 10)),
        ),
    ]
}

fn percentile(sorted: &[f64], fraction: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((sorted.len() as f64) * fraction).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let total: usize = args
        .next()
        .map(|n| n.parse())
        .transpose()?
        .unwrap_or(1_000_000);
    let directory = match args.next() {
        Some(path) => std::path::PathBuf::from(path),
        None => std::env::temp_dir().join(format!("search-probe-{}", std::process::id())),
    };
    let _ = std::fs::remove_dir_all(&directory);
    let (index, _) = SearchIndex::open(&directory, 2)?;
    let priorities: Priorities = (0..SERVERS)
        .map(|server| (format!("server-{server}"), 10))
        .collect();
    index.set_priorities(&priorities)?;

    let started = Instant::now();
    let per_server = total / SERVERS;
    for server in 0..SERVERS {
        let name = format!("server-{server}");
        let entries = (0..per_server).map(|index| fixture_entry(&name, index));
        index.apply(ServerDiff {
            generation: server as u64 + 1,
            server: name.clone(),
            kind: Kind::Resource,
            replace: true,
            removed: Vec::new(),
            upserted: entries,
        })?;
    }
    let build = started.elapsed();
    let status = index.status();
    println!(
        "build: {total} entries ({SERVERS} servers x {per_server}) in {:.1} s ({:.0}/s); {} documents, {:.1} MB on disk; VmHWM {:.0} MB",
        build.as_secs_f64(),
        total as f64 / build.as_secs_f64(),
        status.documents,
        status.bytes as f64 / 1e6,
        vm_hwm_mb()
    );
    println!("resident after the build: {}", rss_split());

    // An empty commit: what tantivy's commit itself costs.
    for _ in 0..3 {
        let started = Instant::now();
        index.advance(SERVERS as u64)?;
        println!(
            "an empty commit: {:.1} ms",
            started.elapsed().as_secs_f64() * 1000.0
        );
    }
    // A catch-up-sized diff: 100 changed entries of one server.
    let started = Instant::now();
    let changed: Vec<Entry> = (0..100)
        .map(|i| {
            let mut entry = fixture_entry("server-3", i * 997 % per_server);
            entry.title = Some(format!("Changed {i}"));
            entry
        })
        .collect();
    index.apply(ServerDiff {
        generation: SERVERS as u64 + 1,
        server: "server-3".into(),
        kind: Kind::Resource,
        replace: false,
        removed: Vec::new(),
        upserted: changed,
    })?;
    println!(
        "a diff of 100 changed entries applied and committed in {:.1} ms",
        started.elapsed().as_secs_f64() * 1000.0
    );

    println!();
    println!("| query class | queries | hits/query | mode | p50 ms | p99 ms | max ms |");
    println!("|---|---|---|---|---|---|---|");
    let budget = Duration::from_secs(20);
    for (label, make) in classes(total) {
        for warm in 0..5 {
            let _ = index.search(&make(warm + 1000));
        }
        let mut times = Vec::new();
        let mut hits = 0usize;
        let mut mode = None;
        let class_started = Instant::now();
        for i in 0..300 {
            if class_started.elapsed() > budget {
                break;
            }
            let mut query = make(i);
            query.time_limit = Duration::from_secs(30);
            let started = Instant::now();
            let page = index.search(&query)?;
            times.push(started.elapsed().as_secs_f64() * 1000.0);
            hits += page.hits.len();
            mode = Some(page.mode);
        }
        times.sort_by(f64::total_cmp);
        println!(
            "| {label} | {} | {:.1} | {:?} | {:.3} | {:.3} | {:.3} |",
            times.len(),
            hits as f64 / times.len().max(1) as f64,
            mode,
            percentile(&times, 0.5),
            percentile(&times, 0.99),
            times.last().copied().unwrap_or(0.0)
        );
    }
    println!();
    println!("peak RSS (VmHWM) of the whole probe: {:.0} MB", vm_hwm_mb());
    drop(index);
    let _ = std::fs::remove_dir_all(&directory);
    Ok(())
}
