//! Walk: the mirror's re-walk and first sync against the floor (a bare page loop) and against
//! the official SDKs' clients (Python `mcp`, Rust `rmcp`), all walking the same server in the
//! same run, once against our fixture and once against the fast peer (bench/fast-peer).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context as _};
use serde_json::{json, Value};

use crate::daemon::{
    fixture_args, start_daemon, start_http_server, timed_rounds, Daemon, DaemonFiles, HttpServer,
};
use crate::measure::{children_of, cpu_seconds, own_cpu_seconds, proc_status_kb};
use crate::paths::{bench_peer_binary, python_binary, release_binary, ROOT};
use crate::process::{http_server_table, poll_until, stdio_server_table};
use crate::report::{mb, ratio, Report, Samples};

#[derive(Clone, Copy, PartialEq)]
pub enum Wire {
    Http,
    Stdio,
}

impl Wire {
    pub fn label(self) -> &'static str {
        match self {
            Wire::Http => "Streamable HTTP",
            Wire::Stdio => "stdio",
        }
    }
}

/// The server every contender of one table walks.
#[derive(Clone, Copy, PartialEq)]
pub enum Peer {
    /// `mcp-fixture`: builds its whole catalog up front, about 10 µs of server time per resource.
    Fixture,
    /// `fast-peer`: rmcp, each page generated on demand.
    Fast,
}

impl Peer {
    fn binary(self) -> PathBuf {
        match self {
            Peer::Fixture => release_binary("mcp-fixture"),
            Peer::Fast => bench_peer_binary("fast-peer"),
        }
    }

    /// The server's arguments; both speak only the handshake era here, because the Python
    /// SDK's `ClientSession` and rmcp's default client start with `initialize`.
    fn args(self, size: usize, page: usize, name: &str) -> Vec<String> {
        let mut args = match self {
            Peer::Fixture => fixture_args(size, page, name),
            Peer::Fast => vec![
                "--name".into(),
                name.into(),
                "--resources".into(),
                size.to_string(),
                "--page-size".into(),
                page.to_string(),
            ],
        };
        args.extend(["--era".to_string(), "legacy".to_string()]);
        args
    }

    fn key(self) -> &'static str {
        match self {
            Peer::Fixture => "fixture",
            Peer::Fast => "fast",
        }
    }
}

/// Which walk cases to run: `--quick`, and the filters `--peer=`, `--size=`, `--page=`,
/// `--wire=` (http or stdio) and `--runs=` (re-walk rounds after the warm-up); `--first-loads=`
/// (fresh daemons timed to visible and searchable) and `--no-sdk` (no Python or rmcp client:
/// a first load's A/B of two daemon builds needs the bare loop and the mirror only).
pub struct WalkOptions {
    pub quick: bool,
    pub peer: Option<String>,
    pub size: Option<usize>,
    pub page: Option<usize>,
    pub wire: Option<String>,
    pub runs: Option<usize>,
    pub first_loads: Option<usize>,
    pub no_sdk: bool,
}

impl WalkOptions {
    pub fn from_arguments(arguments: &[String]) -> anyhow::Result<WalkOptions> {
        let value = |key: &str| {
            arguments
                .iter()
                .find_map(|argument| argument.strip_prefix(&format!("--{key}=")))
                .map(str::to_string)
        };
        let number = |key: &str| -> anyhow::Result<Option<usize>> {
            value(key)
                .map(|text| text.parse().with_context(|| format!("--{key}=N")))
                .transpose()
        };
        Ok(WalkOptions {
            quick: arguments.iter().any(|argument| argument == "--quick"),
            peer: value("peer"),
            size: number("size")?,
            page: number("page")?,
            wire: value("wire"),
            runs: number("runs")?,
            first_loads: number("first-loads")?,
            no_sdk: arguments.iter().any(|argument| argument == "--no-sdk"),
        })
    }
}

struct WalkCase {
    peer: Peer,
    size: usize,
    page: usize,
    wire: Wire,
    /// Timed rounds of each contender after one warm-up round.
    runs: usize,
    /// Fresh daemons timed from process start to the catalog visible.
    first_loads: usize,
    python: bool,
    rmcp: bool,
}

struct WalkResult {
    bare: ClientRounds,
    mirror: Samples,
    first_load: Samples,
    /// Seconds from the first load visible to the search index holding it.
    searchable_after: Samples,
    python: ClientRounds,
    rmcp: ClientRounds,
    swap_hold_ms: Samples,
    swap_total_ms: Samples,
    /// CPU seconds per re-walk of the daemon and of the server, over the timed re-walks.
    daemon_cpu_s: Option<f64>,
    server_cpu_s: Option<f64>,
    peak_rss_kb: Option<u64>,
    rest_rss_kb: Option<u64>,
}

/// The bare loop: our `Session` (the daemon's own transport code) fetching every page of
/// `resources/list` and `resources/templates/list` and dropping it. Prints one line of
/// seconds per round.
pub fn bare_walk(config: &Path, rounds: usize) -> anyhow::Result<()> {
    let config = mcp_mirror::config::load(config)
        .map_err(|error| anyhow!("{error}"))?
        .config;
    let server = config
        .servers
        .first()
        .context("the bare loop needs one server")?
        .clone();
    let runtime = tokio::runtime::Runtime::new()?;
    runtime.block_on(async move {
        let (events, _stream) = mcp_mirror::upstream::event_channel();
        let session = mcp_mirror::upstream::Session::connect(&server, events, None)
            .await
            .map_err(|error| anyhow!("connect: {error}"))?;
        for _ in 0..rounds {
            let started = Instant::now();
            let cpu_started = own_cpu_seconds();
            let mut items = 0usize;
            for (method, field) in [
                ("resources/list", "resources"),
                ("resources/templates/list", "resourceTemplates"),
            ] {
                let mut cursor: Option<String> = None;
                loop {
                    let page = session
                        .list_page(method, field, cursor.as_deref())
                        .await
                        .map_err(|error| anyhow!("{method}: {error}"))?;
                    // Each item becomes a `Value`, as a client that reads its pages would do.
                    for item in &page.items {
                        let _: serde_json::Value = serde_json::from_str(item.get())
                            .map_err(|error| anyhow!("{method}: an item is not JSON: {error}"))?;
                        items += 1;
                    }
                    match page.next_cursor {
                        Some(next) => cursor = Some(next),
                        None => break,
                    }
                }
            }
            println!(
                "{}",
                json!({
                    "seconds": started.elapsed().as_secs_f64(),
                    "cpu_seconds": own_cpu_seconds() - cpu_started,
                    "items": items,
                })
            );
        }
        session.close().await;
        Ok(())
    })
}

/// What a client process reported for its timed rounds (its warm-up round dropped).
struct ClientRounds {
    seconds: Samples,
    /// The client's own CPU seconds per round, when it reports them.
    cpu_seconds: Samples,
}

fn client_rounds(command: &mut Command, limit: Duration) -> anyhow::Result<ClientRounds> {
    let rounds = timed_rounds(command, limit)?;
    let field = |key: &str| {
        Samples(
            rounds
                .iter()
                .skip(1)
                .filter_map(|round| round[key].as_f64())
                .collect(),
        )
    };
    Ok(ClientRounds {
        seconds: field("seconds"),
        cpu_seconds: field("cpu_seconds"),
    })
}

/// A client command walking the case's server: over HTTP at `url`, or spawning the server.
fn client_command(
    mut command: Command,
    http: Option<&HttpServer>,
    rounds: usize,
    peer: Peer,
    args: &[String],
) -> Command {
    match http {
        Some(server) => command.args(["http", &server.url, &rounds.to_string()]),
        None => command
            .args(["stdio", &rounds.to_string()])
            .arg(peer.binary())
            .args(args),
    };
    command
}

/// The daemon's `min_walk_interval` in these runs; refreshes are spaced past it.
const MIN_WALK_INTERVAL_S: f64 = 0.5;

fn run_walk_case(case: &WalkCase, bench: &Path) -> anyhow::Result<WalkResult> {
    let name = format!("w{}", case.size);
    let work = format!(
        "walk-{}-{}-{}-{}",
        case.peer.key(),
        case.size,
        case.page,
        match case.wire {
            Wire::Http => "http",
            Wire::Stdio => "stdio",
        }
    );
    let files = DaemonFiles::fresh(&work)?;
    let args = case.peer.args(case.size, case.page, &name);
    let http = match case.wire {
        Wire::Http => Some(start_http_server(
            &case.peer.binary(),
            &args,
            &files.path("server.log"),
        )?),
        Wire::Stdio => None,
    };
    let server_table = match &http {
        Some(server) => http_server_table(&name, &server.url),
        None => stdio_server_table(&name, &case.peer.binary(), &args),
    };
    let rounds = case.runs + 1;
    let limit = Duration::from_secs(1800);

    // 1. The mirror's first sync: fresh daemons, each timed from process start to the
    //    snapshot visible on the socket, then to the search index holding it.
    let mut first_load = Samples::default();
    let mut searchable_after = Samples::default();
    let mut daemon = None;
    let mut daemon_files = None;
    for _ in 0..case.first_loads.max(1) {
        drop(daemon.take());
        let files = DaemonFiles::fresh(&format!("{work}-daemon"))?;
        let config = files.config(
            &format!(
                "min_walk_interval = \"{}ms\"\n",
                (MIN_WALK_INTERVAL_S * 1000.0) as u64
            ),
            &server_table,
        )?;
        let started = Instant::now();
        let started_daemon = start_daemon(&files, &config)?;
        started_daemon.wait_for_walks(1, limit)?;
        let visible = Instant::now();
        first_load.push(started.elapsed().as_secs_f64());
        let mut client = started_daemon.client()?;
        poll_until(
            "the search index holds the first load",
            limit,
            Duration::from_millis(20),
            || {
                let status = client.call("catalog/status", json!({}))?;
                Ok(crate::query::index_caught_up(&status, case.size as u64).then_some(()))
            },
        )?;
        searchable_after.push(visible.elapsed().as_secs_f64());
        daemon = Some(started_daemon);
        daemon_files = Some(files);
    }
    let daemon = daemon.context("no daemon started")?;
    // The steady state: the derived search index and the FTS5 backlog of the first load
    // are brought up to date after its commit; re-walks are timed once they are.
    let files = daemon_files.context("no daemon started")?;
    wait_for_derived_state(&daemon, &files.path("catalog.db"), case.size as u64, limit)?;
    // 2. The bare loop, in its own process so the harness's memory and threads stay out of it,
    //    and the SDK clients: while the daemon is connected and idle, the condition its own
    //    walks meet (the rmcp peer serves every client 2-2.5x slower while another session,
    //    such as the daemon's listening stream, is open).
    let bare_config = files.path("bare.toml");
    std::fs::write(
        &bare_config,
        format!("[daemon]\nrequest_timeout = \"120s\"\n\n{server_table}"),
    )?;
    let mut bare_command = Command::new(bench);
    bare_command
        .arg("bare-walk")
        .arg(&bare_config)
        .arg(rounds.to_string());
    let bare = client_rounds(&mut bare_command, limit)?;

    let none = || ClientRounds {
        seconds: Samples::default(),
        cpu_seconds: Samples::default(),
    };
    let mut python = none();
    if case.python {
        let mut command = Command::new(python_binary());
        command.arg(Path::new(ROOT).join("bench/python_walk.py"));
        python = client_rounds(
            &mut client_command(command, http.as_ref(), rounds, case.peer, &args),
            limit,
        )?;
    }
    let mut rmcp = none();
    if case.rmcp {
        let command = Command::new(bench_peer_binary("rmcp-walk"));
        rmcp = client_rounds(
            &mut client_command(command, http.as_ref(), rounds, case.peer, &args),
            limit,
        )?;
    }

    // 3. Re-walks of the last daemon with `catalog/refresh {wait: true}`, each spaced past the
    //    walk pace (`max(min_walk_interval, the last walk's duration)` after the last walk):
    //    timed back to back, a refresh would include that hold, which is not the walk's cost.
    //    The daemon's `walksThrottled` must not move while they run.
    let throttled_before = daemon.server_status(&name)?["walksThrottled"].as_u64();
    let daemon_pid = daemon.process.pid();
    let server_pid = match &http {
        Some(server) => Some(server.process.pid()),
        None => children_of(daemon_pid).first().copied(),
    };
    let mut mirror = Samples::default();
    let mut client = daemon.client()?;
    let mut cpu_before = (None, None);
    for round in 0..rounds {
        if round == 1 {
            cpu_before = (cpu_seconds(daemon_pid), server_pid.and_then(cpu_seconds));
        }
        let started = Instant::now();
        let outcome = client.call("catalog/refresh", json!({"server": name, "wait": true}))?;
        let seconds = started.elapsed().as_secs_f64();
        if outcome["servers"][&name]["ok"] != Value::Bool(true) {
            bail!("refresh failed: {outcome}");
        }
        if round > 0 {
            mirror.push(seconds);
        }
        std::thread::sleep(Duration::from_secs_f64(
            seconds.max(MIN_WALK_INTERVAL_S) * 1.1 + 0.2,
        ));
    }
    let throttled_after = daemon.server_status(&name)?["walksThrottled"].as_u64();
    if throttled_after != throttled_before {
        bail!(
            "a timed re-walk was held by the walk pace: walksThrottled \
             {throttled_before:?} -> {throttled_after:?}"
        );
    }
    let per_walk = |before: Option<f64>, after: Option<f64>| {
        Some((after? - before?) / case.runs.max(1) as f64)
    };
    let daemon_cpu_s = per_walk(cpu_before.0, cpu_seconds(daemon_pid));
    let server_cpu_s = per_walk(cpu_before.1, server_pid.and_then(cpu_seconds));
    let peak_rss_kb = proc_status_kb(daemon_pid, "VmHWM");
    std::thread::sleep(Duration::from_secs(2));
    let rest_rss_kb = proc_status_kb(daemon_pid, "VmRSS");
    let swaps = daemon.swaps();
    let status = daemon.server_status(&name)?;
    if status["resources"].as_u64() != Some(case.size as u64) {
        bail!(
            "the mirror holds {} resources, not {}",
            status["resources"],
            case.size
        );
    }
    // The first swap is the first load; the others are the no-change re-walks.
    let swap_hold_ms = Samples(swaps.iter().skip(2).map(|swap| swap.hold_ms).collect());
    let swap_total_ms = Samples(swaps.iter().skip(2).map(|swap| swap.total_ms).collect());
    drop(daemon);
    drop(http);
    Ok(WalkResult {
        bare,
        mirror,
        first_load,
        searchable_after,
        python,
        rmcp,
        swap_hold_ms,
        swap_total_ms,
        daemon_cpu_s,
        server_cpu_s,
        peak_rss_kb,
        rest_rss_kb,
    })
}

/// The cases of one peer's table before the filters.
/// Waits until the search index reflects the newest change and holds `resources` entries,
/// and the FTS5 backlog of a large first load is indexed.
fn wait_for_derived_state(
    daemon: &Daemon,
    database: &Path,
    resources: u64,
    limit: Duration,
) -> anyhow::Result<()> {
    let mut client = daemon.client()?;
    let uri = format!("file:{}?mode=ro", database.display());
    let flags = rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_URI;
    let sqlite = rusqlite::Connection::open_with_flags(uri, flags)?;
    poll_until(
        "the search index and FTS5 caught up",
        limit,
        Duration::from_millis(50),
        || {
            let status = client.call("catalog/status", json!({}))?;
            let backlog: i64 =
                sqlite.query_row("SELECT count(*) FROM full_text_backlog", [], |row| {
                    row.get(0)
                })?;
            Ok((crate::query::index_caught_up(&status, resources) && backlog == 0).then_some(()))
        },
    )
}

fn cases_for(peer: Peer, quick: bool) -> Vec<WalkCase> {
    let mut cases = Vec::new();
    let sizes: &[usize] = match (peer, quick) {
        (_, true) => &[10_000],
        (Peer::Fixture, false) => &[10_000, 100_000],
        (Peer::Fast, false) => &[100_000],
    };
    for &size in sizes {
        for page in [100, 1000] {
            for wire in [Wire::Http, Wire::Stdio] {
                cases.push(WalkCase {
                    peer,
                    size,
                    page,
                    wire,
                    runs: 5,
                    first_loads: 3,
                    python: true,
                    rmcp: true,
                });
            }
        }
    }
    if !quick {
        let million: &[(usize, Wire)] = match peer {
            Peer::Fixture => &[(1000, Wire::Http), (1000, Wire::Stdio), (100, Wire::Http)],
            Peer::Fast => &[
                (1000, Wire::Http),
                (1000, Wire::Stdio),
                (100, Wire::Http),
                (100, Wire::Stdio),
            ],
        };
        for &(page, wire) in million {
            cases.push(WalkCase {
                peer,
                size: 1_000_000,
                page,
                wire,
                runs: 3,
                first_loads: 1,
                // A page-100 walk of 1,000,000 takes the Python SDK minutes per round.
                python: page == 1000,
                rmcp: true,
            });
        }
    }
    cases
}

pub fn run(report: &mut Report, bench: &Path, options: &WalkOptions) -> anyhow::Result<()> {
    let peers: Vec<Peer> = match options.peer.as_deref() {
        None => vec![Peer::Fixture, Peer::Fast],
        Some("fixture") => vec![Peer::Fixture],
        Some("fast") => vec![Peer::Fast],
        Some(other) => bail!("unknown --peer={other}; choose fixture or fast"),
    };
    let wire = match options.wire.as_deref() {
        None => None,
        Some("http") => Some(Wire::Http),
        Some("stdio") => Some(Wire::Stdio),
        Some(other) => bail!("unknown --wire={other}; choose http or stdio"),
    };
    for peer in peers {
        let mut cases = cases_for(peer, options.quick);
        if let Some(size) = options.size {
            cases.retain(|case| case.size == size);
            if cases.is_empty() {
                for page in [100, 1000] {
                    for wire in [Wire::Http, Wire::Stdio] {
                        cases.push(WalkCase {
                            peer,
                            size,
                            page,
                            wire,
                            runs: 3,
                            first_loads: 1,
                            python: size <= 1_000_000 && page == 1000,
                            rmcp: true,
                        });
                    }
                }
            }
        }
        if let Some(page) = options.page {
            cases.retain(|case| case.page == page);
        }
        if let Some(wire) = wire {
            cases.retain(|case| case.wire == wire);
        }
        for case in &mut cases {
            if let Some(runs) = options.runs {
                case.runs = runs.max(1);
            }
            if let Some(first_loads) = options.first_loads {
                case.first_loads = first_loads.max(1);
            }
            if options.no_sdk {
                case.python = false;
                case.rmcp = false;
            }
        }
        if cases.is_empty() {
            continue;
        }
        run_table(report, bench, peer, &cases)?;
    }
    Ok(())
}

fn run_table(
    report: &mut Report,
    bench: &Path,
    peer: Peer,
    cases: &[WalkCase],
) -> anyhow::Result<()> {
    match peer {
        Peer::Fixture => {
            report.line("## Walk: mirror vs bare loop vs the SDK clients (the fixture)");
            report.line("");
            report.line(
                "The server is `mcp-fixture`, which builds its whole catalog up front and \
                 costs about 10 µs of server time per resource.",
            );
        }
        Peer::Fast => {
            report.line("## Walk against the fast peer (an rmcp server)");
            report.line("");
            report.line(
                "The server is `bench/fast-peer`, written on the official Rust SDK (`rmcp` \
                 3.11, server features only), generating every page on demand from its offset \
                 (resources with every optional field filled, as the fixture's), so its cost \
                 per page is small and constant. Handshake era (2025-11-25) for every \
                 contender.",
            );
        }
    }
    report.line("");
    report.line(
        "Seconds per complete walk of `resources/list` (plus `resources/templates/list` for \
         bare and mirror), median (min–max) after one warm-up round. *bare* = our transport \
         fetching and dropping every page; *mirror* = `catalog/refresh {wait:true}` on the \
         running daemon (walk, staging, diff, swap, visible on the socket; the catalog is \
         unchanged, so this is the steady-state re-walk), each spaced past the walk pace so \
         no hold is timed (the run fails if `walksThrottled` moves); bare and the SDK clients \
         run while the daemon is connected and idle, as the mirror's own walks do (the rmcp \
         peer serves every client 2-2.5x slower while another session is open); *index s \
         after visible* = from the first sync visible to the search index holding it; *first sync* = fresh daemon process \
         start to the whole catalog visible on the socket (walk + insert; the search indexes follow); \
         *python* = `mcp` 2.3.0 `ClientSession.list_resources` cursor loop; *rmcp* = `rmcp` \
         3.11 `Peer::list_resources` cursor loop (bench/rmcp-walk); for both SDKs the \
         handshake and process start are excluded. *CPU s/100k* is CPU time (user + system) \
         per walk scaled to 100,000 resources: the daemon's over its re-walks, each client \
         process's own over its rounds (median), and the server's over the mirror's \
         re-walks. \
         Peak RSS is the daemon's VmHWM over the first sync and every re-walk; rest is VmRSS \
         2 s after the last walk. *swap / lock* is the median re-walk swap (computing the diff \
         and applying it) and, within it, the write lock's hold time.",
    );
    report.line("");
    let mut rows = Vec::new();
    for case in cases {
        eprintln!(
            "walk ({}): {} resources, page {}, {}",
            peer.key(),
            case.size,
            case.page,
            case.wire.label()
        );
        let result = run_walk_case(case, bench)?;
        let per_100k = |seconds: Option<f64>| match seconds {
            Some(seconds) if seconds.is_finite() => {
                format!("{:.2}", seconds * 100_000.0 / case.size as f64)
            }
            _ => "–".into(),
        };
        let client_cpu = |rounds: &ClientRounds| per_100k(Some(rounds.cpu_seconds.median()));
        rows.push(vec![
            format!("{}", case.size),
            format!("{}", case.page),
            case.wire.label().into(),
            result.bare.seconds.summary(3),
            result.mirror.summary(3),
            ratio(result.mirror.median(), result.bare.seconds.median()),
            result.first_load.summary(3),
            ratio(result.first_load.median(), result.bare.seconds.median()),
            result.searchable_after.summary(2),
            result.python.seconds.summary(3),
            ratio(result.python.seconds.median(), result.mirror.median()),
            result.rmcp.seconds.summary(3),
            ratio(result.rmcp.seconds.median(), result.mirror.median()),
            format!(
                "{} / {} / {} / {}",
                per_100k(result.daemon_cpu_s),
                client_cpu(&result.bare),
                client_cpu(&result.python),
                client_cpu(&result.rmcp),
            ),
            per_100k(result.server_cpu_s),
            format!(
                "{:.1} / {:.1}",
                result.swap_total_ms.median(),
                result.swap_hold_ms.median()
            ),
            mb(result.peak_rss_kb),
            mb(result.rest_rss_kb),
        ]);
    }
    report.table(
        &[
            "resources",
            "page",
            "transport",
            "bare s",
            "mirror s",
            "mirror/bare",
            "first sync s",
            "first/bare",
            "index s after visible",
            "python s",
            "python/mirror",
            "rmcp s",
            "rmcp/mirror",
            "client CPU s/100k: mirror / bare / python / rmcp",
            "server CPU s/100k",
            "swap / lock ms",
            "peak RSS MB",
            "rest RSS MB",
        ],
        &rows,
    );
    if cases
        .iter()
        .any(|case| case.size >= 1_000_000 && !case.python && case.rmcp)
    {
        report.line(
            "At 1,000,000 resources the Python SDK runs at page size 1,000 only (a page-100 \
             walk takes it minutes per round); the other contenders run every listed \
             combination.",
        );
        report.line("");
    }
    Ok(())
}
