//! The second stage: the raw tables become one `Config`; this file does the `[daemon]` table
//! and hands each `[servers.NAME]` table to `server`.

use tracing_subscriber::EnvFilter;

use super::raw::{RawConfig, RawDaemon};
use super::source::SourceFile;
use super::values::{count, count_at_most, duration, optional_duration};
use super::SearchLimits;
use super::{
    default_max_concurrent_searches, server, Config, ConfigError, DaemonConfig, SocketLimits,
    SyncTimings, WalkLimits, DEFAULT_CONNECT_TIMEOUT, DEFAULT_DEBOUNCE, DEFAULT_HISTORY_MAX_AGE,
    DEFAULT_HISTORY_MAX_BYTES, DEFAULT_HISTORY_VERSIONS_PER_KEY, DEFAULT_KEEP_REMOVED,
    DEFAULT_MAX_CLIENTS, DEFAULT_MAX_ENTRY_BYTES, DEFAULT_MAX_ITEMS, DEFAULT_MAX_PAGES,
    DEFAULT_MAX_PAGES_WITHOUT_NEW, DEFAULT_MAX_TEMPLATE_BYTES, DEFAULT_MAX_TEMPLATE_EXPRESSIONS,
    DEFAULT_MIN_WALK_INTERVAL, DEFAULT_PING_INTERVAL, DEFAULT_POLL_FLOOR, DEFAULT_POLL_INTERVAL,
    DEFAULT_REQUEST_TIMEOUT, DEFAULT_RESYNC_INTERVAL, DEFAULT_SEARCH_TIMEOUT,
    DEFAULT_UPSTREAM_LOAD_WAIT,
};
use crate::paths;

/// Validates the whole file: each section's first problem is an error (`[daemon]`, each
/// `[servers.NAME]`, `[http]`, `[search]`), so one run names a problem in every table.
pub(super) fn validate(
    source: &SourceFile,
    raw: &RawConfig,
    lookup_env: &dyn Fn(&str) -> Option<String>,
) -> Result<Config, Vec<ConfigError>> {
    let mut errors = Vec::new();
    // A broken `[daemon]` table still lets the servers be checked, against the defaults.
    let daemon = daemon_config(source, &raw.daemon).unwrap_or_else(|error| {
        errors.push(error);
        daemon_config(source, &RawDaemon::default()).expect("the defaults validate")
    });
    let mut servers = Vec::new();
    for (name, table) in &raw.servers {
        match server::server_config(source, name, table, &daemon, lookup_env) {
            Ok(server) => servers.push(server),
            Err(error) => errors.push(error),
        }
    }
    let http = super::http::http_config(source, &raw.http, lookup_env)
        .map_err(|error| errors.push(error))
        .ok();
    let search = super::search::search_config(source, &raw.search)
        .map_err(|error| errors.push(error))
        .ok();
    let nats = super::nats::nats_config(source, &raw.nats)
        .map_err(|error| errors.push(error))
        .ok();
    // A followed bucket connects with the host's one NATS identity.
    if let Some(nats) = &nats {
        for server in &mut servers {
            if let super::Transport::Nats { credentials, .. } = &mut server.transport {
                credentials.clone_from(&nats.credentials);
            }
        }
    }
    match (http, search, nats) {
        (Some(http), Some(search), Some(nats)) if errors.is_empty() => Ok(Config {
            source: source.path.to_path_buf(),
            daemon,
            servers,
            http,
            search,
            nats,
        }),
        _ => Err(errors),
    }
}

/// The `[daemon]` table; its durations and limits are also every server's defaults.
fn daemon_config(source: &SourceFile, raw: &RawDaemon) -> Result<DaemonConfig, ConfigError> {
    Ok(DaemonConfig {
        database: raw
            .database
            .as_ref()
            .map(|value| source.resolve(value.get_ref()))
            .unwrap_or_else(paths::default_database),
        socket: raw
            .socket
            .as_ref()
            .map(|value| source.resolve(value.get_ref()))
            .unwrap_or_else(paths::default_socket),
        resync_interval: duration(
            source,
            &raw.resync_interval,
            "daemon.resync_interval",
            DEFAULT_RESYNC_INTERVAL,
        )?,
        request_timeout: duration(
            source,
            &raw.request_timeout,
            "daemon.request_timeout",
            DEFAULT_REQUEST_TIMEOUT,
        )?,
        connect_timeout: duration(
            source,
            &raw.connect_timeout,
            "daemon.connect_timeout",
            DEFAULT_CONNECT_TIMEOUT,
        )?,
        limits: walk_limits(source, raw)?,
        timings: sync_timings(source, raw)?,
        keep_removed: raw.keep_removed.unwrap_or(DEFAULT_KEEP_REMOVED),
        log_level: log_level(source, raw)?,
        socket_limits: socket_limits(source, raw)?,
        history_resources: raw.history.unwrap_or(false),
        history_bounds: history_bounds(source, raw)?,
    })
}

/// The `history_*` bounds of `[daemon]`.
fn history_bounds(
    source: &SourceFile,
    raw: &RawDaemon,
) -> Result<super::HistoryBounds, ConfigError> {
    let max_bytes = match &raw.history_max_bytes {
        None => DEFAULT_HISTORY_MAX_BYTES,
        Some(spanned) => super::values::parse_size(spanned.get_ref()).map_err(|message| {
            source.error(&spanned.span(), "daemon.history_max_bytes", message)
        })?,
    };
    Ok(super::HistoryBounds {
        versions_per_key: count(
            source,
            &raw.history_versions_per_key,
            "daemon.history_versions_per_key",
            DEFAULT_HISTORY_VERSIONS_PER_KEY,
        )?,
        max_age: duration(
            source,
            &raw.history_max_age,
            "daemon.history_max_age",
            DEFAULT_HISTORY_MAX_AGE,
        )?,
        max_bytes,
    })
}

fn socket_limits(source: &SourceFile, raw: &RawDaemon) -> Result<SocketLimits, ConfigError> {
    Ok(SocketLimits {
        search: SearchLimits {
            timeout: duration(
                source,
                &raw.search_timeout,
                "daemon.search_timeout",
                DEFAULT_SEARCH_TIMEOUT,
            )?,
            max_concurrent: count(
                source,
                &raw.max_concurrent_searches,
                "daemon.max_concurrent_searches",
                default_max_concurrent_searches(),
            )? as usize,
        },
        max_clients: count(
            source,
            &raw.max_clients,
            "daemon.max_clients",
            DEFAULT_MAX_CLIENTS,
        )? as usize,
    })
}

fn walk_limits(source: &SourceFile, raw: &RawDaemon) -> Result<WalkLimits, ConfigError> {
    Ok(WalkLimits {
        max_pages: count(
            source,
            &raw.max_pages,
            "daemon.max_pages",
            DEFAULT_MAX_PAGES,
        )?,
        max_items: count(
            source,
            &raw.max_items,
            "daemon.max_items",
            DEFAULT_MAX_ITEMS,
        )?,
        max_entry_bytes: count(
            source,
            &raw.max_entry_bytes,
            "daemon.max_entry_bytes",
            DEFAULT_MAX_ENTRY_BYTES,
        )?,
        max_pages_without_new: count(
            source,
            &raw.max_pages_without_new,
            "daemon.max_pages_without_new",
            DEFAULT_MAX_PAGES_WITHOUT_NEW,
        )?,
        max_template_bytes: count_at_most(
            source,
            &raw.max_template_bytes,
            "daemon.max_template_bytes",
            DEFAULT_MAX_TEMPLATE_BYTES,
            super::MAX_TEMPLATE_BYTES_CEILING as u64,
        )?,
        max_template_expressions: count_at_most(
            source,
            &raw.max_template_expressions,
            "daemon.max_template_expressions",
            DEFAULT_MAX_TEMPLATE_EXPRESSIONS,
            super::MAX_TEMPLATE_EXPRESSIONS_CEILING as u64,
        )?,
    })
}

fn sync_timings(source: &SourceFile, raw: &RawDaemon) -> Result<SyncTimings, ConfigError> {
    Ok(SyncTimings {
        poll_interval: duration(
            source,
            &raw.poll_interval,
            "daemon.poll_interval",
            DEFAULT_POLL_INTERVAL,
        )?,
        poll_floor: duration(
            source,
            &raw.poll_floor,
            "daemon.poll_floor",
            DEFAULT_POLL_FLOOR,
        )?,
        ping_interval: optional_duration(
            source,
            &raw.ping_interval,
            "daemon.ping_interval",
            Some(DEFAULT_PING_INTERVAL),
        )?,
        debounce: duration(source, &raw.debounce, "daemon.debounce", DEFAULT_DEBOUNCE)?,
        min_walk_interval: duration(
            source,
            &raw.min_walk_interval,
            "daemon.min_walk_interval",
            DEFAULT_MIN_WALK_INTERVAL,
        )?,
        upstream_load_wait: duration(
            source,
            &raw.upstream_load_wait,
            "daemon.upstream_load_wait",
            DEFAULT_UPSTREAM_LOAD_WAIT,
        )?,
    })
}

/// A tracing filter, checked now so that a typo is an error at start, not silence.
fn log_level(source: &SourceFile, raw: &RawDaemon) -> Result<Option<String>, ConfigError> {
    let Some(level) = &raw.log_level else {
        return Ok(None);
    };
    EnvFilter::try_new(level.get_ref()).map_err(|error| {
        source.error(
            &level.span(),
            "daemon.log_level",
            format!("not a log filter (examples: info, debug, mcp_mirror=debug,warn): {error}"),
        )
    })?;
    Ok(Some(level.get_ref().clone()))
}
