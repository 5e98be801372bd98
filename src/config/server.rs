//! One `[servers.NAME]` table into a `ServerConfig`: its name, its limits and timings (the
//! `[daemon]` values unless set), its era and protocol version; `transport` does the rest.

use toml::Spanned;

use super::raw::RawServer;
use super::server_table::ServerTable;
use super::source::SourceFile;
use super::values::{count, duration, optional_duration, optional_size};
use super::{
    transport, ConfigError, DaemonConfig, EraChoice, ServerConfig, SyncTimings, WalkLimits,
    DEFAULT_PRIORITY,
};

pub(super) fn server_config(
    source: &SourceFile,
    name: &Spanned<String>,
    table: &Spanned<RawServer>,
    daemon: &DaemonConfig,
    lookup_env: &dyn Fn(&str) -> Option<String>,
) -> Result<ServerConfig, ConfigError> {
    let server = ServerTable {
        key: format!("servers.{}", name.get_ref()),
        span: table.span(),
        raw: table.get_ref(),
    };
    check_name(source, name, &server)?;
    let raw = server.raw;
    Ok(ServerConfig {
        name: name.get_ref().clone(),
        transport: transport::transport(source, &server, lookup_env)?,
        priority: raw.priority.unwrap_or(DEFAULT_PRIORITY),
        resync_interval: duration(
            source,
            &raw.resync_interval,
            &server.key_of("resync_interval"),
            daemon.resync_interval,
        )?,
        request_timeout: duration(
            source,
            &raw.request_timeout,
            &server.key_of("request_timeout"),
            daemon.request_timeout,
        )?,
        connect_timeout: duration(
            source,
            &raw.connect_timeout,
            &server.key_of("connect_timeout"),
            daemon.connect_timeout,
        )?,
        limits: walk_limits(source, &server, daemon.limits)?,
        read_cache_bytes: optional_size(source, &raw.read_cache, &server.key_of("read_cache"))?,
        timings: sync_timings(source, &server, daemon.timings)?,
        era: era(source, &server)?,
        protocol_version: protocol_version(source, &server)?,
        mirror: mirror(source, &server)?,
        share: raw.share.unwrap_or(false),
        history: raw.history.unwrap_or(daemon.history_resources),
    })
}

/// Names appear in logs, in status and on the command line: keep them plain.
fn check_name(
    source: &SourceFile,
    name: &Spanned<String>,
    server: &ServerTable,
) -> Result<(), ConfigError> {
    let plain = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.');
    if name.get_ref().is_empty() || !name.get_ref().chars().all(plain) {
        return Err(source.error(
            &name.span(),
            &server.key,
            "a server name may use only letters, digits, '-', '_' and '.'",
        ));
    }
    Ok(())
}

/// Page and item caps; the cursor-loop guard is the daemon's alone.
fn walk_limits(
    source: &SourceFile,
    server: &ServerTable,
    defaults: WalkLimits,
) -> Result<WalkLimits, ConfigError> {
    Ok(WalkLimits {
        max_pages: count(
            source,
            &server.raw.max_pages,
            &server.key_of("max_pages"),
            defaults.max_pages,
        )?,
        max_items: count(
            source,
            &server.raw.max_items,
            &server.key_of("max_items"),
            defaults.max_items,
        )?,
        max_entry_bytes: count(
            source,
            &server.raw.max_entry_bytes,
            &server.key_of("max_entry_bytes"),
            defaults.max_entry_bytes,
        )?,
        ..defaults
    })
}

/// The poll and ping intervals; the poll floor and the debounce are the daemon's alone.
fn sync_timings(
    source: &SourceFile,
    server: &ServerTable,
    defaults: SyncTimings,
) -> Result<SyncTimings, ConfigError> {
    Ok(SyncTimings {
        poll_interval: duration(
            source,
            &server.raw.poll_interval,
            &server.key_of("poll_interval"),
            defaults.poll_interval,
        )?,
        ping_interval: optional_duration(
            source,
            &server.raw.ping_interval,
            &server.key_of("ping_interval"),
            defaults.ping_interval,
        )?,
        ..defaults
    })
}

fn era(source: &SourceFile, server: &ServerTable) -> Result<EraChoice, ConfigError> {
    let Some(era) = &server.raw.era else {
        return Ok(EraChoice::Auto);
    };
    match era.get_ref().as_str() {
        "auto" => Ok(EraChoice::Auto),
        "legacy" => Ok(EraChoice::Legacy),
        "modern" => Ok(EraChoice::Modern),
        other => Err(source.error(
            &era.span(),
            &server.key_of("era"),
            format!("`{other}` is not an era: use \"auto\", \"legacy\" or \"modern\""),
        )),
    }
}

/// `mirror = [...]`: the kinds to mirror, by capability name; `None` mirrors every declared kind.
fn mirror(
    source: &SourceFile,
    server: &ServerTable,
) -> Result<Option<Vec<crate::protocol::Kind>>, ConfigError> {
    let Some(mirror) = &server.raw.mirror else {
        return Ok(None);
    };
    let mut kinds = Vec::new();
    for name in mirror.get_ref() {
        let Some(kind) = crate::protocol::Kind::from_capability(name) else {
            return Err(source.error(
                &mirror.span(),
                &server.key_of("mirror"),
                format!(
                    "`{name}` is not a kind to mirror: use \"resources\", \"tools\" or \"prompts\""
                ),
            ));
        };
        if !kinds.contains(&kind) {
            kinds.push(kind);
        }
    }
    Ok(Some(kinds))
}

/// A version to insist on must be one the protocol engine speaks.
fn protocol_version(
    source: &SourceFile,
    server: &ServerTable,
) -> Result<Option<String>, ConfigError> {
    let Some(version) = &server.raw.protocol_version else {
        return Ok(None);
    };
    let wanted = version.get_ref().as_str();
    let known = crate::protocol::LEGACY_VERSIONS.contains(&wanted)
        || crate::protocol::MODERN_VERSIONS.contains(&wanted);
    if !known {
        return Err(source.error(
            &version.span(),
            &server.key_of("protocol_version"),
            format!(
                "unknown protocol version `{wanted}` (known: {}, {})",
                crate::protocol::MODERN_VERSIONS.join(", "),
                crate::protocol::LEGACY_VERSIONS.join(", ")
            ),
        ));
    }
    Ok(Some(wanted.to_string()))
}
