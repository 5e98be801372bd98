//! The daemon's wiring: `run_with` starts the store, the index, the sessions, the socket and the faces, then reloads and stops them.

use std::path::Path;
use std::sync::atomic::{AtomicU64, AtomicUsize};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use tokio::sync::{mpsc, watch};

use super::health::*;
use super::socket_file::SocketFile;
use crate::answer::{reload, ConfigLoad, DaemonContext, IntervalLog};
use crate::config::{self, Config};
use crate::http_face::{self, Face, HttpFace};
use crate::protocol::{ReloadOutcome, ReloadResult};
use crate::redact;
use crate::search::gate::SearchGate;
use crate::search::{self, SearchIndex};
use crate::socket;
use crate::store::{now_ms, RemovedServers, ServerSync, Store};
use crate::supervisor::{server_entry, Supervisor};
use crate::systemd::{Notifier, ServiceEnvironment};

/// How long the search index keeper gets to stop at shutdown (a rebuild stops at its next
/// batch of entries).
const KEEPER_STOP_BOUND: Duration = Duration::from_secs(5);
/// How long the socket's accept loop gets to wind down at shutdown.
const API_STOP_BOUND: Duration = Duration::from_secs(2);
/// How often the database path is checked to still name the file we opened (one stat).
const DATABASE_CHECK_INTERVAL: Duration = Duration::from_secs(2);

/// Descriptors kept for everything but socket clients: the database's writer and readers
/// (`store::MAX_READERS`, two each), stdio children's pipes, HTTP connections, the log.
const DESCRIPTOR_RESERVE: u64 = 512;

/// Raises the soft `RLIMIT_NOFILE` to the hard limit, and returns how many socket clients fit
/// beside `DESCRIPTOR_RESERVE`: `configured`, or fewer (said once in the log) when the limit
/// is too low for it.
fn client_budget(configured: usize) -> usize {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit only read and write the struct we pass.
    let soft = unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
            return configured;
        }
        if limit.rlim_cur < limit.rlim_max {
            let raised = libc::rlimit {
                rlim_cur: limit.rlim_max,
                rlim_max: limit.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                limit.rlim_cur = limit.rlim_max;
            }
        }
        limit.rlim_cur
    };
    let room = soft.saturating_sub(DESCRIPTOR_RESERVE).max(1);
    if (configured as u64) > room {
        tracing::warn!(
            max_clients = configured,
            descriptor_limit = soft,
            reserve = DESCRIPTOR_RESERVE,
            serving = room,
            "the descriptor limit (RLIMIT_NOFILE) leaves room for fewer clients than max_clients; raise LimitNOFILE or lower max_clients"
        );
        return room as usize;
    }
    configured
}

/// What the process asks of a running daemon (signals, in the binary).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ControlEvent {
    /// Re-read the configuration file and apply it as a diff (SIGHUP).
    Reload,
    /// Stop in order (SIGTERM, SIGINT).
    Shutdown,
}

/// Runs the daemon until a `Shutdown` event arrives (or every sender is gone), reloading the
/// configuration on `Reload`, and speaking the systemd protocol through `service`.
// Over 100 lines on purpose: the start in its fixed order (store, index, sessions, socket, HTTP
// face, READY) and the one shutdown path in the reverse order; the order is the point, each step
// one call.
pub async fn run_with(
    config: Config,
    mut controls: mpsc::Receiver<ControlEvent>,
    service: ServiceEnvironment,
    upstream: tokio::runtime::Handle,
) -> anyhow::Result<()> {
    redact::remember_secrets(config.secrets());
    let notifier = service.notifier.map(Arc::new);
    let store =
        Store::open(&config.daemon.database).context("while opening the catalog database")?;
    store
        .apply_servers(ServerSync {
            configured: config.servers.iter().map(server_entry).collect(),
            untouched: Vec::new(),
            removed: removed_policy(&config),
            history_bounds: config.daemon.history_bounds,
        })
        .await
        .context("while recording the configured servers")?;
    let http_listeners = bind_http_face(&config, service.http_listener).await?;
    let (listener, socket) = SocketFile::open(&config.daemon.socket, service.listener)?;
    if let Some(path) = &socket.path {
        // Without the record, clients that find this socket dead refuse to guess a database.
        if let Err(error) = socket::record_socket_database(path, &config.daemon.database) {
            tracing::warn!(%error, socket = %path.display(), "cannot record the database beside the socket");
        }
    }
    let (stop, stopping) = watch::channel(false);
    let search_index = open_search_index(&config.daemon.database).await;
    if let Some(hold) = config.search.first_load_index_hold {
        store.set_first_load_index_hold(hold);
    }
    let keeper = search_index
        .as_ref()
        .map(|index| search::keeper::spawn(index.clone(), store.clone(), stopping.clone()));
    #[cfg(feature = "semantic")]
    let semantic = start_semantic_index(&config.search, &store, &stopping);
    let supervisor = Arc::new(Supervisor::start(&config.servers, &store, upstream));
    let shared_servers = config
        .servers
        .iter()
        .filter(|server| server.share)
        .map(|server| server.name.clone())
        .collect();
    let publishers = crate::publish::spawn(
        &config.nats,
        shared_servers,
        config.daemon.timings.upstream_load_wait,
        &store,
        &stopping,
    );
    let max_clients = client_budget(config.daemon.socket_limits.max_clients);
    let (reloads, mut reload_requests) = reload::reload_queue();
    let context = Arc::new(DaemonContext {
        store: store.clone(),
        supervisor: supervisor.clone(),
        socket_path: socket
            .path
            .clone()
            .unwrap_or_else(|| config.daemon.socket.clone()),
        config_path: config.source.clone(),
        started: Instant::now(),
        clients: AtomicUsize::new(0),
        search_index: search_index.clone(),
        #[cfg(feature = "semantic")]
        semantic,
        config_load: std::sync::Mutex::new(ConfigLoad {
            loaded_at_ms: now_ms(),
            ..ConfigLoad::default()
        }),
        reloads,
        search_gate: SearchGate::new(config.daemon.socket_limits.search),
        max_clients,
        refused_clients: AtomicU64::new(0),
        refusal_log: std::sync::Mutex::new(IntervalLog::default()),
    });
    let (probes, probe_connections) = mpsc::channel(4);
    let api_task = tokio::spawn(socket::serve(
        listener,
        context.clone(),
        probe_connections,
        stopping.clone(),
    ));
    let http = start_http_face(&config, &context, &stopping, http_listeners);
    // Ready means the last snapshot is servable: the database is open and the socket answers.
    // Servers may not have answered yet, and need not have.
    probe_socket(&probes)
        .await
        .context("while checking that the socket answers")?;
    tracing::info!(
        socket = %context.socket_path.display(),
        socket_from_systemd = socket.passed,
        database = %config.daemon.database.display(),
        servers = config.servers.len(),
        "mcp-mirror is serving"
    );
    let mut health_task = None;
    if let Some(notifier) = &notifier {
        notifier.ready(&current_summary(&store).await);
        health_task = Some(tokio::spawn(health_loop(
            notifier.clone(),
            service.watchdog_interval,
            store.clone(),
            probes.clone(),
            socket.clone(),
            stopping.clone(),
        )));
    }

    let (database_lost, mut database_lost_events) = mpsc::channel(1);
    let database_task = tokio::spawn(watch_database_file(
        store.clone(),
        notifier.clone(),
        database_lost,
        stopping.clone(),
    ));

    let reloader = Reloader {
        supervisor: &supervisor,
        context: &context,
        notifier: notifier.as_deref(),
        http: http.as_ref().map(|(face, _)| face.as_ref()),
    };
    let fatal = serve_controls(
        config,
        &mut controls,
        &mut reload_requests,
        &mut database_lost_events,
        &reloader,
    )
    .await;

    // The one shutdown path, in a fixed order: stop accepting on the socket, cancel walks and
    // close sessions (stdio children stopped, HTTP sessions deleted), close the store, and
    // remove the socket file if it is ours.
    tracing::info!("shutting down");
    if let Some(notifier) = &notifier {
        notifier.stopping();
    }
    let _ = stop.send(true);
    if tokio::time::timeout(API_STOP_BOUND, api_task)
        .await
        .is_err()
    {
        tracing::warn!("the socket's accept loop did not stop within {API_STOP_BOUND:?}");
    }
    if let Some((_, task)) = http {
        if tokio::time::timeout(API_STOP_BOUND, task).await.is_err() {
            tracing::warn!("the HTTP face did not stop within {API_STOP_BOUND:?}");
        }
    }
    if let Some(task) = health_task {
        task.abort();
    }
    // A rebuild in progress stops uncommitted; the next start resumes the repair.
    if let Some(index) = &search_index {
        index.cancel();
    }
    if let Some(keeper) = keeper {
        match tokio::time::timeout(KEEPER_STOP_BOUND, keeper).await {
            // Stopped with its last commit in place: the next start trusts the files.
            Ok(_) => {
                if let Some(index) = &search_index {
                    index.close();
                }
            }
            Err(_) => {
                tracing::warn!("the search index keeper did not stop within {KEEPER_STOP_BOUND:?}")
            }
        }
    }
    database_task.abort();
    for publisher in publishers {
        let _ = publisher.await;
    }
    supervisor.shutdown().await;
    store.close().await;
    socket.remove_file_if_ours();
    tracing::info!("stopped");
    match fatal {
        // A failure exit: systemd's Restart=on-failure starts a daemon on the file at the path.
        Some(problem) => Err(anyhow::anyhow!(problem)),
        None => Ok(()),
    }
}

/// Stops the daemon when the database path no longer names the file it opened (deleted, or
/// replaced by a restore): every commit from then on would go to a file nobody can open
/// again, and readers opening the path would see another catalog. Going on quietly loses
/// data; stopping the watchdog alone would take a minute and works only under systemd. So it
/// says so (an ERROR in the journal, `STATUS=`, `databaseError` in status) and ends the
/// daemon in the usual order with a failure exit, which systemd restarts, on the file that is
/// at the path now (a new one if it was deleted).
async fn watch_database_file(
    store: Store,
    notifier: Option<Arc<Notifier>>,
    lost: mpsc::Sender<String>,
    mut stopping: watch::Receiver<bool>,
) {
    let mut ticker = tokio::time::interval(DATABASE_CHECK_INTERVAL);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = ticker.tick() => {}
            _ = stopping.changed() => return,
        }
        if let Some(problem) = store.check_database_file() {
            tracing::error!(
                database = %store.path().display(),
                "{problem}; stopping so that a restart opens the file at the path"
            );
            if let Some(notifier) = &notifier {
                notifier.status(&format!("stopping: {problem}"));
            }
            let _ = lost.send(problem).await;
            return;
        }
    }
}

/// Starts the semantic index of `[search] semantic_model`, when one is set: its thread loads
/// the model and embeds the catalog in the background, and searches stay lexical until then.
#[cfg(feature = "semantic")]
fn start_semantic_index(
    search: &crate::config::SearchConfig,
    store: &Store,
    stopping: &watch::Receiver<bool>,
) -> Option<Arc<crate::semantic::SemanticIndex>> {
    let model = search.semantic_model.as_ref()?;
    match crate::semantic::SemanticIndex::start(model, search, store.clone(), stopping.clone()) {
        Ok(index) => Some(index),
        Err(error) => {
            tracing::warn!(%error, "semantic search is off; searches stay lexical");
            None
        }
    }
}

/// Opens the derived search index beside the database; without it SQLite answers searches.
async fn open_search_index(database: &Path) -> Option<Arc<SearchIndex>> {
    let directory = search::directory_for(database);
    let searches = std::thread::available_parallelism()
        .map(|cores| cores.get())
        .unwrap_or(2);
    let opening = directory.clone();
    let opened = tokio::task::spawn_blocking(move || SearchIndex::open(&opening, searches)).await;
    match opened {
        Ok(Ok((index, how))) => {
            if let search::Opened::Reset { reason } = &how {
                tracing::warn!(directory = %directory.display(), %reason, "the search index was unusable and starts over");
            }
            Some(Arc::new(index))
        }
        Ok(Err(error)) => {
            tracing::warn!(directory = %directory.display(), %error, "no search index; searches use SQLite");
            None
        }
        Err(error) => {
            tracing::warn!(%error, "opening the search index failed; searches use SQLite");
            None
        }
    }
}

/// The HTTP face's listeners (`[http] listen`, `metrics_listen`), bound before the socket is
/// opened or any session starts, so an address in use fails the start before anything is
/// served. A TCP socket systemd `passed` serves in place of binding `listen`.
async fn bind_http_face(
    config: &Config,
    mut passed: Option<std::os::fd::OwnedFd>,
) -> anyhow::Result<Vec<(tokio::net::TcpListener, Face)>> {
    if passed.is_some() && config.http.listen.is_none() {
        tracing::warn!(
            "systemd passed a TCP socket, but [http] listen is not set; not serving HTTP on it"
        );
        passed = None;
    }
    let mut listeners = Vec::new();
    for (address, serving) in [
        (config.http.listen, Face::Mcp),
        (config.http.metrics_listen, Face::MetricsOnly),
    ] {
        let Some(address) = address else {
            continue;
        };
        let adopted = if serving == Face::Mcp {
            passed.take()
        } else {
            None
        };
        let listener = match adopted {
            Some(descriptor) => adopt_tcp_listener(descriptor, config)?,
            None => http_face::bind(address).await?,
        };
        listeners.push((listener, serving));
    }
    Ok(listeners)
}

/// Serves the HTTP face on the `listeners` `bind_http_face` bound; `None` without any.
fn start_http_face(
    config: &Config,
    context: &Arc<DaemonContext>,
    stopping: &watch::Receiver<bool>,
    listeners: Vec<(tokio::net::TcpListener, Face)>,
) -> Option<(Arc<HttpFace>, tokio::task::JoinHandle<()>)> {
    if listeners.is_empty() {
        return None;
    }
    let face = Arc::new(HttpFace::new(context.clone(), config, stopping.clone()));
    let mut tasks = Vec::new();
    for (listener, serving) in listeners {
        if let Ok(address) = listener.local_addr() {
            tracing::info!(
                %address,
                tokens = config.http.tokens.len(),
                ?serving,
                "the HTTP face is serving"
            );
        }
        tasks.push(tokio::spawn(http_face::serve(
            face.clone(),
            listener,
            serving,
        )));
    }
    let task = tokio::spawn(async move {
        for task in tasks {
            let _ = task.await;
        }
    });
    Some((face, task))
}

fn removed_policy(config: &Config) -> RemovedServers {
    if config.daemon.keep_removed {
        RemovedServers::KeepOffline
    } else {
        RemovedServers::Drop
    }
}

/// Serves the HTTP face on a TCP socket systemd passed; like a configured `listen`, an address
/// that is not loopback needs tokens.
fn adopt_tcp_listener(
    descriptor: std::os::fd::OwnedFd,
    config: &Config,
) -> anyhow::Result<tokio::net::TcpListener> {
    let listener = std::net::TcpListener::from(descriptor);
    let address = listener
        .local_addr()
        .context("while reading the address of the TCP socket systemd passed")?;
    if !address.ip().is_loopback() && config.http.tokens.is_empty() {
        anyhow::bail!(
            "systemd passed the TCP socket {address}, which is not loopback, and [http] tokens is empty: set tokens, or listen on loopback"
        );
    }
    listener
        .set_nonblocking(true)
        .context("while adopting the TCP socket systemd passed")?;
    tracing::info!(%address, "serving HTTP on the socket systemd passed, not binding [http] listen");
    tokio::net::TcpListener::from_std(listener)
        .context("while adopting the TCP socket systemd passed")
}

/// The daemon's loop once it serves: reloads on SIGHUP and on `daemon/reload` (one reload
/// answers every request waiting), until a `Shutdown` event, every sender gone, or the
/// database file lost; returns the loss, when that is why it ended.
async fn serve_controls(
    mut current: Config,
    controls: &mut mpsc::Receiver<ControlEvent>,
    reload_requests: &mut mpsc::Receiver<reload::ReloadRequest>,
    database_lost: &mut mpsc::Receiver<String>,
    reloader: &Reloader<'_>,
) -> Option<String> {
    loop {
        tokio::select! {
            control = controls.recv() => match control {
                Some(ControlEvent::Reload) => {
                    (current, _) = reload_and_notify(current, reloader).await;
                }
                // A closed channel (every sender gone) stops the daemon like a Shutdown event.
                Some(ControlEvent::Shutdown) | None => return None,
            },
            Some(first) = reload_requests.recv() => {
                let requests = reload::waiting_requests(first, reload_requests);
                let outcome;
                (current, outcome) = reload_and_notify(current, reloader).await;
                for request in requests {
                    let _ = request.send(outcome.clone());
                }
            }
            Some(problem) = database_lost.recv() => return Some(problem),
        }
    }
}

/// What a reload touches besides the configuration: the sessions, the status record, systemd
/// and the HTTP face.
struct Reloader<'a> {
    supervisor: &'a Supervisor,
    context: &'a DaemonContext,
    notifier: Option<&'a Notifier>,
    http: Option<&'a HttpFace>,
}

/// A reload (SIGHUP or `daemon/reload`), with systemd told it is reloading and ready again.
async fn reload_and_notify(current: Config, reloader: &Reloader<'_>) -> (Config, ReloadResult) {
    if let Some(notifier) = reloader.notifier {
        notifier.reloading();
    }
    let (next, outcome) = reload(current, reloader.supervisor, reloader.context).await;
    if let Some(face) = reloader.http {
        face.apply(&next);
    }
    if let Some(notifier) = reloader.notifier {
        notifier.ready(&current_summary(&reloader.context.store).await);
    }
    (next, outcome)
}

/// Reads the configuration file and applies it as a diff; an invalid file changes nothing.
async fn reload(
    current: Config,
    supervisor: &Supervisor,
    context: &DaemonContext,
) -> (Config, ReloadResult) {
    tracing::info!(config = %current.source.display(), "reloading the configuration");
    let loaded = match config::load(&current.source) {
        Ok(loaded) => {
            log_config_warnings(&loaded.warnings);
            loaded.config
        }
        Err(problems) => {
            log_config_warnings(&problems.warnings);
            // The same words as `serve` and `check` print, one log line each.
            for error in &problems.errors {
                let message = redact::scrub(&error.to_string()).into_owned();
                tracing::error!(
                    error = %message,
                    "the new configuration is invalid; the previous one stays in force"
                );
            }
            let message = redact::scrub(&problems.to_string()).into_owned();
            let mut record = lock(&context.config_load);
            record.error = Some(message.clone());
            record.error_at_ms = Some(now_ms());
            let outcome = ReloadResult {
                outcome: ReloadOutcome::Refused,
                error: Some(message),
                config_loaded_at: record.loaded_at_ms,
            };
            return (current, outcome);
        }
    };
    redact::remember_secrets(loaded.secrets());
    let mut next = loaded;
    // The open database and the listening socket cannot move under running clients.
    for (key, old, new) in [
        ("database", &current.daemon.database, &next.daemon.database),
        ("socket", &current.daemon.socket, &next.daemon.socket),
    ] {
        if old != new {
            tracing::warn!(
                key,
                in_force = %old.display(),
                configured = %new.display(),
                "daemon.{key} changes only at the next start"
            );
        }
    }
    if current.http != next.http {
        tracing::warn!(
            "the [http] table changes only at the next start (share = true applies now)"
        );
    }
    next.http = current.http.clone();
    if current.daemon.log_level != next.daemon.log_level {
        tracing::warn!("daemon.log_level changes only at the next start");
    }
    next.daemon.database = current.daemon.database.clone();
    next.daemon.socket = current.daemon.socket.clone();
    match supervisor
        .apply(
            &next.servers,
            removed_policy(&next),
            next.daemon.history_bounds,
        )
        .await
    {
        Ok(report) => tracing::info!(
            added = ?report.added,
            removed = ?report.removed,
            changed = ?report.changed,
            unchanged = report.unchanged.len(),
            "configuration reloaded"
        ),
        Err(error) => tracing::error!(
            %error,
            "configuration reloaded, but recording its servers in the database failed"
        ),
    }
    let mut record = lock(&context.config_load);
    record.loaded_at_ms = now_ms();
    record.error = None;
    record.error_at_ms = None;
    let outcome = ReloadResult {
        outcome: ReloadOutcome::Applied,
        error: None,
        config_loaded_at: record.loaded_at_ms,
    };
    drop(record);
    (next, outcome)
}

/// Logs what `config::load` found that the daemon runs with anyway, in `check`'s words.
pub fn log_config_warnings(warnings: &[config::ConfigError]) {
    for warning in warnings {
        let message = redact::scrub(&warning.to_string()).into_owned();
        tracing::warn!(warning = %message, "the configuration has a problem the daemon runs with");
    }
}

fn lock<T>(mutex: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}
