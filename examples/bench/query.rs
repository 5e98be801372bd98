//! Query: search latency, throughput and paging over a 1,000,000-resource database, which this
//! file also builds (the start scenario reuses it).

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::anyhow;
use serde_json::json;

use crate::daemon::{connect, fixture_args, fixture_stdio_table, start_daemon, DaemonFiles};
use crate::measure::{clock_ticks_per_second, cpu_ticks};
use crate::process::http_server_table;
use crate::report::{Report, Samples};

const MILLION_SERVER: &str = "million";

/// Mirrors a 1,000,000-resource stdio fixture into `work/million` and stops the daemon,
/// leaving the database. Returns the seconds the first load took.
pub fn build_million_database() -> anyhow::Result<DaemonFiles> {
    let files = DaemonFiles::fresh("million")?;
    let args = fixture_args(1_000_000, 1000, MILLION_SERVER);
    let config = files.config("", &fixture_stdio_table(MILLION_SERVER, &args))?;
    let mut daemon = start_daemon(&files, &config)?;
    daemon.wait_for_walks(1, Duration::from_secs(1800))?;
    daemon.process.stop();
    Ok(files)
}

/// A config naming the same server, now unreachable: the daemon keeps its snapshot and
/// serves it while it backs off.
pub fn offline_million_config(files: &DaemonFiles) -> anyhow::Result<PathBuf> {
    files.config(
        "",
        &http_server_table(MILLION_SERVER, "http://127.0.0.1:9/mcp"),
    )
}

/// The query classes: (label, generator of the i-th query).
type QueryClass = (&'static str, fn(usize) -> String);

fn query_classes() -> Vec<QueryClass> {
    vec![
        ("one word, rare (a 6-digit id, 1 match)", |i| {
            format!("{:06}", (i * 7919) % 1_000_000)
        }),
        ("two words (`document` + a number, ~2 matches)", |i| {
            format!("document {}", (i * 104_729) % 1_000_000 + 100_000)
        }),
        ("prefix (4 digits, 100 matches)", |i| {
            format!("{:04}", (i * 31) % 10_000)
        }),
        ("two words (`topic-N doc`, 27,000 matches)", |i| {
            format!("topic-{} doc", i % 37)
        }),
        ("one word, every resource matches (`document`)", |_| {
            "document".into()
        }),
        ("prefix, every resource matches (`synth`)", |_| {
            "synth".into()
        }),
    ]
}

pub fn run(report: &mut Report, files: &DaemonFiles) -> anyhow::Result<()> {
    report.line("## Query: 1,000,000 resources");
    report.line("");
    let config = offline_million_config(files)?;
    let daemon = start_daemon(files, &config)?;
    let mut client = daemon.client()?;
    let total = client.call("catalog/status", json!({}))?["daemon"]["resources"].clone();
    report.line(format!(
        "`catalog/search` (limit 10) latency from one socket client, client-side round trip; \
         the database holds {total} resources. 5 warm-up queries per class, then up to 300 \
         queries or 30 s per class."
    ));
    report.line("");
    let mut rows = Vec::new();
    let mut selective = Samples::default();
    let mut all = Samples::default();
    for (index, (label, query)) in query_classes().into_iter().enumerate() {
        for warm in 0..5 {
            client.call(
                "catalog/search",
                json!({"query": query(warm + 1000), "limit": 10}),
            )?;
        }
        let mut samples = Samples::default();
        let started = Instant::now();
        let mut hits = 0u64;
        for i in 0..300 {
            if started.elapsed() > Duration::from_secs(30) {
                break;
            }
            let call_started = Instant::now();
            let result = client.call("catalog/search", json!({"query": query(i), "limit": 10}))?;
            let ms = call_started.elapsed().as_secs_f64() * 1000.0;
            samples.push(ms);
            all.push(ms);
            if index < 3 {
                selective.push(ms);
            }
            hits += result["results"].as_array().map_or(0, Vec::len) as u64;
        }
        rows.push(vec![
            label.to_string(),
            samples.len().to_string(),
            format!("{:.1}", hits as f64 / samples.len() as f64),
            format!("{:.2}", samples.median()),
            format!("{:.2}", samples.quantile(0.99)),
            format!("{:.2}", samples.max()),
        ]);
    }
    rows.push(vec![
        "**selective mix (first three rows)**".into(),
        selective.len().to_string(),
        String::new(),
        format!("{:.2}", selective.median()),
        format!("{:.2}", selective.quantile(0.99)),
        format!("{:.2}", selective.max()),
    ]);
    rows.push(vec![
        "**every row, equal weight per query**".into(),
        all.len().to_string(),
        String::new(),
        format!("{:.2}", all.median()),
        format!("{:.2}", all.quantile(0.99)),
        format!("{:.2}", all.max()),
    ]);
    report.table(
        &[
            "query class",
            "queries",
            "hits/query",
            "p50 ms",
            "p99 ms",
            "max ms",
        ],
        &rows,
    );

    // Throughput: N clients, each on its own connection, for 5 s.
    report.line(
        "Throughput: N socket clients, each on its own connection, each sending its next \
         request as soon as the answer arrives, for 5 s.",
    );
    report.line("");
    let mut rows = Vec::new();
    let classes = query_classes();
    for (label, workload) in [
        ("search, selective mix", 0usize),
        ("search, `topic-N doc`", 1),
        ("`catalog/status`", 2),
    ] {
        for clients in [1usize, 8, 64] {
            let counts = Arc::new(Mutex::new(Vec::new()));
            let stop = Arc::new(AtomicBool::new(false));
            let mut threads = Vec::new();
            let selective: Vec<fn(usize) -> String> =
                classes.iter().take(3).map(|class| class.1).collect();
            let broad = classes[3].1;
            for client_index in 0..clients {
                let socket = daemon.socket.clone();
                let stop = stop.clone();
                let counts = counts.clone();
                let selective = selective.clone();
                threads.push(std::thread::spawn(move || -> anyhow::Result<()> {
                    let mut client = connect(&socket)?;
                    let mut done = 0u64;
                    let mut latencies = Samples::default();
                    let mut i = client_index * 1_000_003;
                    while !stop.load(Ordering::Relaxed) {
                        i += 1;
                        let started = Instant::now();
                        match workload {
                            0 => client.call(
                                "catalog/search",
                                json!({"query": selective[i % 3](i), "limit": 10}),
                            )?,
                            1 => client
                                .call("catalog/search", json!({"query": broad(i), "limit": 10}))?,
                            _ => client.call("catalog/status", json!({}))?,
                        };
                        latencies.push(started.elapsed().as_secs_f64() * 1000.0);
                        done += 1;
                    }
                    counts
                        .lock()
                        .map_err(|_| anyhow!("poisoned"))?
                        .push((done, latencies));
                    Ok(())
                }));
            }
            let window = Duration::from_secs(5);
            let cpu_before = cpu_ticks(daemon.process.pid()).unwrap_or(0);
            std::thread::sleep(window);
            stop.store(true, Ordering::Relaxed);
            let cpu_after = cpu_ticks(daemon.process.pid()).unwrap_or(0);
            for thread in threads {
                thread
                    .join()
                    .map_err(|_| anyhow!("a client thread panicked"))??;
            }
            let counts = counts.lock().map_err(|_| anyhow!("poisoned"))?;
            let done: u64 = counts.iter().map(|(done, _)| done).sum();
            let mut latencies = Samples::default();
            for (_, samples) in counts.iter() {
                for value in &samples.0 {
                    latencies.push(*value);
                }
            }
            let cores = (cpu_after - cpu_before) as f64 / clock_ticks_per_second() / 5.0;
            rows.push(vec![
                label.into(),
                clients.to_string(),
                format!("{:.0}", done as f64 / window.as_secs_f64()),
                format!("{:.2}", latencies.median()),
                format!("{:.2}", latencies.quantile(0.99)),
                format!("{cores:.2}"),
            ]);
        }
    }
    report.table(
        &[
            "workload",
            "clients",
            "requests/s",
            "p50 ms",
            "p99 ms",
            "daemon cores used",
        ],
        &rows,
    );

    // Paging the whole merged catalog.
    let mut seconds = Samples::default();
    let mut count = 0usize;
    for round in 0..4 {
        let started = Instant::now();
        let mut cursor: Option<String> = None;
        let mut listed = 0usize;
        loop {
            let params = match &cursor {
                Some(cursor) => json!({"cursor": cursor}),
                None => json!({}),
            };
            let result = client.call("resources/list", params)?;
            listed += result["resources"].as_array().map_or(0, Vec::len);
            match result["nextCursor"].as_str() {
                Some(next) => cursor = Some(next.to_string()),
                None => break,
            }
        }
        count = listed;
        if round > 0 {
            seconds.push(started.elapsed().as_secs_f64());
        }
    }
    report.line(format!(
        "Paging the whole merged `resources/list` ({count} resources, pages of 500) through \
         one socket client: {} s median (min–max) over {} rounds after a warm-up, {:.0} \
         resources/s.",
        seconds.summary(2),
        seconds.len(),
        count as f64 / seconds.median()
    ));
    report.line("");
    Ok(())
}
