//! A spec-following MCP test server serving a synthetic resource catalog over stdio or HTTP.
//!
//! It speaks both protocol eras (the `initialize` handshake of 2024-11-05
//! through 2025-11-25, and the stateless 2026-07-28 with `server/discover` and
//! `subscriptions/listen`) over stdio, Streamable HTTP and the 2024-11-05
//! HTTP+SSE transport. It reloads a JSON scenario file when it changes,
//! injects faults on request and records counters in a stats file so tests
//! can assert on them. It binds only to loopback and logs only to stderr.
//!
//! Modules: `catalog` (scenario format, pages, cursors), `server` (one
//! endpoint's state and the method handlers of both eras), `stdio`, `http`
//! (Streamable HTTP), `legacy_sse` (2024-11-05 HTTP+SSE), `sse` (event
//! framing and long-lived streams), `rpc` (JSON-RPC framing), `stats`.

mod catalog;
mod definitions;
mod http;
mod legacy_sse;
mod rpc;
mod server;
mod sse;
mod stats;
mod stdio;

use std::io::{IsTerminal as _, Write as _};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use anyhow::{bail, Context as _};
use axum::routing::any;
use axum::Router;
use clap::{Parser, ValueEnum};
use tracing::{info, warn};

use crate::catalog::{Catalog, Scenario};
use crate::server::Server;
use crate::stats::Stats;

/// Which protocol eras the server speaks.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum EraChoice {
    /// Only the `initialize` handshake (2024-11-05 .. 2025-11-25).
    Legacy,
    /// Only the stateless 2026-07-28 era: `initialize` answers -32601.
    Modern,
    /// Both: a request with per-request `_meta` is modern, `initialize` starts a legacy session.
    Both,
}

/// Command line of the fixture server.
#[derive(Parser, Debug)]
#[command(version, about = "MCP test server with a synthetic resource catalog")]
pub struct Args {
    /// Number of resources to synthesize (a scenario's `generate` overrides it).
    #[arg(long, default_value_t = 0)]
    pub generate: usize,
    /// JSON scenario file, polled every `--scenario-poll-ms` and reloaded when it changes.
    #[arg(long)]
    pub scenario: Option<PathBuf>,
    /// How often the scenario file is looked at, in milliseconds (tests that drive many
    /// changes in a row poll faster).
    #[arg(long, default_value_t = 100, requires = "scenario")]
    pub scenario_poll_ms: u64,
    /// Resources per `resources/list` page (a scenario's `page_size` overrides it).
    #[arg(long, default_value_t = 50)]
    pub page_size: usize,
    /// Serve HTTP on this loopback address instead of stdio.
    #[arg(long)]
    pub http: Option<SocketAddr>,
    /// Answer POSTed requests with a `text/event-stream` body instead of JSON.
    #[arg(long, requires = "http")]
    pub sse: bool,
    /// Write counters to this JSON file after every change.
    #[arg(long)]
    pub stats: Option<PathBuf>,
    /// Server name used in `serverInfo` and in generated URIs.
    #[arg(long, default_value = "mcp-fixture")]
    pub name: String,
    /// Protocol eras to speak.
    #[arg(long, value_enum, default_value_t = EraChoice::Both)]
    pub era: EraChoice,
    /// Stateless-era protocol versions to accept (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "2026-07-28")]
    pub modern_versions: Vec<String>,
    /// `ttlMs` of stateless-era results.
    #[arg(long, default_value_t = 60_000)]
    pub ttl_ms: u64,
    /// `cacheScope` of stateless-era results (`public` or `private`).
    #[arg(long, default_value = "public")]
    pub cache_scope: String,
    /// `resources/list` pages after this many say `cacheScope: private` (stateless era).
    #[arg(long)]
    pub private_after_page: Option<usize>,
    /// These list methods say `cacheScope: private` (comma-separated, e.g.
    /// `tools/list,resources/templates/list`; stateless era).
    #[arg(long, value_delimiter = ',')]
    pub private_lists: Vec<String>,
    /// Hostile: put the `Authorization` header of the last POST into the description of the
    /// first resource of every `resources/list` page (a server that reflects our token).
    #[arg(long, requires = "http")]
    pub reflect_authorization: bool,
    /// Answer `subscriptions/listen` with -32601, so a client must poll.
    #[arg(long)]
    pub no_listen: bool,
    /// Answer GET with 405: a handshake-era server that cannot push (except inside POSTs).
    #[arg(long, requires = "http")]
    pub no_get_stream: bool,
    /// Deliver a session's list_changed notifications inside its next POST's SSE answer,
    /// before the response, instead of on the GET stream.
    #[arg(long, requires = "sse")]
    pub notify_in_post: bool,
    /// The `retry:` delay the GET stream announces, in milliseconds.
    #[arg(long, default_value_t = 500)]
    pub sse_retry_ms: u64,
    /// Send the client a `ping` request this often (GET stream, legacy SSE stream, stdio).
    #[arg(long)]
    pub server_ping_ms: Option<u64>,
    /// Interval of keep-alive comments on long-lived SSE streams, in milliseconds.
    #[arg(long, default_value_t = 2_000)]
    pub keepalive_ms: u64,
    /// Serve the 2024-11-05 HTTP+SSE transport (`GET /sse`, `POST /message`) instead of `/mcp`;
    /// everything on it is served in the handshake era.
    #[arg(long, requires = "http", conflicts_with = "endpoints")]
    pub legacy_sse: bool,
    /// Serve this many independent catalogs at `/mcp/0` .. `/mcp/{N-1}`.
    #[arg(long, requires = "http")]
    pub endpoints: Option<usize>,
    /// stdio: wait this long before reading the first message, like a server that is slow
    /// to start (a package manager fetching it, a loaded machine).
    #[arg(long, conflicts_with = "http")]
    pub start_delay_ms: Option<u64>,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    let args = Arc::new(Args::parse());
    if args.page_size == 0 {
        bail!("--page-size must be at least 1");
    }
    if args.endpoints == Some(0) {
        bail!("--endpoints must be at least 1");
    }
    if args.legacy_sse && args.era == EraChoice::Modern {
        bail!("--legacy-sse is the 2024-11-05 transport: it cannot serve --era modern");
    }
    if args.modern_versions.is_empty() {
        bail!("--modern-versions needs at least one version");
    }
    // The fingerprint is taken before the read so that a write racing with it is seen as a change.
    let (scenario, fingerprint) = match &args.scenario {
        Some(path) => {
            let fingerprint = fingerprint_of(path).await;
            (load_scenario(path).await?, fingerprint)
        }
        None => (Scenario::default(), None),
    };
    let stats = Arc::new(Stats::new(args.stats.clone(), 1));
    let endpoints: Vec<Option<usize>> = match args.endpoints {
        Some(count) => (0..count).map(Some).collect(),
        None => vec![None],
    };
    let mut servers = Vec::with_capacity(endpoints.len());
    for endpoint in endpoints {
        let catalog = Catalog::build(&args, &scenario, 1, endpoint)
            .context("while building the initial catalog")?;
        let server = Server::new(Arc::clone(&args), endpoint, Arc::clone(&stats), catalog);
        servers.push(Arc::new(server));
    }
    let servers = Arc::new(servers);
    stats.update(|_| {});
    if let Some(path) = args.scenario.clone() {
        let watched = Arc::clone(&servers);
        let every = Duration::from_millis(args.scenario_poll_ms.max(1));
        tokio::spawn(watch_scenario(watched, path, every, fingerprint, scenario));
    }
    match args.http {
        Some(address) => serve_http(servers, &args, address).await,
        None => stdio::serve_stdio(Arc::clone(&servers[0])).await,
    }
}

/// Serves HTTP on a loopback address until the process is killed.
async fn serve_http(
    servers: http::Servers,
    args: &Args,
    address: SocketAddr,
) -> anyhow::Result<()> {
    if !address.ip().is_loopback() {
        bail!("refusing to listen on non-loopback address {address}: use 127.0.0.1 or [::1]");
    }
    let listener = tokio::net::TcpListener::bind(address)
        .await
        .with_context(|| format!("while binding {address}"))?;
    let local = listener
        .local_addr()
        .context("while reading the bound address")?;
    let (router, path) = if args.legacy_sse {
        let router = Router::new()
            .route("/sse", any(legacy_sse::sse_endpoint))
            .route("/message", any(legacy_sse::message_endpoint));
        (router, "/sse")
    } else if args.endpoints.is_some() {
        // Endpoint i is the announced URL followed by i.
        let router = Router::new().route("/mcp/{index}", any(http::indexed_endpoint));
        (router, "/mcp/")
    } else {
        let router = Router::new().route("/mcp", any(http::single_endpoint));
        (router, "/mcp")
    };
    let router = router.with_state(servers);
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "listening on http://{local}{path}")
        .context("while announcing the address")?;
    stdout.flush().context("while announcing the address")?;
    drop(stdout);
    info!(%local, path, era = ?args.era, "serving http");
    axum::serve(listener, router)
        .await
        .context("while serving http")
}

/// Reads and parses a scenario file.
async fn load_scenario(path: &Path) -> anyhow::Result<Scenario> {
    let bytes = tokio::fs::read(path)
        .await
        .with_context(|| format!("while reading scenario {}", path.display()))?;
    serde_json::from_slice(&bytes)
        .with_context(|| format!("while parsing scenario {}", path.display()))
}

/// What the watcher compares to notice a changed scenario file.
type Fingerprint = Option<(Option<SystemTime>, u64)>;

async fn fingerprint_of(path: &Path) -> Fingerprint {
    let metadata = tokio::fs::metadata(path).await.ok()?;
    Some((metadata.modified().ok(), metadata.len()))
}

/// Polls the scenario file every `every` and applies it whenever its mtime or size changes.
///
/// A changed catalog (anything but the control counters) bumps the catalog
/// version and notifies; a changed control counter performs its action once.
async fn watch_scenario(
    servers: http::Servers,
    path: PathBuf,
    every: Duration,
    mut last_seen: Fingerprint,
    mut applied: Scenario,
) {
    let mut ticker = tokio::time::interval(every);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        let current = fingerprint_of(&path).await;
        if current == last_seen {
            continue;
        }
        last_seen = current;
        if current.is_none() {
            warn!(path = %path.display(), "scenario file is gone; keeping the previous scenario");
            continue;
        }
        let scenario = match load_scenario(&path).await {
            Ok(scenario) => scenario,
            Err(error) => {
                warn!(path = %path.display(), error = format!("{error:#}"), "ignoring bad scenario");
                continue;
            }
        };
        if scenario.content() != applied.content() {
            let mut replaced = Ok(0);
            for server in servers.iter() {
                replaced = server.replace_catalog(&scenario);
                if replaced.is_err() {
                    break;
                }
            }
            match replaced {
                Ok(version) => {
                    info!(path = %path.display(), catalog_version = version, "scenario reloaded")
                }
                Err(error) => {
                    let error = format!("{error:#}");
                    warn!(path = %path.display(), error, "ignoring bad scenario");
                    continue;
                }
            }
        }
        let controls = scenario.controls_since(&applied);
        for server in servers.iter() {
            server.apply_controls(&controls);
        }
        applied = scenario;
    }
}
