//! Kinds (issue 12): a walk of 10,000 tools with large input schemas (first sync, no-change re-walk, the daemon's peak RSS) and tool search at 100,000 tools through the socket.

use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use serde_json::{json, Value};

use crate::daemon::{fixture_stdio_table, start_daemon, Daemon, DaemonFiles};
use crate::measure::proc_status_kb;
use crate::process::{poll_until, write_json_atomically};
use crate::report::{mb, Report, Samples};

/// Described input properties per tool in the walk: about 9 KiB of input schema each.
const LARGE_SCHEMA_PROPERTIES: usize = 40;
/// Described input properties per tool in the search catalog (a smaller, typical schema).
const SEARCH_SCHEMA_PROPERTIES: usize = 4;
/// Fresh databases walked for the first-sync rows, and no-change re-walks on each.
const FIRST_SYNCS: usize = 3;
const REWALKS: usize = 3;
/// Timed searches per query after the warm-up ones.
const SEARCHES: usize = 200;
const WARM_UP_SEARCHES: usize = 5;
/// How often the first sync is checked for completion.
const SYNC_POLL: Duration = Duration::from_millis(20);

/// A daemon mirroring one stdio fixture named `tools` that serves `count` generated tools.
fn tools_daemon(
    name: &str,
    count: usize,
    properties: usize,
    page: usize,
) -> anyhow::Result<(DaemonFiles, Daemon, Instant)> {
    let files = DaemonFiles::fresh(name)?;
    let scenario = files.path("scenario.json");
    write_json_atomically(
        &scenario,
        &json!({
            "generate": 0,
            "generate_tools": count,
            "generated_tool_properties": properties,
            "tools_page_size": page,
        }),
    )?;
    let args = vec![
        "--name".into(),
        "tools".into(),
        "--scenario".into(),
        scenario.display().to_string(),
    ];
    let config = files.config("", &fixture_stdio_table("tools", &args))?;
    let started = Instant::now();
    let daemon = start_daemon(&files, &config)?;
    Ok((files, daemon, started))
}

/// Waits until the daemon holds `count` tools of server `tools`.
fn wait_for_tools(daemon: &Daemon, count: usize, limit: Duration) -> anyhow::Result<()> {
    let mut client = daemon.client()?;
    poll_until(&format!("{count} tools"), limit, SYNC_POLL, || {
        let status = client.call("catalog/status", json!({}))?;
        let held = status["servers"]
            .as_array()
            .and_then(|servers| servers.iter().find(|server| server["name"] == "tools"))
            .and_then(|server| server["kinds"]["tool"]["count"].as_u64())
            .unwrap_or(0);
        Ok((held as usize >= count).then_some(()))
    })
}

/// Bytes of one mirrored tool's definition and of its input schema, as JSON.
fn tool_sizes(daemon: &Daemon, name: &str) -> anyhow::Result<(usize, usize)> {
    let details = daemon.call("catalog/tool", json!({"server": "tools", "name": name}))?;
    let definition = &details["definition"];
    Ok((
        definition.to_string().len(),
        definition["inputSchema"].to_string().len(),
    ))
}

fn daemon_peak_kb(daemon: &Daemon) -> Option<u64> {
    proc_status_kb(daemon.process.child.id(), "VmHWM")
}

pub fn run(report: &mut Report, quick: bool) -> anyhow::Result<()> {
    let (walked, searched) = match quick {
        true => (1_000, 10_000),
        false => (10_000, 100_000),
    };
    walk(report, walked)?;
    search(report, searched)
}

fn walk(report: &mut Report, count: usize) -> anyhow::Result<()> {
    report.line(format!(
        "## Kinds: a walk of {count} tools with large input schemas"
    ));
    report.line("");
    let mut first_sync = Samples::default();
    let mut rewalk = Samples::default();
    let mut rewalk_daemon = Samples::default();
    let mut peak_after_sync = Vec::new();
    let mut peak_after_rewalks = Vec::new();
    let mut sizes = (0, 0);
    for round in 0..FIRST_SYNCS {
        let (_files, daemon, started) = tools_daemon(
            &format!("kinds-walk-{round}"),
            count,
            LARGE_SCHEMA_PROPERTIES,
            100,
        )?;
        wait_for_tools(&daemon, count, Duration::from_secs(300))?;
        first_sync.push(started.elapsed().as_secs_f64() * 1000.0);
        peak_after_sync.push(daemon_peak_kb(&daemon));
        sizes = tool_sizes(&daemon, "tool_000001")?;
        let mut client = daemon.client()?;
        for _ in 0..REWALKS {
            let began = Instant::now();
            let answer =
                client.call("catalog/refresh", json!({"server": "tools", "wait": true}))?;
            rewalk.push(began.elapsed().as_secs_f64() * 1000.0);
            let outcome = &answer["servers"]["tools"];
            if outcome["ok"] != true {
                bail!("the re-walk failed: {answer}");
            }
            if let Some(duration) = outcome["durationMs"].as_f64() {
                rewalk_daemon.push(duration);
            }
        }
        peak_after_rewalks.push(daemon_peak_kb(&daemon));
    }
    let (definition_bytes, schema_bytes) = sizes;
    report.line(format!(
        "The fixture (stdio, release) serves {count} generated tools, 100 per `tools/list` page; \
         each has {LARGE_SCHEMA_PROPERTIES} described input properties: {schema_bytes} bytes of \
         `inputSchema`, {definition_bytes} bytes per tool definition, about {:.0} MB in all. \
         First sync: from starting the daemon on a fresh database until `catalog/status` counts \
         every tool (polled every {} ms), {FIRST_SYNCS} databases. Re-walk: `catalog/refresh \
         {{wait: true}}` round trips when nothing changed (resources and tools walked, every \
         entry compared by hash), {REWALKS} on each database. Peak RSS is the daemon's VmHWM.",
        (definition_bytes * count) as f64 / 1e6,
        SYNC_POLL.as_millis(),
    ));
    report.line("");
    let peaks = |values: &[Option<u64>]| {
        values
            .iter()
            .map(|value| mb(*value))
            .collect::<Vec<_>>()
            .join(", ")
    };
    report.table(
        &["measure", "median (min–max)", "runs"],
        &[
            vec![
                "first sync, ms".into(),
                first_sync.summary(0),
                first_sync.len().to_string(),
            ],
            vec![
                "no-change re-walk, ms".into(),
                rewalk.summary(0),
                rewalk.len().to_string(),
            ],
            vec![
                "no-change re-walk as the daemon times it (`durationMs`), ms".into(),
                rewalk_daemon.summary(0),
                rewalk_daemon.len().to_string(),
            ],
            vec![
                "daemon peak RSS after the first sync, MB".into(),
                peaks(&peak_after_sync),
                peak_after_sync.len().to_string(),
            ],
            vec![
                "daemon peak RSS after the re-walks, MB".into(),
                peaks(&peak_after_rewalks),
                peak_after_rewalks.len().to_string(),
            ],
        ],
    );
    Ok(())
}

/// One search query of the tool-search table, and how many tools hold its word.
struct Query {
    what: &'static str,
    text: String,
    matching: usize,
}

fn search(report: &mut Report, count: usize) -> anyhow::Result<()> {
    report.line(format!("## Kinds: tool search at {count} tools"));
    report.line("");
    let (_files, daemon, started) =
        tools_daemon("kinds-search", count, SEARCH_SCHEMA_PROPERTIES, 1000)?;
    wait_for_tools(&daemon, count, Duration::from_secs(480))?;
    let synced_ms = started.elapsed().as_secs_f64() * 1000.0;
    let (definition_bytes, schema_bytes) = tool_sizes(&daemon, "tool_000001")?;
    let rare = count / 2 + 7;
    let queries = [
        Query {
            what: "rare word (one tool's description)",
            text: format!("marker{rare:06}"),
            matching: 1,
        },
        Query {
            what: "common word (every description)",
            text: "records".into(),
            matching: count,
        },
        Query {
            what: "input property description word",
            text: "latitude".into(),
            matching: count / 100,
        },
    ];
    let mut client = daemon.client()?;
    let mut rows = Vec::new();
    for query in &queries {
        let params = json!({"query": query.text, "kinds": ["tool"], "limit": 20});
        for _ in 0..WARM_UP_SEARCHES {
            client.call("catalog/search", params.clone())?;
        }
        let mut latency = Samples::default();
        let mut last = Value::Null;
        for _ in 0..SEARCHES {
            let began = Instant::now();
            last = client.call("catalog/search", params.clone())?;
            latency.push(began.elapsed().as_secs_f64() * 1000.0);
        }
        let hits = last["results"].as_array().context("search results")?;
        if hits.is_empty() {
            bail!("no hits for {:?}: {last}", query.text);
        }
        if query.matching == 1 && hits[0]["name"] != format!("tool_{rare:06}") {
            bail!("the rare word did not find its tool first: {last}");
        }
        let engine = last["engine"].as_str().unwrap_or("–").to_string();
        rows.push(vec![
            format!("{} `{}`", query.what, query.text),
            query.matching.to_string(),
            hits.len().to_string(),
            format!("{:.2}", latency.quantile(0.5)),
            format!("{:.2}", latency.quantile(0.99)),
            engine,
        ]);
    }
    report.line(format!(
        "{count} generated tools ({SEARCH_SCHEMA_PROPERTIES} described input properties, \
         {schema_bytes} bytes of `inputSchema`, {definition_bytes} bytes per definition), \
         mirrored in {:.1} s. `catalog/search {{query, kinds: [\"tool\"], limit: 20}}` over the \
         socket, one client, {WARM_UP_SEARCHES} warm-up then {SEARCHES} timed calls per query; \
         daemon peak RSS {} MB.",
        synced_ms / 1000.0,
        mb(daemon_peak_kb(&daemon)),
    ));
    report.line("");
    report.table(
        &[
            "query",
            "tools matching",
            "hits returned",
            "p50 ms",
            "p99 ms",
            "engine",
        ],
        &rows,
    );
    Ok(())
}
