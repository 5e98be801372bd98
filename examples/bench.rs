//! The benchmark harness (issue 6): runs the real daemon and the real fixture server through
//! each scenario of DESIGN.md's performance budgets and prints Markdown tables.
//!
//! Run it with `bench/run [SCENARIO...]` (it builds the release binaries and the Python SDK
//! venv first); scenarios are `walk`, `swap`, `change`, `query`, `start`, `idle`, or `all`.
//! `bench bare-walk CONFIG ROUNDS` is the bare loop: our own transport (`mcp::Session`) fetching
//! every page and discarding it, the floor a mirror is compared with. Nothing here is part of
//! the daemon or of `cargo test`.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{anyhow, bail, Context as _};
use serde_json::{json, Value};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

fn release_binary(name: &str) -> PathBuf {
    Path::new(ROOT).join("target/release").join(name)
}

fn work_dir() -> PathBuf {
    Path::new(ROOT).join("target/bench-work")
}

fn python_binary() -> PathBuf {
    Path::new(ROOT).join("target/bench-venv/bin/python")
}

// ---------------------------------------------------------------------------------------------
// Statistics and tables
// ---------------------------------------------------------------------------------------------

/// A set of samples in one unit.
#[derive(Clone, Default)]
struct Samples(Vec<f64>);

impl Samples {
    fn push(&mut self, value: f64) {
        self.0.push(value);
    }
    fn sorted(&self) -> Vec<f64> {
        let mut values = self.0.clone();
        values.sort_by(|a, b| a.total_cmp(b));
        values
    }
    /// The nearest-rank percentile `q` (0..=1).
    fn quantile(&self, q: f64) -> f64 {
        let values = self.sorted();
        if values.is_empty() {
            return f64::NAN;
        }
        let rank = ((q * values.len() as f64).ceil() as usize).clamp(1, values.len());
        values[rank - 1]
    }
    fn median(&self) -> f64 {
        let values = self.sorted();
        match values.len() {
            0 => f64::NAN,
            n if n % 2 == 1 => values[n / 2],
            n => (values[n / 2 - 1] + values[n / 2]) / 2.0,
        }
    }
    fn min(&self) -> f64 {
        self.sorted().first().copied().unwrap_or(f64::NAN)
    }
    fn max(&self) -> f64 {
        self.sorted().last().copied().unwrap_or(f64::NAN)
    }
    fn len(&self) -> usize {
        self.0.len()
    }
    /// "median (min–max)".
    fn summary(&self, digits: usize) -> String {
        if self.0.is_empty() {
            return "–".into();
        }
        format!(
            "{:.*} ({:.*}–{:.*})",
            digits,
            self.median(),
            digits,
            self.min(),
            digits,
            self.max()
        )
    }
}

/// Collects the report: every table is printed as soon as it is complete and kept for the file.
struct Report {
    text: String,
}

impl Report {
    fn line(&mut self, line: impl AsRef<str>) {
        println!("{}", line.as_ref());
        self.text.push_str(line.as_ref());
        self.text.push('\n');
    }
    fn table(&mut self, header: &[&str], rows: &[Vec<String>]) {
        self.line(format!("| {} |", header.join(" | ")));
        self.line(format!(
            "|{}|",
            header.iter().map(|_| "---").collect::<Vec<_>>().join("|")
        ));
        for row in rows {
            self.line(format!("| {} |", row.join(" | ")));
        }
        self.line("");
    }
}

// ---------------------------------------------------------------------------------------------
// Processes: the fixture, the daemon, and what /proc says about them
// ---------------------------------------------------------------------------------------------

/// A child process stopped with SIGTERM (then SIGKILL) when dropped.
struct Process {
    child: Child,
}

impl Process {
    fn pid(&self) -> u32 {
        self.child.id()
    }
    fn stop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            // SAFETY: kill(2) on our own child's pid.
            unsafe {
                libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM);
            }
            let deadline = Instant::now() + Duration::from_secs(30);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = self.child.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A fixture serving Streamable HTTP on a loopback port.
struct HttpFixture {
    /// Held so the fixture stops when this is dropped.
    _process: Process,
    url: String,
}

fn start_http_fixture(args: &[String], log: &Path) -> anyhow::Result<HttpFixture> {
    let mut child = Command::new(release_binary("mcp-fixture"))
        .args(args)
        .args(["--http", "127.0.0.1:0"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(log)?)
        .spawn()
        .context("while starting mcp-fixture")?;
    let stdout = child.stdout.take().context("fixture stdout")?;
    let mut lines = BufReader::new(stdout).lines();
    let first = lines
        .next()
        .context("the fixture printed nothing")?
        .context("reading the fixture's stdout")?;
    // Keep draining stdout so the fixture never blocks on a full pipe.
    std::thread::spawn(move || for _ in lines.by_ref() {});
    let url = first
        .strip_prefix("listening on ")
        .with_context(|| format!("unexpected fixture output: {first}"))?
        .trim()
        .to_string();
    Ok(HttpFixture {
        _process: Process { child },
        url,
    })
}

/// Where one daemon keeps its files.
struct DaemonFiles {
    dir: PathBuf,
}

impl DaemonFiles {
    fn fresh(name: &str) -> anyhow::Result<DaemonFiles> {
        let dir = work_dir().join(name);
        if dir.exists() {
            std::fs::remove_dir_all(&dir)?;
        }
        std::fs::create_dir_all(&dir)?;
        Ok(DaemonFiles { dir })
    }
    fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }
    fn socket(&self) -> PathBuf {
        self.path("mirror.sock")
    }
    fn log(&self) -> PathBuf {
        self.path("daemon.log")
    }
    /// Writes daemon.toml with generous walk caps, no polling and no backstop re-walks, so
    /// nothing but the benchmark starts a walk.
    fn config(&self, extra_daemon: &str, servers: &str) -> anyhow::Result<PathBuf> {
        let text = format!(
            "[daemon]\ndatabase = \"{}\"\nsocket = \"{}\"\nrequest_timeout = \"120s\"\n\
             max_pages = 1000000\nmax_items = 10000000\npoll_interval = \"24h\"\n\
             resync_interval = \"24h\"\n{extra_daemon}\n\n{servers}",
            self.path("catalog.db").display(),
            self.socket().display(),
        );
        let path = self.path("daemon.toml");
        std::fs::write(&path, text)?;
        Ok(path)
    }
}

fn stdio_server_table(name: &str, args: &[String]) -> String {
    let args: Vec<String> = args.iter().map(|arg| format!("{arg:?}")).collect();
    format!(
        "[servers.{name}]\ncommand = {:?}\nargs = [{}]\n\n",
        release_binary("mcp-fixture").display().to_string(),
        args.join(", ")
    )
}

fn http_server_table(name: &str, url: &str) -> String {
    format!("[servers.{name}]\nurl = {url:?}\n\n")
}

struct Daemon {
    process: Process,
    socket: PathBuf,
    log: PathBuf,
}

/// Starts target/release/mcp-mirror and waits until its socket accepts connections.
fn start_daemon(files: &DaemonFiles, config: &Path) -> anyhow::Result<Daemon> {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(files.log())?;
    let child = Command::new(release_binary("mcp-mirror"))
        .args(["serve", "--config"])
        .arg(config)
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .context("while starting mcp-mirror")?;
    let mut daemon = Daemon {
        process: Process { child },
        socket: files.socket(),
        log: files.log(),
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Ok(Some(status)) = daemon.process.child.try_wait() {
            bail!(
                "the daemon exited with {status}: {}",
                std::fs::read_to_string(&daemon.log).unwrap_or_default()
            );
        }
        if UnixStream::connect(&daemon.socket).is_ok() {
            return Ok(daemon);
        }
        if Instant::now() > deadline {
            bail!("the daemon's socket did not appear within 60s");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

impl Daemon {
    fn client(&self) -> anyhow::Result<SocketClient> {
        SocketClient::connect(&self.socket)
    }
    fn call(&self, method: &str, params: Value) -> anyhow::Result<Value> {
        self.client()?.call(method, params)
    }
    fn server_status(&self, server: &str) -> anyhow::Result<Value> {
        let status = self.call("catalog/status", json!({}))?;
        status["servers"]
            .as_array()
            .and_then(|servers| servers.iter().find(|entry| entry["name"] == server))
            .cloned()
            .ok_or_else(|| anyhow!("no server {server} in the status"))
    }
    /// Waits until every server has at least `walks` complete walks.
    fn wait_for_walks(&self, walks: u64, limit: Duration) -> anyhow::Result<()> {
        let deadline = Instant::now() + limit;
        let mut client = self.client()?;
        loop {
            let status = client.call("catalog/status", json!({}))?;
            let servers = status["servers"].as_array().cloned().unwrap_or_default();
            if !servers.is_empty()
                && servers
                    .iter()
                    .all(|server| server["walks_ok"].as_u64().unwrap_or(0) >= walks)
            {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!("walks did not finish within {limit:?}: {status}");
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
    /// Every "snapshot swapped" log line.
    fn swaps(&self) -> Vec<Swap> {
        self.log_text()
            .lines()
            .filter(|line| line.contains("snapshot swapped"))
            .filter_map(|line| {
                let at = parse_timestamp_us(line.split_whitespace().next()?)?;
                let hold: f64 = log_field(line, "hold_ms")?.trim_matches('"').parse().ok()?;
                let total: f64 = log_field(line, "swap_ms")
                    .and_then(|value| value.trim_matches('"').parse().ok())
                    .unwrap_or(hold);
                let changed: u64 = log_field(line, "changed")?.parse().ok()?;
                Some(Swap {
                    committed_at_us: at,
                    hold_ms: hold,
                    total_ms: total,
                    changed,
                })
            })
            .collect()
    }
}

/// One swap as the writer logged it.
#[derive(Clone, Copy)]
struct Swap {
    committed_at_us: i64,
    /// The write lock's hold time.
    hold_ms: f64,
    /// Computing the diff and applying it.
    total_ms: f64,
    changed: u64,
}

fn log_field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    let start = line.find(&format!(" {key}="))? + key.len() + 2;
    line[start..].split_whitespace().next()
}

/// Parses tracing's `2026-01-02T03:04:05.678901Z` into µs since the epoch.
fn parse_timestamp_us(text: &str) -> Option<i64> {
    let text = text.strip_suffix('Z')?;
    let (date, time) = text.split_once('T')?;
    let mut date_parts = date.split('-').map(|part| part.parse::<i64>());
    let (year, month, day) = (
        date_parts.next()?.ok()?,
        date_parts.next()?.ok()?,
        date_parts.next()?.ok()?,
    );
    let (clock, fraction) = time.split_once('.').unwrap_or((time, "0"));
    let mut clock_parts = clock.split(':').map(|part| part.parse::<i64>());
    let (hour, minute, second) = (
        clock_parts.next()?.ok()?,
        clock_parts.next()?.ok()?,
        clock_parts.next()?.ok()?,
    );
    let micros: i64 = format!("{:0<6}", &fraction[..fraction.len().min(6)])
        .parse()
        .ok()?;
    // Days from the civil date (Howard Hinnant's algorithm).
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400;
    let day_of_year = (153 * (month + if month > 2 { -3 } else { 9 }) + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    let days = era * 146_097 + day_of_era - 719_468;
    Some(((days * 86_400 + hour * 3600 + minute * 60 + second) * 1_000_000) + micros)
}

fn now_us() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|elapsed| elapsed.as_micros() as i64)
        .unwrap_or(0)
}

/// A value in kB from /proc/PID/status (`VmRSS`, `VmHWM`).
fn proc_status_kb(pid: u32, key: &str) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    text.lines()
        .find_map(|line| line.strip_prefix(&format!("{key}:")))
        .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
}

/// utime + stime of a process, in clock ticks.
fn cpu_ticks(pid: u32) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces; fields count from after its closing parenthesis.
    let rest = &text[text.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    Some(fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?)
}

fn clock_ticks_per_second() -> f64 {
    // SAFETY: sysconf has no preconditions.
    unsafe { libc::sysconf(libc::_SC_CLK_TCK) as f64 }
}

fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|entries| entries.count())
        .unwrap_or(0)
}

fn mb(kb: Option<u64>) -> String {
    kb.map(|kb| format!("{:.1}", kb as f64 / 1024.0))
        .unwrap_or_else(|| "?".into())
}

// ---------------------------------------------------------------------------------------------
// The socket client
// ---------------------------------------------------------------------------------------------

struct SocketClient {
    reader: BufReader<UnixStream>,
    writer: UnixStream,
    next_id: u64,
    line: String,
}

impl SocketClient {
    fn connect(path: &Path) -> anyhow::Result<SocketClient> {
        let stream = UnixStream::connect(path)
            .with_context(|| format!("while connecting to {}", path.display()))?;
        stream.set_read_timeout(Some(Duration::from_secs(600)))?;
        Ok(SocketClient {
            writer: stream.try_clone()?,
            reader: BufReader::new(stream),
            next_id: 0,
            line: String::new(),
        })
    }

    fn call(&mut self, method: &str, params: Value) -> anyhow::Result<Value> {
        self.next_id += 1;
        let request =
            json!({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params});
        let mut bytes = serde_json::to_vec(&request)?;
        bytes.push(b'\n');
        self.writer.write_all(&bytes)?;
        self.line.clear();
        if self.reader.read_line(&mut self.line)? == 0 {
            bail!("the daemon closed the connection");
        }
        let mut response: Value = serde_json::from_str(&self.line)?;
        match response.get_mut("result") {
            Some(result) => Ok(result.take()),
            None => bail!("{method} failed: {response}"),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Contenders of the walk scenario
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Copy, PartialEq)]
enum Wire {
    Http,
    Stdio,
}

impl Wire {
    fn label(self) -> &'static str {
        match self {
            Wire::Http => "Streamable HTTP",
            Wire::Stdio => "stdio",
        }
    }
}

/// The bare loop: our `Session` (the daemon's own transport code) fetching every page of
/// `resources/list` and `resources/templates/list` and dropping it. Prints one line of
/// seconds per round.
fn bare_walk(config: &Path, rounds: usize) -> anyhow::Result<()> {
    let config = mcp_mirror::config::load(config).map_err(|error| anyhow!("{error}"))?;
    let server = config
        .servers
        .first()
        .context("the bare loop needs one server")?
        .clone();
    let runtime = tokio::runtime::Runtime::new()?;
    runtime.block_on(async move {
        let (events, _stream) = mcp_mirror::mcp::event_channel();
        let session = mcp_mirror::mcp::Session::connect(&server, events, None)
            .await
            .map_err(|error| anyhow!("connect: {error}"))?;
        for _ in 0..rounds {
            let started = Instant::now();
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
                    items += page.items.len();
                    match page.next_cursor {
                        Some(next) => cursor = Some(next),
                        None => break,
                    }
                }
            }
            println!(
                "{}",
                json!({"seconds": started.elapsed().as_secs_f64(), "items": items})
            );
        }
        session.close().await;
        Ok(())
    })
}

/// Runs a child that prints one JSON line per round with `seconds`; returns the rounds.
fn timed_rounds(command: &mut Command, limit: Duration) -> anyhow::Result<Vec<f64>> {
    let started = Instant::now();
    let output = command
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .stdout(Stdio::piped())
        .output()?;
    if !output.status.success() {
        bail!(
            "{:?} failed: {}",
            command,
            String::from_utf8_lossy(&output.stderr)
        );
    }
    if started.elapsed() > limit {
        eprintln!("warning: {command:?} took {:?}", started.elapsed());
    }
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .map(|value| value["seconds"].as_f64().context("seconds"))
        .collect()
}

struct WalkCase {
    size: usize,
    page: usize,
    wire: Wire,
    runs: usize,
    python: bool,
}

struct WalkResult {
    bare: Samples,
    mirror: Samples,
    first_load: Samples,
    python: Samples,
    swap_hold_ms: Samples,
    swap_total_ms: Samples,
    peak_rss_kb: Option<u64>,
    rest_rss_kb: Option<u64>,
}

fn fixture_args(size: usize, page: usize, name: &str) -> Vec<String> {
    vec![
        "--name".into(),
        name.into(),
        "--generate".into(),
        size.to_string(),
        "--page-size".into(),
        page.to_string(),
    ]
}

fn run_walk_case(case: &WalkCase, bench: &Path) -> anyhow::Result<WalkResult> {
    let name = format!("w{}", case.size);
    let files = DaemonFiles::fresh(&format!("walk-{}-{}", case.size, case.page))?;
    // The handshake era for all three: the Python SDK's ClientSession speaks it.
    let mut args = fixture_args(case.size, case.page, &name);
    args.extend(["--era".to_string(), "legacy".to_string()]);
    let http = match case.wire {
        Wire::Http => Some(start_http_fixture(&args, &files.path("fixture.log"))?),
        Wire::Stdio => None,
    };
    let server_table = match &http {
        Some(fixture) => http_server_table(&name, &fixture.url),
        None => stdio_server_table(&name, &args),
    };
    let rounds = case.runs + 1;
    let limit = Duration::from_secs(1800);

    // 1. The bare loop, in its own process so the harness's memory and threads stay out of it.
    let bare_config = files.path("bare.toml");
    std::fs::write(
        &bare_config,
        format!("[daemon]\nrequest_timeout = \"120s\"\n\n{server_table}"),
    )?;
    let bare_rounds = timed_rounds(
        Command::new(bench)
            .arg("bare-walk")
            .arg(&bare_config)
            .arg(rounds.to_string()),
        limit,
    )?;
    let bare = Samples(bare_rounds.into_iter().skip(1).collect());

    // 2. The Python SDK, when this case includes it.
    let mut python = Samples::default();
    if case.python {
        let mut command = Command::new(python_binary());
        command.arg(Path::new(ROOT).join("bench/python_walk.py"));
        match &http {
            Some(fixture) => command.args(["http", &fixture.url, &rounds.to_string()]),
            None => command
                .args(["stdio", &rounds.to_string()])
                .arg(release_binary("mcp-fixture"))
                .args(&args),
        };
        python = Samples(
            timed_rounds(&mut command, limit)?
                .into_iter()
                .skip(1)
                .collect(),
        );
    }

    // 3. The mirror: a fresh daemon's first load (process start to the snapshot visible on the
    //    socket), then re-walks with `catalog/refresh {wait: true}`.
    let config = files.config("", &server_table)?;
    let started = Instant::now();
    let daemon = start_daemon(&files, &config)?;
    daemon.wait_for_walks(1, limit)?;
    let mut first_load = Samples::default();
    first_load.push(started.elapsed().as_secs_f64());
    let mut mirror = Samples::default();
    let mut client = daemon.client()?;
    for round in 0..rounds {
        let started = Instant::now();
        let outcome = client.call("catalog/refresh", json!({"server": name, "wait": true}))?;
        let seconds = started.elapsed().as_secs_f64();
        if outcome["servers"][&name]["ok"] != Value::Bool(true) {
            bail!("refresh failed: {outcome}");
        }
        if round > 0 {
            mirror.push(seconds);
        }
    }
    let peak_rss_kb = proc_status_kb(daemon.process.pid(), "VmHWM");
    std::thread::sleep(Duration::from_secs(2));
    let rest_rss_kb = proc_status_kb(daemon.process.pid(), "VmRSS");
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
        python,
        swap_hold_ms,
        swap_total_ms,
        peak_rss_kb,
        rest_rss_kb,
    })
}

fn ratio(a: f64, b: f64) -> String {
    if a.is_finite() && b.is_finite() && b > 0.0 {
        format!("{:.2}", a / b)
    } else {
        "–".into()
    }
}

fn scenario_walk(report: &mut Report, bench: &Path, quick: bool) -> anyhow::Result<()> {
    report.line("## Walk: mirror vs bare loop vs Python SDK");
    report.line("");
    report.line(
        "Seconds per complete walk of `resources/list` (plus `resources/templates/list`), median (min–max) \
         after one warm-up round. *bare* = our transport fetching and dropping every page; *mirror* = \
         `catalog/refresh {wait:true}` on the running daemon (walk, staging, diff, swap, visible on the \
         socket; the catalog is unchanged, so this is the steady-state re-walk); *first load* = fresh \
         daemon process start to the whole catalog visible on the socket (walk + insert + full-text \
         index), one sample; *python* = `mcp` 2.3.0 `ClientSession.list_resources` cursor loop, \
         handshake and interpreter start excluded. Peak RSS is the daemon's VmHWM over the first \
         load and every re-walk; rest is VmRSS 2 s after the last walk. *swap / lock* is the \
         median re-walk swap (computing the diff and applying it) and, within it, the write \
         lock's hold time.",
    );
    report.line("");
    let mut cases = Vec::new();
    let sizes: &[usize] = if quick { &[10_000] } else { &[10_000, 100_000] };
    for &size in sizes {
        for page in [100, 1000] {
            for wire in [Wire::Http, Wire::Stdio] {
                cases.push(WalkCase {
                    size,
                    page,
                    wire,
                    runs: 5,
                    python: true,
                });
            }
        }
    }
    if !quick {
        for (page, wire) in [(1000, Wire::Http), (1000, Wire::Stdio), (100, Wire::Http)] {
            cases.push(WalkCase {
                size: 1_000_000,
                page,
                wire,
                runs: 3,
                python: page == 1000,
            });
        }
    }
    // `--size=N` keeps only the cases of one catalog size, for profiling one of them.
    if let Some(size) =
        std::env::args().find_map(|argument| argument.strip_prefix("--size=").map(str::to_string))
    {
        let size: usize = size.parse().context("--size=N")?;
        cases.retain(|case| case.size == size);
        if cases.is_empty() {
            cases.push(WalkCase {
                size,
                page: 1000,
                wire: Wire::Http,
                runs: 3,
                python: false,
            });
        }
    }
    let mut rows = Vec::new();
    for case in &cases {
        eprintln!(
            "walk: {} resources, page {}, {}",
            case.size,
            case.page,
            case.wire.label()
        );
        let result = run_walk_case(case, bench)?;
        rows.push(vec![
            format!("{}", case.size),
            format!("{}", case.page),
            case.wire.label().into(),
            result.bare.summary(3),
            result.mirror.summary(3),
            ratio(result.mirror.median(), result.bare.median()),
            result.first_load.summary(3),
            ratio(result.first_load.median(), result.bare.median()),
            result.python.summary(3),
            ratio(result.python.median(), result.mirror.median()),
            ratio(result.python.median(), result.first_load.median()),
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
            "first load s",
            "first/bare",
            "python s",
            "python/mirror",
            "python/first",
            "swap / lock ms",
            "peak RSS MB",
            "rest RSS MB",
        ],
        &rows,
    );
    if !quick {
        report.line(
            "At 1,000,000 resources the Python SDK runs at page size 1,000 only (a page-100 walk \
             takes it minutes per round); the other contenders run every listed combination.",
        );
        report.line("");
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Swap: a 100,000-resource snapshot that differs in 100 entries
// ---------------------------------------------------------------------------------------------

fn write_scenario(path: &Path, scenario: &Value) -> anyhow::Result<()> {
    let temporary = path.with_extension("tmp");
    std::fs::write(&temporary, serde_json::to_vec(scenario)?)?;
    std::fs::rename(&temporary, path)?;
    Ok(())
}

fn changing_resources(version: usize) -> Vec<Value> {
    (0..100)
        .map(|index| {
            json!({
                "uri": format!("bench://swap/{index:03}"),
                "name": format!("swapped-{index:03}"),
                "description": format!("Changing resource {index} at version {version}"),
                "mimeType": "text/plain",
            })
        })
        .collect()
}

/// Searches the daemon until `stop`; returns (start µs, end µs) of every call.
fn search_while(socket: PathBuf, stop: Arc<AtomicBool>) -> anyhow::Result<Vec<(i64, i64)>> {
    let mut client = SocketClient::connect(&socket)?;
    let mut calls = Vec::new();
    let mut index = 0usize;
    while !stop.load(Ordering::Relaxed) {
        index += 1;
        let query = match index % 3 {
            0 => format!("{:06}", (index * 7919) % 99_900),
            1 => format!("document {}", (index * 104_729) % 99_900),
            _ => format!("{:04}", (index * 31) % 999),
        };
        let start = now_us();
        client.call("catalog/search", json!({"query": query, "limit": 10}))?;
        calls.push((start, now_us()));
    }
    Ok(calls)
}

fn scenario_swap(report: &mut Report) -> anyhow::Result<()> {
    report.line("## Swap: 100,000 resources, 100 changed");
    report.line("");
    let files = DaemonFiles::fresh("swap")?;
    let scenario_path = files.path("scenario.json");
    let scenario = |version: usize| json!({"generate": 99_900, "page_size": 1000, "resources": changing_resources(version)});
    write_scenario(&scenario_path, &scenario(0))?;
    let args = vec![
        "--name".into(),
        "swap".into(),
        "--scenario".into(),
        scenario_path.display().to_string(),
    ];
    let config = files.config("", &stdio_server_table("swap", &args))?;
    let daemon = start_daemon(&files, &config)?;
    daemon.wait_for_walks(1, Duration::from_secs(600))?;
    let mut hold = Samples::default();
    let mut total = Samples::default();
    let mut during_walk = Samples::default();
    let mut during_hold = Samples::default();
    let mut during_swap = Samples::default();
    let mut idle = Samples::default();
    let rounds = 6;
    for version in 1..=rounds {
        let swaps_before = daemon.swaps().len();
        let stop = Arc::new(AtomicBool::new(false));
        let searcher = {
            let socket = daemon.socket.clone();
            let stop = stop.clone();
            std::thread::spawn(move || search_while(socket, stop))
        };
        std::thread::sleep(Duration::from_millis(300));
        let walk_began = now_us();
        // The stdio fixture notices the file within 100 ms and sends list_changed.
        write_scenario(&scenario_path, &scenario(version))?;
        let deadline = Instant::now() + Duration::from_secs(120);
        let swap = loop {
            let swaps = daemon.swaps();
            if let Some(swap) = swaps
                .get(swaps_before..)
                .and_then(|new| new.iter().find(|swap| swap.changed == 100).copied())
            {
                break swap;
            }
            if Instant::now() > deadline {
                bail!("no swap with 100 changes appeared: {}", daemon.log_text());
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        std::thread::sleep(Duration::from_millis(200));
        stop.store(true, Ordering::Relaxed);
        let calls = searcher
            .join()
            .map_err(|_| anyhow!("the search thread panicked"))??;
        if version == 1 {
            continue; // warm-up
        }
        let commit_at = swap.committed_at_us;
        let hold_began = commit_at - (swap.hold_ms * 1000.0) as i64;
        hold.push(swap.hold_ms);
        total.push(swap.total_ms);
        for (start, end) in calls {
            let latency = (end - start) as f64 / 1000.0;
            let swap_began = commit_at - (swap.total_ms * 1000.0) as i64;
            if end >= swap_began && start <= commit_at {
                during_swap.push(latency);
            }
            if end >= hold_began && start <= commit_at {
                during_hold.push(latency);
            } else if start >= walk_began && start <= commit_at {
                during_walk.push(latency);
            } else {
                idle.push(latency);
            }
        }
    }
    let row = |label: &str, samples: &Samples| {
        vec![
            label.to_string(),
            samples.len().to_string(),
            format!("{:.2}", samples.median()),
            format!("{:.2}", samples.quantile(0.99)),
            format!("{:.2}", samples.max()),
        ]
    };
    report.line(format!(
        "Write transaction hold time over {} swaps (each 100 resources changed, stdio fixture, \
         page size 1,000): median {:.1} ms, min {:.1}, max {:.1} (budget: under 100 ms). Measured \
         inside the writer from the first write to the snapshot to `COMMIT` and logged as \
         `hold_ms`. The whole swap, computing the diff (read-only, before the write lock) and \
         applying it: median {:.1} ms, min {:.1}, max {:.1}.",
        hold.len(),
        hold.median(),
        hold.min(),
        hold.max(),
        total.median(),
        total.min(),
        total.max()
    ));
    report.line("");
    report.line(
        "`catalog/search` latency from one socket client searching in a loop (a mix of a \
         6-digit name, `document N`, and a 4-digit prefix) while the swaps happen, split by when \
         each call ran:",
    );
    report.line("");
    report.table(
        &["calls", "count", "p50 ms", "p99 ms", "max ms"],
        &[
            row("overlapping the write lock", &during_hold),
            row("overlapping the whole swap (diff + apply)", &during_swap),
            row("during the walk, before the swap", &during_walk),
            row("before and after the walk", &idle),
        ],
    );
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Change latency: list_changed sent -> new resource visible on the socket
// ---------------------------------------------------------------------------------------------

/// Timestamps (µs) of the fixture's "scenario reloaded" lines, in order, from its own log or
/// relayed by the daemon from a stdio child's stderr.
fn reload_times(log: &str) -> Vec<i64> {
    log.lines()
        .filter(|line| line.contains("scenario reloaded"))
        .filter_map(|line| {
            let own = line.split("child stderr: ").nth(1).unwrap_or(line);
            parse_timestamp_us(own.split_whitespace().next()?)
        })
        .collect()
}

struct ChangeCase {
    era: &'static str,
    wire: Wire,
    debounce: &'static str,
}

fn scenario_change(report: &mut Report) -> anyhow::Result<()> {
    report.line("## Change latency: list_changed to visible, 1,000 resources");
    report.line("");
    let cases = [
        ChangeCase {
            era: "legacy",
            wire: Wire::Stdio,
            debounce: "100ms",
        },
        ChangeCase {
            era: "legacy",
            wire: Wire::Http,
            debounce: "100ms",
        },
        ChangeCase {
            era: "modern",
            wire: Wire::Stdio,
            debounce: "100ms",
        },
        ChangeCase {
            era: "modern",
            wire: Wire::Http,
            debounce: "100ms",
        },
        ChangeCase {
            era: "legacy",
            wire: Wire::Stdio,
            debounce: "10ms",
        },
        ChangeCase {
            era: "modern",
            wire: Wire::Http,
            debounce: "10ms",
        },
    ];
    let mut rows = Vec::new();
    for case in &cases {
        eprintln!(
            "change: {} era, {}, debounce {}",
            case.era,
            case.wire.label(),
            case.debounce
        );
        let files = DaemonFiles::fresh("change")?;
        let scenario_path = files.path("scenario.json");
        let scenario = |marker: usize| {
            json!({"generate": 1000, "page_size": 100, "resources": [{
                "uri": format!("bench://change/{marker}"),
                "name": format!("changemarker{marker}"),
                "mimeType": "text/plain",
            }]})
        };
        write_scenario(&scenario_path, &scenario(0))?;
        let args = vec![
            "--name".into(),
            "change".into(),
            "--era".into(),
            case.era.into(),
            "--scenario".into(),
            scenario_path.display().to_string(),
        ];
        let fixture_log = files.path("fixture.log");
        let http = match case.wire {
            Wire::Http => Some(start_http_fixture(&args, &fixture_log)?),
            Wire::Stdio => None,
        };
        let server_table = match &http {
            Some(fixture) => http_server_table("change", &fixture.url),
            None => stdio_server_table("change", &args),
        };
        let config = files.config(&format!("debounce = \"{}\"", case.debounce), &server_table)?;
        let daemon = start_daemon(&files, &config)?;
        daemon.wait_for_walks(1, Duration::from_secs(60))?;
        let push = daemon.server_status("change")?;
        let reload_log = || match case.wire {
            Wire::Http => std::fs::read_to_string(&fixture_log).unwrap_or_default(),
            Wire::Stdio => daemon.log_text(),
        };
        let mut client = daemon.client()?;
        let mut from_send = Samples::default();
        let mut from_write = Samples::default();
        let rounds = 101;
        for marker in 1..=rounds {
            let reloads_before = reload_times(&reload_log()).len();
            let written = now_us();
            write_scenario(&scenario_path, &scenario(marker))?;
            let deadline = Instant::now() + Duration::from_secs(30);
            let visible = loop {
                let found = client.call(
                    "catalog/search",
                    json!({"query": format!("changemarker{marker}"), "limit": 1}),
                )?;
                if found["results"]
                    .as_array()
                    .is_some_and(|results| !results.is_empty())
                {
                    break now_us();
                }
                if Instant::now() > deadline {
                    bail!(
                        "change {marker} never became visible ({} era, {})",
                        case.era,
                        case.wire.label()
                    );
                }
                std::thread::sleep(Duration::from_micros(500));
            };
            // The fixture logs "scenario reloaded" right after sending list_changed.
            let sent = reload_times(&reload_log()).get(reloads_before).copied();
            if marker == 1 {
                continue; // warm-up
            }
            from_write.push((visible - written) as f64 / 1000.0);
            if let Some(sent) = sent {
                from_send.push((visible - sent) as f64 / 1000.0);
            }
        }
        let era = if push["protocol_version"]
            .as_str()
            .unwrap_or("")
            .starts_with("2026")
        {
            "stateless (2026-07-28)"
        } else {
            "handshake (2025-11-25)"
        };
        let channel = push["live"]["push"]
            .as_str()
            .map(str::to_string)
            .unwrap_or_else(|| push["live"]["push"].to_string());
        rows.push(vec![
            format!("{era}, {}", case.wire.label()),
            channel,
            case.debounce.into(),
            from_send.len().to_string(),
            format!("{:.1}", from_send.median()),
            format!("{:.1}", from_send.quantile(0.99)),
            format!("{:.1}", from_write.median()),
            format!("{:.1}", from_write.quantile(0.99)),
        ]);
        drop(daemon);
        drop(http);
    }
    report.table(
        &[
            "era, transport",
            "push channel",
            "debounce",
            "changes",
            "p50 ms from send",
            "p99 ms from send",
            "p50 ms from file write",
            "p99 ms from file write",
        ],
        &rows,
    );
    report.line(
        "*From send*: from the fixture's own log timestamp of the reload that sent \
         `notifications/resources/list_changed` to the new resource found by `catalog/search` \
         (polled every 0.5 ms); 100 changes after one warm-up, each adding one resource and \
         removing the previous one. *From file write* adds the fixture's 100 ms scenario-file \
         poll. The floor is the session's debounce (quiet time after a notification before \
         walking); 100 ms is the default.",
    );
    report.line("");
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// A database of 1,000,000 resources for the query and start scenarios
// ---------------------------------------------------------------------------------------------

const MILLION_SERVER: &str = "million";

/// Mirrors a 1,000,000-resource stdio fixture into `work/million` and stops the daemon,
/// leaving the database. Returns the seconds the first load took.
fn build_million_database() -> anyhow::Result<DaemonFiles> {
    let files = DaemonFiles::fresh("million")?;
    let args = fixture_args(1_000_000, 1000, MILLION_SERVER);
    let config = files.config("", &stdio_server_table(MILLION_SERVER, &args))?;
    let mut daemon = start_daemon(&files, &config)?;
    daemon.wait_for_walks(1, Duration::from_secs(1800))?;
    daemon.process.stop();
    Ok(files)
}

/// A config naming the same server, now unreachable: the daemon keeps its snapshot and
/// serves it while it backs off.
fn offline_million_config(files: &DaemonFiles) -> anyhow::Result<PathBuf> {
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

fn scenario_query(report: &mut Report, files: &DaemonFiles) -> anyhow::Result<()> {
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
                    let mut client = SocketClient::connect(&socket)?;
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

// ---------------------------------------------------------------------------------------------
// Start: process start -> socket answers catalog/status with a 1,000,000-resource database
// ---------------------------------------------------------------------------------------------

fn scenario_start(report: &mut Report, files: &DaemonFiles) -> anyhow::Result<()> {
    report.line("## Start: 1,000,000-resource database");
    report.line("");
    let config = offline_million_config(files)?;
    let mut samples = Samples::default();
    let mut first_connect = Samples::default();
    for round in 0..6 {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(files.log())?;
        let started = Instant::now();
        let child = Command::new(release_binary("mcp-mirror"))
            .args(["serve", "--config"])
            .arg(&config)
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()?;
        let mut process = Process { child };
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut connected_at = None;
        let answered = loop {
            if Instant::now() > deadline {
                bail!("the daemon did not answer within 30s");
            }
            if let Ok(mut client) = SocketClient::connect(&files.socket()) {
                connected_at.get_or_insert(started.elapsed());
                if let Ok(status) = client.call("catalog/status", json!({})) {
                    if status["daemon"]["resources"].as_u64() == Some(1_000_000) {
                        break started.elapsed();
                    }
                }
            }
            std::thread::sleep(Duration::from_micros(500));
        };
        process.stop();
        if round > 0 {
            samples.push(answered.as_secs_f64() * 1000.0);
            if let Some(connected) = connected_at {
                first_connect.push(connected.as_secs_f64() * 1000.0);
            }
        }
    }
    report.line(format!(
        "From spawning `mcp-mirror serve` to `catalog/status` answering with 1,000,000 \
         resources (the only server unreachable, so nothing walks): {} ms median (min–max) over \
         {} starts after a warm-up; the socket first accepted a connection at {} ms (budget: \
         under 100 ms).",
        samples.summary(1),
        samples.len(),
        first_connect.summary(1)
    ));
    report.line("");
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Idle and scale: many quiet servers
// ---------------------------------------------------------------------------------------------

fn measure_idle(daemon: &Daemon, window: Duration) -> (f64, Option<u64>, usize) {
    let pid = daemon.process.pid();
    let before = cpu_ticks(pid).unwrap_or(0);
    std::thread::sleep(window);
    let after = cpu_ticks(pid).unwrap_or(0);
    let percent = (after - before) as f64 / clock_ticks_per_second() / window.as_secs_f64() * 100.0;
    (percent, proc_status_kb(pid, "VmRSS"), open_fds(pid))
}

fn scenario_idle(report: &mut Report, quick: bool) -> anyhow::Result<()> {
    report.line("## Idle and scale: quiet servers");
    report.line("");
    let window = if quick {
        Duration::from_secs(10)
    } else {
        Duration::from_secs(60)
    };
    let mut rows = Vec::new();

    // 100 stdio fixtures, each a child process of the daemon with 10 resources.
    {
        let files = DaemonFiles::fresh("idle-100")?;
        let servers: String = (0..100)
            .map(|index| {
                let name = format!("quiet{index:03}");
                stdio_server_table(&name, &fixture_args(10, 100, &name))
            })
            .collect();
        let config = files.config("", &servers)?;
        let daemon = start_daemon(&files, &config)?;
        daemon.wait_for_walks(1, Duration::from_secs(300))?;
        std::thread::sleep(Duration::from_secs(5));
        let status = daemon.call("catalog/status", json!({}))?;
        let push = status["servers"][0]["live"]["push"]
            .as_str()
            .unwrap_or("?")
            .to_string();
        let (percent, rss, fds) = measure_idle(&daemon, window);
        rows.push(vec![
            "100".into(),
            format!("stdio, 100 fixture child processes; push: {push}"),
            format!("{percent:.3}"),
            mb(rss),
            fds.to_string(),
        ]);
    }

    // 100 and 1,000 servers over Streamable HTTP: one fixture process serving one endpoint
    // (its own catalog and sessions) per server at /mcp/0 .. /mcp/N-1.
    for count in [100usize, 1000] {
        let files = DaemonFiles::fresh(&format!("idle-http-{count}"))?;
        let mut args = fixture_args(10, 100, "quiet");
        args.extend(["--endpoints".to_string(), count.to_string()]);
        let fixture = start_http_fixture(&args, &files.path("fixture.log"))?;
        let base = fixture.url.trim_end_matches('/');
        let servers: String = (0..count)
            .map(|index| http_server_table(&format!("quiet{index:04}"), &format!("{base}/{index}")))
            .collect();
        let config = files.config("", &servers)?;
        let daemon = start_daemon(&files, &config)?;
        daemon.wait_for_walks(1, Duration::from_secs(600))?;
        std::thread::sleep(Duration::from_secs(5));
        let status = daemon.call("catalog/status", json!({}))?;
        let push = status["servers"][0]["live"]["push"]
            .as_str()
            .unwrap_or("?")
            .to_string();
        let (percent, rss, fds) = measure_idle(&daemon, window);
        rows.push(vec![
            count.to_string(),
            format!("Streamable HTTP, one fixture process with {count} endpoints; push: {push}"),
            format!("{percent:.3}"),
            mb(rss),
            fds.to_string(),
        ]);
        drop(daemon);
        drop(fixture);
    }
    report.table(
        &[
            "servers",
            "transport",
            "daemon CPU % of one core",
            "daemon RSS MB",
            "daemon open fds",
        ],
        &rows,
    );
    report.line(format!(
        "CPU is utime+stime from /proc/PID/stat over {} s, starting 5 s after every server's \
         first walk; pings run at the default 60 s interval. Budget: 100 quiet servers under 1% \
         of a core.",
        window.as_secs()
    ));
    report.line("");
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// main
// ---------------------------------------------------------------------------------------------

fn machine() -> String {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find_map(|line| line.strip_prefix("model name"))
        .map(|rest| rest.trim_start_matches([' ', '\t', ':']).to_string())
        .unwrap_or_else(|| "unknown".into());
    let cores = std::thread::available_parallelism().map_or(0, |cores| cores.get());
    let memory = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|text| {
            text.lines()
                .find_map(|line| line.strip_prefix("MemTotal:"))
                .and_then(|rest| rest.split_whitespace().next()?.parse::<f64>().ok())
        })
        .map(|kb| format!("{:.1} GiB", kb / 1024.0 / 1024.0))
        .unwrap_or_else(|| "?".into());
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    format!(
        "{cores} cores, {memory} memory, CPU `{model}`, Linux {}",
        kernel.trim()
    )
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|text| {
            text.split_whitespace()
                .take(3)
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_default()
}

fn git_revision() -> String {
    let run = |args: &[&str]| {
        Command::new("git")
            .args(args)
            .current_dir(ROOT)
            .output()
            .ok()
            .map(|output| String::from_utf8_lossy(&output.stdout).trim().to_string())
            .unwrap_or_default()
    };
    let dirty = !run(&["status", "--porcelain", "--untracked-files=no"]).is_empty();
    format!(
        "{}{}",
        run(&["rev-parse", "--short", "HEAD"]),
        if dirty {
            " (with uncommitted changes)"
        } else {
            ""
        }
    )
}

fn main() -> anyhow::Result<()> {
    let arguments: Vec<String> = std::env::args().skip(1).collect();
    if arguments.first().map(String::as_str) == Some("bare-walk") {
        let config = arguments.get(1).context("bare-walk CONFIG ROUNDS")?;
        let rounds = arguments
            .get(2)
            .context("bare-walk CONFIG ROUNDS")?
            .parse()?;
        return bare_walk(Path::new(config), rounds);
    }
    let quick = arguments.iter().any(|argument| argument == "--quick");
    let mut scenarios: Vec<&str> = arguments
        .iter()
        .map(String::as_str)
        .filter(|argument| !argument.starts_with("--"))
        .collect();
    const ALL: [&str; 6] = ["walk", "swap", "change", "query", "start", "idle"];
    if scenarios.is_empty() || scenarios.contains(&"all") {
        scenarios = ALL.to_vec();
    }
    if let Some(unknown) = scenarios.iter().find(|name| !ALL.contains(name)) {
        bail!(
            "unknown scenario {unknown}; choose from all, {}",
            ALL.join(", ")
        );
    }
    for binary in ["mcp-mirror", "mcp-fixture"] {
        if !release_binary(binary).exists() {
            bail!(
                "{} is missing: run `bench/run`, which builds it",
                release_binary(binary).display()
            );
        }
    }
    if scenarios.contains(&"walk") && !python_binary().exists() {
        bail!(
            "{} is missing: run `bench/run`, which creates the venv",
            python_binary().display()
        );
    }
    let bench = std::env::current_exe()?;
    std::fs::create_dir_all(work_dir())?;
    let mut report = Report {
        text: String::new(),
    };
    let started = Instant::now();
    report.line(format!("Machine: {}.", machine()));
    report.line(format!(
        "Revision {}; load average at start {}.",
        git_revision(),
        load_average()
    ));
    report.line("");
    let mut results: BTreeMap<&str, anyhow::Result<()>> = BTreeMap::new();
    let mut million: Option<DaemonFiles> = None;
    for scenario in &scenarios {
        eprintln!("== {scenario}");
        let outcome = match *scenario {
            "walk" => scenario_walk(&mut report, &bench, quick),
            "swap" => scenario_swap(&mut report),
            "change" => scenario_change(&mut report),
            "query" | "start" => (|| {
                if million.is_none() {
                    eprintln!("building the 1,000,000-resource database");
                    million = Some(build_million_database()?);
                }
                let files = million.as_ref().context("million database")?;
                match *scenario {
                    "query" => scenario_query(&mut report, files),
                    _ => scenario_start(&mut report, files),
                }
            })(),
            "idle" => scenario_idle(&mut report, quick),
            _ => unreachable!(),
        };
        if let Err(error) = &outcome {
            report.line(format!("**{scenario} failed:** {error:#}"));
            report.line("");
        }
        results.insert(scenario, outcome);
    }
    let mut footer = String::new();
    let _ = write!(
        footer,
        "Finished in {:.0} s; load average at the end {}.",
        started.elapsed().as_secs_f64(),
        load_average()
    );
    report.line(footer);
    let output = Path::new(ROOT).join("target/bench-results.md");
    std::fs::write(&output, &report.text)?;
    eprintln!("results written to {}", output.display());
    if results.values().any(|outcome| outcome.is_err()) {
        bail!("some scenarios failed");
    }
    Ok(())
}
