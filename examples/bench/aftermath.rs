//! Aftermath: search latency in the minute after a first load of 1,000,000 resources becomes
//! visible, while the search index finishes indexing it, SQLite's full-text backlog runs and
//! the index merges its segments (issue 35: no class over 5 ms p99 at any moment). One client
//! on one connection sends the query scenario's 8 classes in turn, without pause.

use std::time::{Duration, Instant};

use crate::daemon::{start_daemon, start_http_server, DaemonFiles};
use crate::paths::bench_peer_binary;
use crate::process::http_server_table;
use crate::query::million_classes;
use crate::report::{Report, Samples};

const RESOURCES: usize = 1_000_000;
const WINDOW: Duration = Duration::from_secs(60);
const SLICE_S: f64 = 10.0;

pub fn run(report: &mut Report) -> anyhow::Result<()> {
    let files = DaemonFiles::fresh("aftermath")?;
    let args: Vec<String> = [
        "--name",
        "after",
        "--resources",
        &RESOURCES.to_string(),
        "--page-size",
        "1000",
        "--era",
        "legacy",
    ]
    .iter()
    .map(|arg| arg.to_string())
    .collect();
    let peer = start_http_server(
        &bench_peer_binary("fast-peer"),
        &args,
        &files.path("server.log"),
    )?;
    let config = files.config("", &http_server_table("after", &peer.url))?;
    let started = Instant::now();
    let daemon = start_daemon(&files, &config)?;
    daemon.wait_for_walks(1, Duration::from_secs(600))?;
    let visible = Instant::now();
    let visible_after = started.elapsed().as_secs_f64();
    let classes = million_classes();
    let mut client = daemon.client()?;
    // Per class: (seconds after visible, milliseconds) of every answer.
    let mut answers: Vec<Vec<(f64, f64)>> = vec![Vec::new(); classes.len()];
    let mut failed = 0u64;
    let mut i = 0usize;
    while visible.elapsed() < WINDOW {
        i += 1;
        let class = i % classes.len();
        let asked = Instant::now();
        let answer = client.request("catalog/search", classes[class].params(i, false))?;
        let milliseconds = asked.elapsed().as_secs_f64() * 1000.0;
        if answer.get("result").is_none() {
            failed += 1;
            continue;
        }
        answers[class].push((asked.duration_since(visible).as_secs_f64(), milliseconds));
    }
    drop(daemon);
    drop(peer);
    report.line("## Aftermath: searches in the minute after a 1,000,000 first load");
    report.line("");
    report.line(format!(
        "Host: {}. The fast peer over HTTP, pages of 1,000, default configuration; the first \
         load visible {visible_after:.2} s after the daemon started, then one client sends the \
         query scenario's classes in turn without pause for {} s ({} searches, {failed} \
         failed). Milliseconds per answer, measured by the client.",
        crate::cpu_and_vector_flags(),
        WINDOW.as_secs(),
        answers.iter().map(Vec::len).sum::<usize>(),
    ));
    report.line("");
    let slices = (WINDOW.as_secs_f64() / SLICE_S).ceil() as usize;
    let mut rows = Vec::new();
    for (class, timed) in classes.iter().zip(&answers) {
        let all = Samples(timed.iter().map(|(_, ms)| *ms).collect());
        let per_slice: Vec<String> = (0..slices)
            .map(|slice| {
                let from = slice as f64 * SLICE_S;
                let within = Samples(
                    timed
                        .iter()
                        .filter(|(at, _)| *at >= from && *at < from + SLICE_S)
                        .map(|(_, ms)| *ms)
                        .collect(),
                );
                format!("{:.1}", within.quantile(0.99))
            })
            .collect();
        rows.push(vec![
            class.label.to_string(),
            all.len().to_string(),
            format!("{:.2}", all.median()),
            format!("{:.2}", all.quantile(0.99)),
            format!("{:.1}", all.max()),
            per_slice.join(" / "),
        ]);
    }
    report.table(
        &[
            "class",
            "searches",
            "p50 ms",
            "p99 ms",
            "max ms",
            "p99 ms in each 10 s after visible",
        ],
        &rows,
    );
    Ok(())
}
