//! Query: the search benchmark of issue 11 at 1,000,000 resources (every query class through
//! the socket, the derived index side by side with SQLite's FTS5, throughput, the index's build,
//! catch-up, size and the daemon's RSS), and paging the merged catalog. It also builds the
//! 1,000,000-resource database that the start scenario reuses.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail};
use serde_json::{json, Value};

use crate::daemon::{
    connect, fixture_args, fixture_stdio_table, start_daemon, start_http_fixture, Daemon,
    DaemonFiles,
};
use crate::measure::{clock_ticks_per_second, cpu_ticks, now_us, own_cpu_seconds, proc_status_kb};
use crate::process::{http_server_table, poll_until, write_json_atomically, SocketClient};
use crate::report::{mb, ratio, Report, Samples};

const MILLION_SERVER: &str = "million";
const MILLION: u64 = 1_000_000;
/// The 10-server catalog: one HTTP fixture serving ten catalogs of this many resources.
const SERVERS: usize = 10;
const PER_SERVER: usize = 100_000;
/// The server that lists the same URIs as `s0`, so the merged view has a choice to make.
const COPY_SERVER: &str = "s0copy";
/// Per class and engine: at most this many timed queries, for at most this long.
const QUERIES_PER_CLASS: usize = 300;
const INDEX_CLASS_TIME: Duration = Duration::from_secs(10);
/// FTS5 classes whose queries run into `search_timeout` (2 s) stop after a few.
const SQLITE_CLASS_TIME: Duration = Duration::from_secs(8);
const THROUGHPUT_WINDOW: Duration = Duration::from_secs(5);
const CATCH_UP_ROUNDS: usize = 4;
const CHANGING: usize = 100;

/// The database the query and start scenarios share, and what its first load measured
/// (`None` when `--reuse-million` reused the database of an earlier run).
pub struct MillionDatabase {
    pub files: DaemonFiles,
    pub first_load: Option<FirstLoad>,
}

/// Which parts of the query scenario run: `--parts=firstload,classes,throughput,throughput8,catchup,paging,httppaging,ten`
/// (default: all but `throughput8`, the index with 8 clients only; `firstload` alone stops
/// after the first load and its searches), `--reuse-million`
/// (keep `target/bench-work/million` from an earlier run instead of loading it again), and
/// `--index-hold=30s|off` (the daemon's `[search] first_load_index_hold` for the first load;
/// left out, the daemon's default).
pub struct QueryOptions {
    parts: Vec<String>,
    pub reuse_million: bool,
    /// `[search] first_load_index_hold` of the first load's daemon.
    pub index_hold: Option<String>,
}

const ALL_PARTS: [&str; 8] = [
    "firstload",
    "classes",
    "throughput",
    "throughput8",
    "catchup",
    "paging",
    "httppaging",
    "ten",
];

impl QueryOptions {
    pub fn from_arguments(arguments: &[String]) -> anyhow::Result<QueryOptions> {
        let mut options = QueryOptions {
            parts: Vec::new(),
            reuse_million: false,
            index_hold: None,
        };
        for argument in arguments {
            if let Some(parts) = argument.strip_prefix("--parts=") {
                for part in parts.split(',') {
                    if !ALL_PARTS.contains(&part) {
                        bail!(
                            "unknown query part {part}; choose from {}",
                            ALL_PARTS.join(", ")
                        );
                    }
                    options.parts.push(part.to_string());
                }
            } else if argument == "--reuse-million" {
                options.reuse_million = true;
            } else if let Some(hold) = argument.strip_prefix("--index-hold=") {
                options.index_hold = Some(hold.to_string());
            }
        }
        Ok(options)
    }

    fn runs(&self, part: &str) -> bool {
        match self.parts.is_empty() {
            true => part != "throughput8",
            false => self.parts.iter().any(|chosen| chosen == part),
        }
    }
}

/// The database of an earlier run, when it is there (`--reuse-million`).
pub fn reuse_million_database() -> Option<MillionDatabase> {
    let files = DaemonFiles {
        dir: crate::paths::work_dir().join("million"),
    };
    files
        .path("catalog.db")
        .exists()
        .then_some(MillionDatabase {
            files,
            first_load: None,
        })
}

/// A first load into an empty directory with the index on.
pub struct FirstLoad {
    /// Daemon start to the walk's commit.
    walk_seconds: f64,
    /// The walk's commit to the index holding every entry (`ready`).
    index_seconds: f64,
    index_bytes: u64,
    /// The daemon's peak resident memory (VmHWM) over the load and the index build.
    peak_rss_kb: Option<u64>,
    /// The walk's commit (its "snapshot swapped" log line) to `catalog/status` showing the
    /// index current (polled every 50 ms).
    commit_to_current_seconds: Option<f64>,
    current_at_us: i64,
    /// What a client searching all along saw: while the walk ran, and from the commit until
    /// the index was current.
    searches: [SearchesSeen; 2],
}

/// The searches of one phase of a first load.
#[derive(Default, Clone)]
pub struct SearchesSeen {
    latencies_ms: Samples,
    failed: u64,
    first_failure: Option<String>,
    index: u64,
    sqlite: u64,
    stale: u64,
}

impl SearchesSeen {
    fn summary(&self) -> String {
        let over_budget = self.latencies_ms.0.iter().filter(|&&ms| ms > 5.0).count();
        format!(
            "{} searches, {} failed{}; engine index {} (of which {} from the index's previous \
             state), SQLite {}; p50 {:.2} ms, p99 {:.2} ms, max {:.1} ms; {} over 5 ms",
            self.latencies_ms.len(),
            self.failed,
            self.first_failure
                .as_deref()
                .map(|error| format!(" (first: {error})"))
                .unwrap_or_default(),
            self.index,
            self.stale,
            self.sqlite,
            self.latencies_ms.median(),
            self.latencies_ms.quantile(0.99),
            self.latencies_ms.max(),
            over_budget,
        )
    }
}

/// Phases of a first load, for the searching client.
const LOADING: u8 = 0;
const CATCHING_UP: u8 = 1;
const DONE: u8 = 2;

/// One client searching without pause (a common word, a rare id, a two-word query in turn)
/// until `phase` says DONE; what it saw, per phase.
fn search_all_along(
    socket: PathBuf,
    phase: Arc<std::sync::atomic::AtomicU8>,
) -> std::thread::JoinHandle<[SearchesSeen; 2]> {
    std::thread::spawn(move || {
        let mut seen: [SearchesSeen; 2] = Default::default();
        let Ok(mut client) = connect(&socket) else {
            return seen;
        };
        let mut i = 0usize;
        loop {
            let now = phase.load(Ordering::Acquire);
            if now == DONE {
                return seen;
            }
            i += 1;
            let query = match i % 3 {
                0 => "document".to_string(),
                1 => format!("{:06}", (i * 7919) % 1_000_000),
                _ => format!("topic-{} doc", i % 37),
            };
            let started = Instant::now();
            let answer = client.request("catalog/search", json!({"query": query, "limit": 10}));
            let elapsed = started.elapsed().as_secs_f64() * 1000.0;
            let seen = &mut seen[usize::from(now)];
            seen.latencies_ms.push(elapsed);
            match answer.as_ref().ok().and_then(|answer| answer.get("result")) {
                Some(result) => {
                    if result["engine"] == "index" {
                        seen.index += 1;
                    } else {
                        seen.sqlite += 1;
                    }
                    if result["note"]
                        .as_str()
                        .is_some_and(|note| note.contains("previous state"))
                    {
                        seen.stale += 1;
                    }
                }
                None => {
                    seen.failed += 1;
                    if seen.first_failure.is_none() {
                        seen.first_failure = Some(match answer {
                            Ok(answer) => answer["error"]["message"].to_string(),
                            Err(error) => format!("{error:#}"),
                        });
                    }
                }
            }
        }
    })
}

/// Mirrors a 1,000,000-resource stdio fixture into `work/million`, waits until the search
/// index holds every entry, and stops the daemon, leaving the database and the index.
pub fn build_million_database(options: &QueryOptions) -> anyhow::Result<MillionDatabase> {
    let files = DaemonFiles::fresh("million")?;
    let args = fixture_args(MILLION as usize, 1000, MILLION_SERVER);
    let mut tables = fixture_stdio_table(MILLION_SERVER, &args);
    if let Some(hold) = &options.index_hold {
        // A table of its own after the servers' tables.
        tables.push_str(&format!("\n[search]\nfirst_load_index_hold = \"{hold}\"\n"));
    }
    let config = files.config("", &tables)?;
    let started = Instant::now();
    let mut daemon = start_daemon(&files, &config)?;
    let phase = Arc::new(std::sync::atomic::AtomicU8::new(LOADING));
    let searcher = search_all_along(daemon.socket.clone(), phase.clone());
    let loaded = first_load(&daemon, started, MILLION, &phase);
    phase.store(DONE, Ordering::Release);
    let searches = searcher
        .join()
        .map_err(|_| anyhow!("the searching client panicked"))?;
    let mut first_load = loaded?;
    first_load.searches = searches;
    first_load.peak_rss_kb = proc_status_kb(daemon.process.pid(), "VmHWM");
    first_load.commit_to_current_seconds = daemon
        .swaps()
        .last()
        .map(|swap| (first_load.current_at_us - swap.committed_at_us) as f64 / 1e6);
    daemon.process.stop();
    Ok(MillionDatabase {
        files,
        first_load: Some(first_load),
    })
}

/// Whether the search index is ready, reflects the newest change and holds at least
/// `resources` documents (the fixture's templates are indexed too).
pub fn index_caught_up(status: &Value, resources: u64) -> bool {
    let index = &status["daemon"]["searchIndex"];
    index["state"] == "ready"
        && index["generation"].as_i64() == status["daemon"]["changeSeq"].as_i64()
        && index["documents"]
            .as_u64()
            .is_some_and(|documents| documents >= resources)
}

/// Polls `catalog/status` every `every` until the index holds the catalog as it stands
/// (`index_caught_up` with `resources` documents), at most 30 minutes.
pub fn wait_for_index(
    client: &mut SocketClient,
    resources: u64,
    every: Duration,
) -> anyhow::Result<()> {
    poll_until(
        "the search index to catch up",
        Duration::from_secs(1800),
        every,
        || {
            let status = client.call("catalog/status", json!({}))?;
            Ok(index_caught_up(&status, resources).then_some(()))
        },
    )
}

/// Waits for every server's first walk and for the index to hold `documents` entries; sets
/// `phase` to CATCHING_UP when the walks are seen done.
fn first_load(
    daemon: &Daemon,
    started: Instant,
    documents: u64,
    phase: &std::sync::atomic::AtomicU8,
) -> anyhow::Result<FirstLoad> {
    let mut client = daemon.client()?;
    let mut walked_at = None;
    let mut last = Value::Null;
    let index = poll_until(
        "the first load and the index",
        Duration::from_secs(1800),
        Duration::from_millis(50),
        || {
            last = client.call("catalog/status", json!({}))?;
            let servers = last["servers"].as_array().cloned().unwrap_or_default();
            if walked_at.is_none()
                && !servers.is_empty()
                && servers
                    .iter()
                    .all(|server| server["walksOk"].as_u64().unwrap_or(0) >= 1)
            {
                walked_at = Some(started.elapsed());
                phase.store(CATCHING_UP, Ordering::Release);
            }
            let index = &last["daemon"]["searchIndex"];
            Ok((walked_at.is_some() && index_caught_up(&last, documents)).then(|| index.clone()))
        },
    )
    .map_err(|error| anyhow!("{error:#}: {last}"))?;
    let current_at_us = now_us();
    let walked = walked_at.unwrap_or_default();
    Ok(FirstLoad {
        walk_seconds: walked.as_secs_f64(),
        index_seconds: (started.elapsed() - walked).as_secs_f64(),
        index_bytes: index["bytes"].as_u64().unwrap_or(0),
        peak_rss_kb: None,
        commit_to_current_seconds: None,
        current_at_us,
        searches: Default::default(),
    })
}

/// A config naming the same server, now unreachable: the daemon keeps its snapshot and
/// serves it while it backs off.
pub fn offline_million_config(files: &DaemonFiles) -> anyhow::Result<PathBuf> {
    files.config(
        "",
        &http_server_table(MILLION_SERVER, "http://127.0.0.1:9/mcp"),
    )
}

/// The words of `text` as an FTS5 query of the same meaning as a plain search's first step:
/// all of them, the last a prefix.
fn fts5_and_of_words(text: &str) -> String {
    let words: Vec<String> = text
        .split(|c: char| !c.is_alphanumeric())
        .filter(|word| !word.is_empty())
        .map(|word| format!("\"{word}\""))
        .collect();
    format!("{}*", words.join(" "))
}

/// One query class: its label and the i-th query's text and server filter.
pub(crate) struct QueryClass {
    pub(crate) label: &'static str,
    make: fn(usize) -> (String, Option<String>),
}

impl QueryClass {
    pub(crate) fn params(&self, i: usize, raw: bool) -> Value {
        let (text, server) = (self.make)(i);
        let mut params = if raw {
            json!({"query": fts5_and_of_words(&text), "raw": true, "limit": 10})
        } else {
            json!({"query": text, "limit": 10})
        };
        if let Some(server) = server {
            params["server"] = json!(server);
        }
        params
    }
}

/// The classes on the one-server catalog of 1,000,000; the first three are the selective mix.
pub(crate) fn million_classes() -> Vec<QueryClass> {
    let mut classes = vec![
        QueryClass {
            label: "one word, rare (a 6-digit id, 1 match)",
            make: |i| (format!("{:06}", (i * 7919) % 1_000_000), None),
        },
        QueryClass {
            label: "two words (`document` + a number, ~2 matches)",
            make: |i| {
                (
                    format!("document {}", (i * 104_729) % 1_000_000 + 100_000),
                    None,
                )
            },
        },
        QueryClass {
            label: "prefix (4 digits, 100 matches)",
            make: |i| (format!("{:04}", (i * 31) % 10_000), None),
        },
    ];
    classes.extend(common_word_classes(
        "two words (`topic-N doc`, 27,000 matches)",
    ));
    classes.push(QueryClass {
        label: "a typo (`documnet N`, `sythetic`; FTS5 finds nothing)",
        make: |i| {
            let text = if i % 2 == 0 {
                format!("documnet {}", (i * 104_729) % 1_000_000 + 100_000)
            } else {
                "sythetic".into()
            };
            (text, None)
        },
    });
    classes
}

/// The classes of words every generated resource has, whatever the catalog's size;
/// `topic_label` says how many match `topic-N doc` there.
fn common_word_classes(topic_label: &'static str) -> [QueryClass; 4] {
    [
        QueryClass {
            label: topic_label,
            make: |i| (format!("topic-{} doc", i % 37), None),
        },
        QueryClass {
            label: "one word, every resource matches (`document`)",
            make: |_| ("document".into(), None),
        },
        QueryClass {
            label: "prefix, every resource matches (`synth`)",
            make: |_| ("synth".into(), None),
        },
        QueryClass {
            label: "AND of two common words (every resource matches)",
            make: |i| {
                (
                    ["synthetic document", "document number", "about synthetic"][i % 3].into(),
                    None,
                )
            },
        },
    ]
}

/// The million classes' shapes on the fleet's catalog of 100,000 (`bench fleet --burst`): 10
/// fixture servers of 10,000 each, whose ids (000000-009999) repeat in every server. The
/// numbers are drawn below 10,000 (an id, `document N` and a typo's number then match one
/// entry in each server, 10), the prefix has 5 digits (100 matches, as 4 did over 1,000,000);
/// the common words are the same words.
pub(crate) fn fleet_classes() -> Vec<QueryClass> {
    let mut classes = vec![
        QueryClass {
            label: "one word, rare (a 6-digit id, 10 matches)",
            make: |i| (format!("{:06}", (i * 7919) % 10_000), None),
        },
        QueryClass {
            label: "two words (`document` + a number, 10 matches)",
            make: |i| (format!("document {}", (i * 104_729) % 10_000), None),
        },
        QueryClass {
            label: "prefix (5 digits, 100 matches)",
            make: |i| (format!("{:05}", (i * 31) % 1_000), None),
        },
    ];
    classes.extend(common_word_classes(
        "two words (`topic-N doc`, 2,700 matches)",
    ));
    classes.push(QueryClass {
        label: "a typo (`documnet N`, `sythetic`)",
        make: |i| {
            let text = if i % 2 == 0 {
                format!("documnet {}", (i * 104_729) % 10_000)
            } else {
                "sythetic".into()
            };
            (text, None)
        },
    });
    classes
}

/// The classes on the 10-server catalog (10 × 100,000, and `s0copy` listing `s0`'s URIs).
fn ten_server_classes() -> Vec<QueryClass> {
    vec![
        QueryClass {
            label: "server filter, `document` (1 of 10 servers)",
            make: |i| ("document".into(), Some(format!("s{}", i % SERVERS))),
        },
        QueryClass {
            label: "server filter, `topic-N doc` (1 of 10 servers)",
            make: |i| {
                (
                    format!("topic-{} doc", i % 37),
                    Some(format!("s{}", i % SERVERS)),
                )
            },
        },
        QueryClass {
            label: "merged view, a 6-digit id (11 listings, 10 URIs)",
            make: |i| (format!("{:06}", (i * 7919) % PER_SERVER), None),
        },
        QueryClass {
            label: "merged view, `document` (1,100,000 listings)",
            make: |_| ("document".into(), None),
        },
    ]
}

/// What timing one class with one engine found.
struct ClassTiming {
    samples: Samples,
    timed_out: usize,
    hits: u64,
    engine: String,
    match_mode: String,
}

fn time_class(
    client: &mut crate::process::SocketClient,
    class: &QueryClass,
    raw: bool,
) -> anyhow::Result<ClassTiming> {
    let limit = if raw {
        SQLITE_CLASS_TIME
    } else {
        INDEX_CLASS_TIME
    };
    // Warm-up: the caches of both engines, outside the timed queries.
    for warm in 0..3 {
        let _ = client.request("catalog/search", class.params(warm + 1000, raw))?;
    }
    let mut timing = ClassTiming {
        samples: Samples::default(),
        timed_out: 0,
        hits: 0,
        engine: String::new(),
        match_mode: String::new(),
    };
    let started = Instant::now();
    for i in 0..QUERIES_PER_CLASS {
        if started.elapsed() > limit {
            break;
        }
        let before = Instant::now();
        let answer = client.request("catalog/search", class.params(i, raw))?;
        // A search cut off at `search_timeout` counts with the time it took.
        timing.samples.push(before.elapsed().as_secs_f64() * 1000.0);
        match answer.get("result") {
            Some(result) => {
                timing.hits += result["results"].as_array().map_or(0, Vec::len) as u64;
                timing.engine = result["engine"].as_str().unwrap_or("?").to_string();
                if let Some(mode) = result["match"].as_str() {
                    timing.match_mode = mode.to_string();
                }
            }
            None => timing.timed_out += 1,
        }
    }
    Ok(timing)
}

/// Times every class with both engines and adds one table: each class's index row, its FTS5
/// row, and the p50 ratio.
fn class_table(
    report: &mut Report,
    client: &mut crate::process::SocketClient,
    classes: &[QueryClass],
    selective: Option<usize>,
) -> anyhow::Result<()> {
    let mut rows = Vec::new();
    let mut mix = [Samples::default(), Samples::default()];
    for (position_in_table, class) in classes.iter().enumerate() {
        eprintln!("  {}", class.label);
        let mut p50 = [f64::NAN; 2];
        for (position, raw) in [false, true].into_iter().enumerate() {
            let timing = time_class(client, class, raw)?;
            let samples = &timing.samples;
            p50[position] = samples.median();
            if selective.is_some_and(|count| position_in_table < count) {
                mix[position].0.extend(&samples.0);
            }
            let engine = if raw {
                "FTS5 (raw AND)".to_string()
            } else {
                format!("{} ({})", timing.engine, timing.match_mode)
            };
            rows.push(vec![
                if raw {
                    String::new()
                } else {
                    class.label.to_string()
                },
                engine,
                samples.len().to_string(),
                timing.timed_out.to_string(),
                format!("{:.1}", timing.hits as f64 / samples.len().max(1) as f64),
                format!("{:.2}", samples.median()),
                format!("{:.2}", samples.quantile(0.99)),
                format!("{:.2}", samples.max()),
                if raw {
                    format!("×{}", ratio(p50[1], p50[0]))
                } else {
                    String::new()
                },
            ]);
        }
    }
    if let Some(count) = selective {
        for (position, engine) in ["index", "FTS5 (raw AND)"].into_iter().enumerate() {
            let samples = &mix[position];
            rows.push(vec![
                format!("**selective mix (first {count} classes)**"),
                engine.into(),
                samples.len().to_string(),
                String::new(),
                String::new(),
                format!("{:.2}", samples.median()),
                format!("{:.2}", samples.quantile(0.99)),
                format!("{:.2}", samples.max()),
                String::new(),
            ]);
        }
    }
    report.table(
        &[
            "query class",
            "engine (match)",
            "queries",
            "cut off (search_timeout)",
            "hits/query",
            "p50 ms",
            "p99 ms",
            "max ms",
            "FTS5 p50 / index p50",
        ],
        &rows,
    );
    Ok(())
}

/// N clients, each on its own connection, each sending the next selective query as soon as
/// the answer arrives. Returns answers/s, refused as busy, p50, p99, daemon cores used.
fn throughput(
    daemon: &Daemon,
    clients: usize,
    raw: bool,
) -> anyhow::Result<(f64, u64, f64, f64, f64, f64)> {
    let results = Arc::new(Mutex::new(Vec::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let mut threads = Vec::new();
    for client_index in 0..clients {
        let socket = daemon.socket.clone();
        let stop = stop.clone();
        let results = results.clone();
        threads.push(std::thread::spawn(move || -> anyhow::Result<()> {
            let classes = million_classes();
            let mut client = connect(&socket)?;
            let mut latencies = Samples::default();
            let mut refused = 0u64;
            let mut i = client_index * 1_000_003;
            while !stop.load(Ordering::Relaxed) {
                i += 1;
                let started = Instant::now();
                let answer = client.request("catalog/search", classes[i % 3].params(i, raw))?;
                // Answers only: a search the gate refuses as busy is counted apart.
                if answer.get("result").is_some() {
                    latencies.push(started.elapsed().as_secs_f64() * 1000.0);
                } else {
                    refused += 1;
                }
            }
            results
                .lock()
                .map_err(|_| anyhow!("poisoned"))?
                .push((latencies, refused));
            Ok(())
        }));
    }
    let cpu_before = cpu_ticks(daemon.process.pid()).unwrap_or(0);
    let own_before = own_cpu_seconds();
    std::thread::sleep(THROUGHPUT_WINDOW);
    stop.store(true, Ordering::Relaxed);
    let cpu_after = cpu_ticks(daemon.process.pid()).unwrap_or(0);
    let own_after = own_cpu_seconds();
    for thread in threads {
        thread
            .join()
            .map_err(|_| anyhow!("a client thread panicked"))??;
    }
    let results = results.lock().map_err(|_| anyhow!("poisoned"))?;
    let mut latencies = Samples::default();
    let mut refused = 0;
    for (samples, turned_away) in results.iter() {
        latencies.0.extend(&samples.0);
        refused += turned_away;
    }
    let window = THROUGHPUT_WINDOW.as_secs_f64();
    Ok((
        latencies.len() as f64 / window,
        refused,
        latencies.median(),
        latencies.quantile(0.99),
        (cpu_after - cpu_before) as f64 / clock_ticks_per_second() / window,
        (own_after - own_before) / window,
    ))
}

/// The resources of the small server whose catalog changes: `CHANGING` entries at `version`.
fn changing_scenario(version: usize) -> Value {
    let resources: Vec<Value> = (0..CHANGING)
        .map(|index| {
            json!({
                "uri": format!("bench://churn/{index:03}"),
                "name": format!("churn-{index:03}"),
                "description": format!("Changing resource {index} at version {version}"),
                "mimeType": "text/plain",
            })
        })
        .collect();
    json!({"generate": 0, "page_size": 1000, "resources": resources})
}

/// Swaps of 100 changes on a daemon whose index holds 1,000,000 entries: the write lock's
/// hold time (from the log) and the time from the commit to the index reflecting it.
fn catch_up(report: &mut Report, daemon: &Daemon, scenario: &Path) -> anyhow::Result<()> {
    let mut client = daemon.client()?;
    let mut hold = Samples::default();
    let mut catch_up = Samples::default();
    for version in 1..=CATCH_UP_ROUNDS {
        let swaps_before = daemon.swaps().len();
        // The stdio fixture notices the file within 100 ms and sends list_changed.
        write_json_atomically(scenario, &changing_scenario(version))?;
        // Polled with a search, not `catalog/status` (which counts the merged catalog, too
        // heavy to call every millisecond): the index answers once it has the new text.
        let wanted = format!("at version {version}");
        let reflected_at = poll_until(
            "the index to reflect the swap",
            Duration::from_secs(120),
            Duration::from_millis(1),
            || {
                let answer = client.call(
                    "catalog/search",
                    json!({"query": format!("churn-042 {wanted}"), "limit": 1}),
                )?;
                let fresh = answer["engine"] == "index"
                    && answer["results"][0]["description"]
                        .as_str()
                        .is_some_and(|text| text.ends_with(&wanted));
                Ok(fresh.then(now_us))
            },
        )?;
        let swap = poll_until(
            "the swap in the log",
            Duration::from_secs(10),
            Duration::from_millis(10),
            || {
                Ok(daemon
                    .swaps()
                    .get(swaps_before..)
                    .and_then(|new| new.iter().find(|swap| swap.changed == CHANGING as u64))
                    .copied())
            },
        )?;
        if version == 1 {
            continue; // warm-up
        }
        hold.push(swap.hold_ms);
        catch_up.push((reflected_at - swap.committed_at_us) as f64 / 1000.0);
    }
    report.line(format!(
        "Catch-up: {} swaps of {CHANGING} changed resources (one small server beside the \
         1,000,000) after a warm-up. The swap's write-lock hold time (log `hold_ms`): {} ms \
         median (min–max); the swap's commit (log time) to `catalog/status` showing the index \
         with the new text (a search answered by the index, polled every ~1 ms; a search waits up to 1 s for a swap it may have seen, so this is also what a client sees): {} ms.",
        hold.len(),
        hold.summary(2),
        catch_up.summary(1),
    ));
    report.line("");
    Ok(())
}

pub fn run(
    report: &mut Report,
    million: &MillionDatabase,
    options: &QueryOptions,
) -> anyhow::Result<()> {
    let files = &million.files;
    report.line("## Query: 1,000,000 resources, the derived index beside FTS5");
    report.line("");
    if let (Some(hold), Some(_)) = (&options.index_hold, &million.first_load) {
        report.line(format!(
            "The first load's daemon ran with `[search] first_load_index_hold = \"{hold}\"`."
        ));
    }
    match &million.first_load {
        Some(load) => first_load_line(report, load),
        None => report.line(
            "The 1,000,000-resource database of an earlier run, reused (no first load measured).",
        ),
    }
    report.line("");
    if options.parts == ["firstload"] {
        return Ok(());
    }
    million_rest(report, files, options)
}

fn first_load_line(report: &mut Report, load: &FirstLoad) {
    report.line(format!(
        "First load into an empty directory, index on (one stdio fixture of 1,000,000 \
         resources, pages of 1,000): the walk committed {:.1} s after the daemon started; the \
         index held every entry {:.1} s later ({} MB on disk). Daemon peak RSS (VmHWM) over \
         the load and the index build: {} MB (budget 150 MB).",
        load.walk_seconds,
        load.index_seconds,
        mb(Some(load.index_bytes / 1024)),
        mb(load.peak_rss_kb),
    ));
    report.line("");
    report.line(format!(
        "Catch-up after the first load: the walk's commit (log) to `catalog/status` showing \
         the index current (polled every 50 ms): {} s (budget 5 s). One client searching \
         without pause all along (`document`, a 6-digit id, `topic-N doc` in turn, limit 10): \
         while the walk ran, {}; from the walk's end to the index current, {}.",
        load.commit_to_current_seconds
            .map_or("?".to_string(), |seconds| format!("{seconds:.2}")),
        load.searches[0].summary(),
        load.searches[1].summary(),
    ));
}

fn million_rest(
    report: &mut Report,
    files: &DaemonFiles,
    options: &QueryOptions,
) -> anyhow::Result<()> {
    // The million, unreachable now, and a small server whose catalog changes.
    let scenario = files.path("churn.json");
    write_json_atomically(&scenario, &changing_scenario(0))?;
    let churn_args = vec![
        "--name".to_string(),
        "churn".into(),
        "--scenario".into(),
        scenario.display().to_string(),
    ];
    let http_address = format!("127.0.0.1:{}", crate::fleet::free_port()?);
    let config = files.config(
        "",
        &format!(
            "{}{}{}",
            http_server_table(MILLION_SERVER, "http://127.0.0.1:9/mcp"),
            fixture_stdio_table("churn", &churn_args),
            crate::paging::http_face_table(files, &http_address)?
        ),
    )?;
    let started_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_millis() as i64;
    let daemon = start_daemon(files, &config)?;
    let mut client = daemon.client()?;
    poll_until(
        "the churn server's walk and the index",
        Duration::from_secs(600),
        Duration::from_millis(50),
        || {
            let status = client.call("catalog/status", json!({}))?;
            // A walk of this daemon (a reused database counts the walks of earlier runs).
            let churned = status["servers"].as_array().is_some_and(|servers| {
                servers.iter().any(|server| {
                    server["name"] == "churn"
                        && server["lastWalk"]["atMs"]
                            .as_i64()
                            .is_some_and(|at| at >= started_ms)
                })
            });
            Ok((churned && index_caught_up(&status, MILLION + CHANGING as u64)).then_some(()))
        },
    )?;
    let status = client.call("catalog/status", json!({}))?;
    if options.runs("classes") {
        report.line(format!(
            "`catalog/search` (limit 10) through the socket, one client, client-side round trip; \
             the database holds {} resources (`{MILLION_SERVER}`, unreachable, serving its \
             snapshot, and 100 of `churn`). Each class twice: a plain query (the derived index) \
             and the same words as an FTS5 AND query (`raw: true`, SQLite). 3 warm-up queries per \
             class and engine, then up to {QUERIES_PER_CLASS} queries or {} s (index) / {} s \
             (FTS5, whose common-word queries run into the 2 s `search_timeout`). Search gate: {} \
             at once.",
            status["daemon"]["resources"],
            INDEX_CLASS_TIME.as_secs(),
            SQLITE_CLASS_TIME.as_secs(),
            status["daemon"]["socketLimits"]["maxConcurrentSearches"],
        ));
        report.line("");
        class_table(report, &mut client, &million_classes(), Some(3))?;
    }

    let runs: &[(bool, usize)] = if options.runs("throughput") {
        &[
            (false, 1),
            (false, 8),
            (false, 64),
            (true, 1),
            (true, 8),
            (true, 64),
        ]
    } else if options.runs("throughput8") {
        &[(false, 8), (false, 8), (false, 8)]
    } else {
        &[]
    };
    if !runs.is_empty() {
        eprintln!("  throughput");
        report.line(format!(
            "Throughput of the selective mix: N socket clients, each on its own connection, each \
             sending its next search as soon as the answer arrives, for {} s. Refusals (`busy`, \
             the search gate's bounded queue) are counted apart and not in the latencies. \
             Search gate: {} at once.",
            THROUGHPUT_WINDOW.as_secs(),
            status["daemon"]["socketLimits"]["maxConcurrentSearches"],
        ));
        report.line("");
        let mut rows = Vec::new();
        for &(raw, clients) in runs {
            let (rate, refused, p50, p99, cores, client_cores) = throughput(&daemon, clients, raw)?;
            rows.push(vec![
                if raw { "FTS5 (raw AND)" } else { "index" }.to_string(),
                clients.to_string(),
                format!("{rate:.0}"),
                refused.to_string(),
                format!("{p50:.2}"),
                format!("{p99:.2}"),
                format!("{cores:.2}"),
                format!("{client_cores:.2}"),
            ]);
        }
        report.table(
            &[
                "engine",
                "clients",
                "answers/s",
                "refused busy",
                "p50 ms",
                "p99 ms",
                "daemon cores used",
                "bench clients' cores used",
            ],
            &rows,
        );
    }

    if options.runs("catchup") {
        eprintln!("  catch-up");
        catch_up(report, &daemon, &scenario)?;
    }

    if options.runs("paging") {
        eprintln!("  paging");
        crate::paging::socket_paging(report, &daemon)?;
    }
    if options.runs("httppaging") {
        eprintln!("  paging over HTTP");
        crate::paging::http_paging(report, &daemon, &http_address)?;
    }
    report.line(format!(
        "Daemon peak RSS (VmHWM) at the end of this part: {} MB.",
        mb(proc_status_kb(daemon.process.pid(), "VmHWM"))
    ));
    report.line("");
    drop(daemon);

    match options.runs("ten") {
        true => ten_servers(report),
        false => Ok(()),
    }
}

/// The 10-server catalog: one HTTP fixture serving ten catalogs of 100,000 (`s0`..`s9`), and
/// `s0copy` listing `s0`'s URIs again, so the merged view picks one listing per URI.
fn ten_servers(report: &mut Report) -> anyhow::Result<()> {
    eprintln!("  the 10-server catalog");
    let files = DaemonFiles::fresh("ten-servers")?;
    let mut args = fixture_args(PER_SERVER, 1000, "ten");
    args.extend(["--endpoints".to_string(), SERVERS.to_string()]);
    let mut fixture = start_http_fixture(&args, &files.path("fixture.log"))?;
    let mut servers = String::new();
    // The fixture prints `…/mcp/`; its endpoints are `…/mcp/0` .. `…/mcp/9`.
    let base = fixture.url.trim_end_matches('/').to_string();
    for server in 0..SERVERS {
        servers.push_str(&http_server_table(
            &format!("s{server}"),
            &format!("{base}/{server}"),
        ));
    }
    servers.push_str(&http_server_table(COPY_SERVER, &format!("{base}/0")));
    let config = files.config("", &servers)?;
    let started = Instant::now();
    let daemon = start_daemon(&files, &config)?;
    let listings = (SERVERS as u64 + 1) * PER_SERVER as u64;
    let load = first_load(
        &daemon,
        started,
        listings,
        &std::sync::atomic::AtomicU8::new(LOADING),
    )?;
    fixture.process.stop();
    report.line(format!(
        "The 10-server catalog: one HTTP fixture serving ten catalogs of 100,000 (`s0`..`s9`, \
         1,000,000 URIs) and `{COPY_SERVER}` listing `s0`'s 100,000 URIs again ({listings} \
         listings; the merged view shows `s0`'s, the lower name at equal priority). Its first \
         load: every walk committed after {:.1} s, the index held every listing {:.1} s later \
         ({} MB on disk).",
        load.walk_seconds,
        load.index_seconds,
        mb(Some(load.index_bytes / 1024)),
    ));
    report.line("");
    let mut client = daemon.client()?;
    // Sanity of the merged view: one hit per URI.
    let merged = client.call("catalog/search", json!({"query": "000042", "limit": 20}))?;
    let hits = merged["results"].as_array().map_or(0, Vec::len);
    if hits != SERVERS {
        bail!("the merged view found {hits} listings of the 10 URIs of id 000042: {merged}");
    }
    class_table(report, &mut client, &ten_server_classes(), None)?;
    Ok(())
}
