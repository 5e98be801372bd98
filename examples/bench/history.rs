//! History (issue 34's budgets): a re-walk of 100,000 resources with history on beside the same re-walk with history off (a tenth changed, then nothing changed), `catalog/history` and `catalog/diff` of a tool with 1,000 versions, and the bytes on disk of a kept version.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use serde_json::{json, Value};

use crate::daemon::{fixture_stdio_table, start_daemon, Daemon, DaemonFiles};
use crate::measure::{clock_ticks_per_second, cpu_ticks, now_us, thread_cpu_between, thread_ticks};
use crate::process::{write_json_atomically, SocketClient};
use crate::report::{ratio, Report, Samples};

const RESOURCES: usize = 100_000;
/// A new prefix on every tenth resource changes 10% of the catalog.
const CHANGED_EVERY: usize = 10;
/// Timed rounds per side and case, after one warm-up round each: even, so each side goes
/// first in as many rounds as the other.
const ROUNDS: usize = 8;
/// A daemon is quiet when it used at most this many clock ticks (10 ms each) over
/// `QUIET_WINDOW`: its walk, swap, search index and WAL checkpoint all done.
const QUIET_TICKS: u64 = 1;
const QUIET_WINDOW: Duration = Duration::from_millis(500);
/// The versions of the one tool whose history is read.
const VERSIONS: usize = 1_000;
/// Requests timed per read method.
const READS: usize = 1_000;
/// Generated tools whose every walk is a new version, for the bytes a version costs on disk.
const SIZE_TOOLS: usize = 10_000;
const SIZE_WALKS: usize = 10;

/// The walk pace lets a re-walk start this soon after the last (it waits at least the last
/// walk's duration anyway); each round also waits past the pace, so no round times it.
const PACE_SETTINGS: &str = "min_walk_interval = \"100ms\"\ndebounce = \"50ms\"\n";

/// The parts of the scenario to run (`--history-parts=rewalk,reads,bytes`; all by default).
pub struct Parts {
    rewalk: bool,
    reads: bool,
    bytes: bool,
}

impl Parts {
    pub fn from_arguments(arguments: &[String]) -> anyhow::Result<Parts> {
        let Some(list) = arguments
            .iter()
            .find_map(|argument| argument.strip_prefix("--history-parts="))
        else {
            return Ok(Parts {
                rewalk: true,
                reads: true,
                bytes: true,
            });
        };
        let names: Vec<&str> = list.split(',').collect();
        if let Some(unknown) = names
            .iter()
            .find(|name| !["rewalk", "reads", "bytes"].contains(name))
        {
            bail!("unknown history part {unknown}; choose from rewalk, reads, bytes");
        }
        Ok(Parts {
            rewalk: names.contains(&"rewalk"),
            reads: names.contains(&"reads"),
            bytes: names.contains(&"bytes"),
        })
    }
}

pub fn run(report: &mut Report, parts: &Parts) -> anyhow::Result<()> {
    report.line(
        "## History: re-walk cost with history on and off, reads of 1,000 versions, bytes on disk",
    );
    report.line("");
    report.line(format!("Host: {}.", crate::cpu_and_vector_flags()));
    report.line("");
    if parts.rewalk {
        rewalk_side_by_side(report)?;
    }
    if parts.reads {
        reads_of_a_long_history(report)?;
    }
    if parts.bytes {
        bytes_per_version(report)?;
    }
    Ok(())
}

fn resources_scenario(prefix: &str) -> Value {
    json!({"generate": RESOURCES, "page_size": 1000, "prefix": prefix, "prefix_every": CHANGED_EVERY})
}

/// One daemon of the side-by-side pair: its own fixture (stdio), scenario file and database.
struct Side {
    label: &'static str,
    daemon: Daemon,
    scenario: std::path::PathBuf,
}

fn start_side(label: &'static str, history: bool) -> anyhow::Result<Side> {
    let files = DaemonFiles::fresh(&format!("history-{label}"))?;
    let scenario = files.path("scenario.json");
    write_json_atomically(&scenario, &resources_scenario("v0"))?;
    let args = vec![
        "--name".to_string(),
        "docs".into(),
        "--scenario".into(),
        scenario.display().to_string(),
    ];
    let mut table = fixture_stdio_table("docs", &args);
    if history {
        table = format!("{}\nhistory = true\n\n", table.trim_end());
    }
    let config = files.config(PACE_SETTINGS, &table)?;
    let daemon = start_daemon(&files, &config)?;
    daemon.wait_for_walks(1, Duration::from_secs(1800))?;
    wait_for_index(&daemon)?;
    Ok(Side {
        label,
        daemon,
        scenario,
    })
}

fn wait_for_index(daemon: &Daemon) -> anyhow::Result<()> {
    crate::query::wait_for_index(
        &mut daemon.client()?,
        RESOURCES as u64,
        Duration::from_millis(100),
    )
}

/// What one re-walk cost the daemon.
struct Round {
    walk_ms: f64,
    swap_ms: f64,
    cpu_seconds: f64,
    /// The daemon's CPU over the round by thread: the writer (staging, the swap, history),
    /// the WAL checkpointer, the search index, and every other thread (the async runtime:
    /// reading and parsing the pages).
    writer_cpu: f64,
    checkpoint_cpu: f64,
    search_cpu: f64,
    other_cpu: f64,
    changed: u64,
    /// Walks the pace held back during the round: 0 unless the round timed the pace.
    throttled: u64,
}

/// Waits until the daemon is quiet (`QUIET_TICKS` over `QUIET_WINDOW`): work a round left
/// behind (a WAL checkpoint, the search index's merges) lands in that round, not in the next
/// one nor in the other daemon's.
fn wait_until_quiet(daemon: &Daemon) -> anyhow::Result<()> {
    let pid = daemon.process.pid();
    let started = Instant::now();
    let mut last = cpu_ticks(pid).context("the daemon's CPU time")?;
    loop {
        std::thread::sleep(QUIET_WINDOW);
        let now = cpu_ticks(pid).context("the daemon's CPU time")?;
        if now - last <= QUIET_TICKS {
            return Ok(());
        }
        if started.elapsed() > Duration::from_secs(120) {
            bail!("the daemon was still busy after 2 minutes");
        }
        last = now;
    }
}

/// Waits until the walk pace (`max(min_walk_interval, last walk's duration)` after the last
/// walk's end) has passed, with a margin, so the next walk starts at once.
fn wait_past_pace(daemon: &Daemon) -> anyhow::Result<()> {
    let status = daemon.server_status("docs")?;
    let last = &status["lastWalk"];
    let started_ms = last["atMs"].as_i64().unwrap_or(0);
    let duration_ms = last["durationMs"].as_i64().unwrap_or(0);
    // The swap follows the walk; twice the walk's duration covers it and the pace.
    let free_at_us = (started_ms + 3 * duration_ms.max(100) + 500) * 1000;
    let wait_us = free_at_us - now_us();
    if wait_us > 0 {
        std::thread::sleep(Duration::from_micros(wait_us as u64));
    }
    Ok(())
}

fn throttled(daemon: &Daemon) -> anyhow::Result<u64> {
    Ok(daemon.server_status("docs")?["live"]["walksThrottled"]
        .as_u64()
        .unwrap_or(0))
}

/// One re-walk: with `prefix`, the scenario changes a tenth and the fixture's `list_changed`
/// starts the walk; without, `catalog/refresh` walks the unchanged catalog. Starts with both
/// daemons quiet (`other` too: its background work would share the cores with this round's)
/// and times this daemon's CPU until it is quiet again, so the round's CPU is all the work the
/// re-walk caused and nothing else.
fn round(side: &Side, other: &Side, prefix: Option<&str>) -> anyhow::Result<Round> {
    let daemon = &side.daemon;
    wait_past_pace(daemon)?;
    wait_until_quiet(&other.daemon)?;
    wait_until_quiet(daemon)?;
    let throttled_before = throttled(daemon)?;
    let swaps_before = daemon.swaps().len();
    let pid = daemon.process.pid();
    let cpu_before = cpu_ticks(pid).context("the daemon's CPU time")?;
    let threads_before = thread_ticks(pid);
    match prefix {
        Some(prefix) => write_json_atomically(&side.scenario, &resources_scenario(prefix))?,
        None => {
            daemon.call("catalog/refresh", json!({"server": "docs", "wait": true}))?;
        }
    }
    let deadline = Instant::now() + Duration::from_secs(600);
    let swap = loop {
        if let Some(swap) = daemon.swaps().get(swaps_before).copied() {
            break swap;
        }
        if Instant::now() > deadline {
            bail!("{}: the re-walk never swapped", side.label);
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    wait_for_index(daemon)?;
    wait_until_quiet(daemon)?;
    let cpu_after = cpu_ticks(pid).context("the daemon's CPU time")?;
    let threads = thread_cpu_between(&threads_before, &thread_ticks(pid));
    let of = |name: &str| threads.get(name).copied().unwrap_or(0.0);
    let cpu_seconds = (cpu_after - cpu_before) as f64 / clock_ticks_per_second();
    // A thread's name in /proc is cut at 15 bytes: "store-checkpoint" reads "store-checkpoin".
    let (writer_cpu, checkpoint_cpu) = (of("store-writer"), of("store-checkpoin"));
    let search_cpu = threads
        .iter()
        .filter(|(name, _)| name.starts_with("search-"))
        .map(|(_, seconds)| seconds)
        .sum::<f64>();
    let status = daemon.server_status("docs")?;
    Ok(Round {
        walk_ms: status["lastWalk"]["durationMs"]
            .as_f64()
            .unwrap_or(f64::NAN),
        swap_ms: swap.total_ms,
        cpu_seconds,
        writer_cpu,
        checkpoint_cpu,
        search_cpu,
        other_cpu: (cpu_seconds - writer_cpu - checkpoint_cpu - search_cpu).max(0.0),
        changed: swap.changed,
        throttled: throttled(daemon)? - throttled_before,
    })
}

#[derive(Default)]
struct Tally {
    walk_ms: Samples,
    swap_ms: Samples,
    refresh_ms: Samples,
    cpu_seconds: Samples,
    writer_cpu: Samples,
    checkpoint_cpu: Samples,
    search_cpu: Samples,
    other_cpu: Samples,
    changed: Samples,
    throttled: u64,
}

impl Tally {
    fn add(&mut self, round: &Round) {
        self.walk_ms.push(round.walk_ms);
        self.swap_ms.push(round.swap_ms);
        self.refresh_ms.push(round.walk_ms + round.swap_ms);
        self.cpu_seconds.push(round.cpu_seconds);
        self.writer_cpu.push(round.writer_cpu);
        self.checkpoint_cpu.push(round.checkpoint_cpu);
        self.search_cpu.push(round.search_cpu);
        self.other_cpu.push(round.other_cpu);
        self.changed.push(round.changed as f64);
        self.throttled += round.throttled;
    }
}

fn rewalk_side_by_side(report: &mut Report) -> anyhow::Result<()> {
    eprintln!("history: two daemons of {RESOURCES} resources, history on and off");
    let on = start_side("on", true)?;
    let off = start_side("off", false)?;
    let sides = [&on, &off];
    // (case, tallies of on and off)
    let mut cases: Vec<(&str, [Tally; 2])> = Vec::new();
    for (case, changes) in [("10% changed", true), ("nothing changed", false)] {
        let mut tallies = [Tally::default(), Tally::default()];
        // Round 0 warms both up (a kept entry's first change also records the body it
        // replaces); then the order alternates so a drift of the host's load falls on both.
        for number in 0..=ROUNDS {
            let prefix = format!("{case}-{number}");
            let order: [usize; 2] = if number % 2 == 0 { [0, 1] } else { [1, 0] };
            for index in order {
                let figures = round(
                    sides[index],
                    sides[1 - index],
                    changes.then_some(prefix.as_str()),
                )?;
                eprintln!(
                    "{case} round {number} history {}: walk {:.0} ms, swap {:.0} ms, CPU {:.2} s (writer {:.2}, checkpoint {:.2}, search {:.2}, other {:.2}), changed {}, throttled {}, load {}",
                    sides[index].label,
                    figures.walk_ms,
                    figures.swap_ms,
                    figures.cpu_seconds,
                    figures.writer_cpu,
                    figures.checkpoint_cpu,
                    figures.search_cpu,
                    figures.other_cpu,
                    figures.changed,
                    figures.throttled,
                    std::fs::read_to_string("/proc/loadavg").unwrap_or_default().trim(),
                );
                if number > 0 {
                    tallies[index].add(&figures);
                }
            }
        }
        cases.push((case, tallies));
    }
    report.line(format!(
        "Two daemons side by side, each over its own stdio fixture of {RESOURCES} generated \
         resources (page size 1,000): one with `history = true` on the server, one without. \
         A round re-walks one daemon, then the other (the order alternating), {ROUNDS} rounds \
         after a warm-up. \"10% changed\": the scenario gives every {CHANGED_EVERY}th resource \
         a new description and the fixture's `list_changed` starts the walk; \"nothing \
         changed\": `catalog/refresh`. Each round first waits past the walk pace \
         (`max(min_walk_interval, last walk's duration)`), so no round times it (walks the \
         pace held back: on {}, off {}). Walk ms is `lastWalk.durationMs` (the pages), swap ms \
         the writer's `swap_ms` (where history is written). A round starts with both daemons \
         quiet (at most {QUIET_TICKS} clock tick of CPU in {QUIET_WINDOW:?}), so neither's \
         WAL checkpoint or search index lands in the other's round; daemon CPU is its utime + \
         stime from /proc from the round's start until it is quiet again (the search index \
         caught up and the checkpoint done), by thread: the writer (staging, the swap and the \
         history), the checkpointer, the search index's threads, and the rest (the async \
         runtime reading and parsing the pages). Medians (min–max); the \
         ratio is on / off of the medians (budget: <= 1.10 with 10% changed, about 1.00 with \
         nothing changed).",
        cases.iter().map(|(_, t)| t[0].throttled).sum::<u64>(),
        cases.iter().map(|(_, t)| t[1].throttled).sum::<u64>(),
    ));
    report.line("");
    let rows = rewalk_rows(&cases);
    report.table(
        &["case", "measure", "history on", "history off", "on / off"],
        &rows,
    );
    let versions: i64 = rusqlite::Connection::open(on.daemon.socket.with_file_name("catalog.db"))?
        .query_row("SELECT count(*) FROM history_versions", [], |row| {
            row.get(0)
        })?;
    report.line(format!(
        "The history-on daemon kept {versions} versions at the end."
    ));
    report.line("");
    Ok(())
}

/// The re-walk table's rows: each case's medians on and off, and their ratio.
fn rewalk_rows(cases: &[(&str, [Tally; 2])]) -> Vec<Vec<String>> {
    let mut rows = Vec::new();
    for (case, [on, off]) in cases {
        let row = |what: &str, on: &Samples, off: &Samples, digits: usize| {
            vec![
                case.to_string(),
                what.to_string(),
                on.summary(digits),
                off.summary(digits),
                ratio(on.median(), off.median()),
            ]
        };
        rows.push(row("walk + swap ms", &on.refresh_ms, &off.refresh_ms, 0));
        rows.push(row("walk ms", &on.walk_ms, &off.walk_ms, 0));
        rows.push(row("swap ms", &on.swap_ms, &off.swap_ms, 0));
        rows.push(row("daemon CPU s", &on.cpu_seconds, &off.cpu_seconds, 2));
        rows.push(row("writer CPU s", &on.writer_cpu, &off.writer_cpu, 2));
        rows.push(row(
            "checkpoint CPU s",
            &on.checkpoint_cpu,
            &off.checkpoint_cpu,
            2,
        ));
        rows.push(row("search CPU s", &on.search_cpu, &off.search_cpu, 2));
        rows.push(row("other CPU s", &on.other_cpu, &off.other_cpu, 2));
        rows.push(row("entries changed", &on.changed, &off.changed, 0));
    }
    rows
}

/// The p99 of `READS` calls of `method` with `params` on one connection, in ms.
fn timed_reads(client: &mut SocketClient, method: &str, params: &Value) -> anyhow::Result<Samples> {
    let mut samples = Samples::default();
    for _ in 0..READS {
        let started = Instant::now();
        let answer = client.request(method, params.clone())?;
        samples.push(started.elapsed().as_secs_f64() * 1000.0);
        if answer.get("error").is_some() {
            bail!("{method} {params} failed: {answer}");
        }
    }
    Ok(samples)
}

fn reads_of_a_long_history(report: &mut Report) -> anyhow::Result<()> {
    eprintln!("history: one tool changed {VERSIONS} times");
    let files = DaemonFiles::fresh("history-reads")?;
    let scenario = files.path("scenario.json");
    write_json_atomically(
        &scenario,
        &json!({"generate": 10, "generate_tools": 1, "revise_tools_per_list": true}),
    )?;
    let args = vec![
        "--name".to_string(),
        "fx".into(),
        "--scenario".into(),
        scenario.display().to_string(),
    ];
    let config = files.config(
        &format!("{PACE_SETTINGS}history_versions_per_key = {VERSIONS}\n"),
        &fixture_stdio_table("fx", &args),
    )?;
    let daemon = start_daemon(&files, &config)?;
    daemon.wait_for_walks(1, Duration::from_secs(120))?;
    let started = Instant::now();
    let mut client = daemon.client()?;
    // Every walk lists the tool anew: each refresh records one more version.
    while count_versions(&files.path("catalog.db"), Some("tool_000000"))? < VERSIONS as i64 {
        client.call("catalog/refresh", json!({"server": "fx", "wait": true}))?;
        if started.elapsed() > Duration::from_secs(1800) {
            bail!("{VERSIONS} versions took over 30 minutes");
        }
    }
    let building = started.elapsed().as_secs_f64();
    let key = json!({"kind": "tool", "server": "fx", "key": "tool_000000"});
    let with = |extra: Value| {
        let mut params = key.clone();
        if let (Some(params), Some(extra)) = (params.as_object_mut(), extra.as_object()) {
            params.extend(extra.clone());
        }
        params
    };
    let first_page = client.call("catalog/history", with(json!({"limit": 100})))?;
    let listed = first_page["versions"].as_array().map_or(0, Vec::len);
    let newest = first_page["versions"][0]["version"]
        .as_i64()
        .context("a version")?;
    let oldest_page = client.call(
        "catalog/history",
        with(json!({"cursor": (newest - VERSIONS as i64 + 30).to_string(), "limit": 100})),
    )?;
    let oldest = oldest_page["versions"]
        .as_array()
        .and_then(|versions| versions.last())
        .and_then(|version| version["version"].as_i64())
        .context("the oldest version")?;
    let middle = (newest + oldest) / 2;
    let cases: Vec<(&str, &str, Value)> = vec![
        (
            "catalog/history",
            "newest 20 (default page)",
            with(json!({})),
        ),
        (
            "catalog/history",
            "newest 100 with definitions",
            with(json!({"limit": 100, "includeDefinitions": true})),
        ),
        (
            "catalog/history",
            "100 from the middle (cursor)",
            with(json!({"cursor": middle.to_string(), "limit": 100})),
        ),
        (
            "catalog/diff",
            "previous vs current (default)",
            with(json!({})),
        ),
        (
            "catalog/diff",
            "oldest vs newest",
            with(json!({"from": oldest, "to": newest})),
        ),
    ];
    let mut rows = Vec::new();
    for (method, what, params) in &cases {
        let samples = timed_reads(&mut client, method, params)?;
        rows.push(vec![
            format!("`{method}`"),
            what.to_string(),
            format!("{:.2}", samples.median()),
            format!("{:.2}", samples.quantile(0.99)),
            format!("{:.2}", samples.max()),
        ]);
    }
    let kept = count_versions(&files.path("catalog.db"), Some("tool_000000"))?;
    report.line(format!(
        "One stdio fixture tool (`tool_000000`, 8 described properties, about 1.8 kB) whose \
         description carries a revision number that every `tools/list` raises; \
         `history_versions_per_key = {VERSIONS}` and {kept} versions kept ({VERSIONS} built by \
         `catalog/refresh {{wait}}` in {building:.0} s; the first page listed {listed}, versions \
         {oldest}..{newest}). {READS} calls each, one after another on one socket connection, \
         timed at the client (budget: p99 <= 5 ms)."
    ));
    report.line("");
    report.table(&["method", "what", "median ms", "p99 ms", "max ms"], &rows);
    Ok(())
}

/// The kept versions of one key (of every key with `None`).
fn count_versions(database: &Path, key: Option<&str>) -> anyhow::Result<i64> {
    Ok(rusqlite::Connection::open(database)?.query_row(
        "SELECT count(*) FROM history_versions WHERE ?1 IS NULL OR key = ?1",
        [key],
        |row| row.get(0),
    )?)
}

fn bytes_per_version(report: &mut Report) -> anyhow::Result<()> {
    eprintln!("history: {SIZE_TOOLS} tools, {SIZE_WALKS} walks each a new version of every one");
    let files = DaemonFiles::fresh("history-size")?;
    let scenario = files.path("scenario.json");
    write_json_atomically(
        &scenario,
        &json!({"generate": 10, "generate_tools": SIZE_TOOLS, "revise_tools_per_list": true}),
    )?;
    let args = vec![
        "--name".to_string(),
        "fx".into(),
        "--scenario".into(),
        scenario.display().to_string(),
    ];
    let config = files.config(PACE_SETTINGS, &fixture_stdio_table("fx", &args))?;
    let mut daemon = start_daemon(&files, &config)?;
    daemon.wait_for_walks(1, Duration::from_secs(600))?;
    let mut client = daemon.client()?;
    for _ in 0..SIZE_WALKS {
        client.call("catalog/refresh", json!({"server": "fx", "wait": true}))?;
    }
    drop(client);
    daemon.process.stop();
    let measured =
        measure_history_bytes(&files.path("catalog.db"), &files.path("history-only.db"))?;
    let per_version = measured.file_bytes as f64 / measured.versions as f64;
    let body = measured.body_bytes as f64 / measured.bodies as f64;
    let overhead =
        (measured.file_bytes as f64 - measured.body_bytes as f64) / measured.versions as f64;
    // At the default bounds: 100 versions per key, 365 days, 256 MiB of bodies. A tool changed
    // once a day for a year has 365 distinct versions; the count keeps 100 of each.
    let by_count: f64 = 10_000.0 * 100.0;
    let by_bytes = (256.0 * 1024.0 * 1024.0) / body;
    let kept = by_count.min(by_bytes);
    report.line(format!(
        "A stdio fixture of {SIZE_TOOLS} generated tools whose every walk is a new version of \
         each ({SIZE_WALKS} `catalog/refresh {{wait}}` after the first load, so {} versions \
         with {} distinct bodies of {body:.0} bytes on average). The history's tables and \
         indexes copied into an empty database (`VACUUM INTO` after dropping every other \
         table of a copy): {} bytes, {per_version:.0} bytes per version on disk, of which \
         {overhead:.0} bytes beside the body's text (the row, the key's indexes, page space).",
        measured.versions, measured.bodies, measured.file_bytes
    ));
    report.line("");
    report.line(format!(
        "10,000 tools changed once a day for a year at the default bounds: 3,650,000 versions \
         seen; `history_versions_per_key = 100` keeps {by_count:.0}, `history_max_bytes = 256MiB` \
         of bodies keeps {by_bytes:.0} (about {:.0} days of each tool), so {kept:.0} are kept: \
         about {:.0} MiB on disk.",
        by_bytes / 10_000.0,
        kept * per_version / 1024.0 / 1024.0,
    ));
    report.line("");
    Ok(())
}

struct HistoryBytes {
    versions: i64,
    bodies: i64,
    body_bytes: i64,
    file_bytes: u64,
}

/// Copies the database, drops everything but the history (and the servers it refers to) from
/// the copy and writes the rest into `output` with `VACUUM INTO`: its size is the history's.
fn measure_history_bytes(database: &Path, output: &Path) -> anyhow::Result<HistoryBytes> {
    let copy = database.with_extension("copy.db");
    std::fs::copy(database, &copy)?;
    let _ = std::fs::remove_file(output);
    let connection = rusqlite::Connection::open(&copy)?;
    let (versions, bodies, body_bytes) = connection.query_row(
        "SELECT (SELECT count(*) FROM history_versions), count(*), sum(bytes) FROM history_bodies",
        [],
        |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)),
    )?;
    let names = |sql: &str| -> anyhow::Result<Vec<String>> {
        Ok(connection
            .prepare(sql)?
            .query_map([], |row| row.get(0))?
            .collect::<Result<_, _>>()?)
    };
    // Views first, then virtual tables (their shadow tables go with them), then the rest.
    for view in names("SELECT name FROM sqlite_master WHERE type = 'view'")? {
        connection.execute_batch(&format!("DROP VIEW \"{view}\""))?;
    }
    for table in names("SELECT name FROM sqlite_master WHERE sql LIKE 'CREATE VIRTUAL TABLE%'")? {
        connection.execute_batch(&format!("DROP TABLE \"{table}\""))?;
    }
    for table in names(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'
         AND name NOT LIKE 'history_%' AND name <> 'servers'",
    )? {
        connection.execute_batch(&format!("DROP TABLE IF EXISTS \"{table}\""))?;
    }
    connection.execute("VACUUM INTO ?1", [output.display().to_string()])?;
    let file_bytes = std::fs::metadata(output)?.len();
    drop(connection);
    let _ = std::fs::remove_file(&copy);
    Ok(HistoryBytes {
        versions,
        bodies,
        body_bytes,
        file_bytes,
    })
}
