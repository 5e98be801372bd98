//! The servers' rows: a reload's configuration applied as a diff (`sync_servers`) and a
//! session's state and hello recorded (`update_server`).

use rusqlite::Transaction;

use super::*;

/// Records the configured servers; returns one event per dropped server that had resources.
pub(super) fn sync_servers(
    connection: &mut Connection,
    sync: &ServerSync,
) -> Result<Vec<CatalogChanged>, StoreError> {
    let mut dropped = Vec::new();
    let transaction = connection.transaction()?;
    write_configured(&transaction, sync)?;
    let configured: Vec<&str> = sync
        .configured
        .iter()
        .map(|server| server.name.as_str())
        .collect();
    let stale: Vec<(i64, String)> = transaction
        .prepare("SELECT id, name FROM servers")?
        .query_map([], |row| {
            Ok((row.get::<_, i64>(0)?, row.get::<_, String>(1)?))
        })?
        .collect::<Result<Vec<_>, _>>()?
        .into_iter()
        .filter(|(_, name)| !configured.contains(&name.as_str()))
        .collect();
    for (id, name) in stale {
        if sync.removed == RemovedServers::KeepOffline {
            let updated = transaction.execute(
                "UPDATE servers SET state = ?2, stale = 1, retry_at = NULL
                 WHERE id = ?1 AND state != ?2",
                params![id, ServerState::Offline],
            )?;
            if updated > 0 {
                tracing::info!(server = %name, "kept the snapshot of a server no longer configured, marked offline");
            }
            continue;
        }
        let removed = drop_server(&transaction, id, &name)?;
        if removed > 0 {
            dropped.push(CatalogChanged {
                server: name,
                kind: Kind::Resource,
                added: 0,
                removed,
                changed: 0,
                latest_seq: 0,
            });
        }
    }
    if !dropped.is_empty() {
        let latest_seq = prune_changes(&transaction)?;
        for event in &mut dropped {
            event.latest_seq = latest_seq;
        }
    }
    // Priorities decide each URI's winner and a server's row decides whether its entries are
    // listed: a reload moves the generation whatever it changed (reloads are rare).
    advance_generation(&transaction)?;
    transaction.commit()?;
    Ok(dropped)
}

/// The configured servers' rows: a server the reload touched starts anew, an untouched one
/// keeps the state its session reported; then the history settings and the read cache.
fn write_configured(transaction: &Transaction<'_>, sync: &ServerSync) -> Result<(), StoreError> {
    let servers = &sync.configured;
    let mut upsert = transaction.prepare_cached(
        "INSERT INTO servers (name, priority, transport, state, read_cache_bytes)
         VALUES (?1, ?2, ?3, ?5, ?4)
         ON CONFLICT (name) DO UPDATE SET priority = excluded.priority, transport = excluded.transport,
             state = excluded.state, retry_at = NULL, read_cache_bytes = excluded.read_cache_bytes",
    )?;
    // An untouched server's session carries on, so its row keeps the state it reported.
    let mut touch_up = transaction.prepare_cached(
        "UPDATE servers SET priority = ?2, transport = ?3, read_cache_bytes = ?4 WHERE name = ?1",
    )?;
    for server in servers {
        let read_cache_bytes = server
            .read_cache_bytes
            .map(|bytes| bytes.min(i64::MAX as u64) as i64);
        let arguments = params![
            server.name,
            server.priority,
            server.transport,
            read_cache_bytes
        ];
        if sync.untouched.contains(&server.name) {
            touch_up.execute(arguments)?;
        } else {
            let starting = params![
                server.name,
                server.priority,
                server.transport,
                read_cache_bytes,
                ServerState::Starting
            ];
            upsert.execute(starting)?;
        }
    }
    let mut history =
        transaction.prepare_cached("UPDATE servers SET history_resources = ?2 WHERE name = ?1")?;
    for server in servers {
        history.execute(params![server.name, server.history])?;
    }
    super::history::write_bounds(transaction, &sync.history_bounds)?;
    // A cache turned off in the configuration frees its space.
    transaction.execute(
        "DELETE FROM read_cache WHERE server_id IN
             (SELECT id FROM servers WHERE read_cache_bytes IS NULL)",
        [],
    )?;
    Ok(())
}

/// Drops a server no longer configured with its snapshot: the feed names its resources (up
/// to `CHANGES_PER_SWAP`, then a `truncated` row), the full-text indexes forget its rows.
/// Returns how many resources it had.
fn drop_server(transaction: &Transaction<'_>, id: i64, name: &str) -> Result<u64, StoreError> {
    let now = now_ms();
    let removed: i64 = transaction.query_row(
        "SELECT count(*) FROM resources WHERE server_id = ?1",
        [id],
        |row| row.get(0),
    )?;
    let recorded = transaction.execute(
        "INSERT INTO changes (at, server, kind, uri)
         SELECT ?1, ?2, ?5, uri FROM resources WHERE server_id = ?3 LIMIT ?4",
        params![now, name, id, CHANGES_PER_SWAP as i64, ChangeKind::Removed],
    )? as u64;
    record_truncated(transaction, now, name, removed as u64, recorded)?;
    transaction.execute(
        &format!(
            "INSERT INTO resources_fts (resources_fts, rowid, uri, name, title, description)
             SELECT 'delete', r.id, r.uri, r.name, r.title, r.description FROM resources r
             WHERE r.server_id = ?1 AND {INDEXED}"
        ),
        [id],
    )?;
    // Tools and prompts go with the server (a cascade); their index rows must too.
    transaction.execute(
        "DELETE FROM entries_fts WHERE rowid IN (SELECT id FROM entries WHERE server_id = ?1)",
        [id],
    )?;
    transaction.execute("DELETE FROM servers WHERE id = ?1", [id])?;
    crate::store::scopes::forget_scopes(transaction, name)?;
    tracing::info!(server = %name, "dropped the snapshot of a server no longer configured");
    Ok(removed as u64)
}

pub(super) fn update_server(
    connection: &Connection,
    server: &str,
    update: &ServerUpdate,
) -> Result<(), StoreError> {
    let now = now_ms();
    match update {
        ServerUpdate::Connecting => connection.execute(
            "UPDATE servers SET state = ?2, retry_at = NULL WHERE name = ?1",
            params![server, ServerState::Connecting],
        )?,
        ServerUpdate::Connected {
            protocol_version,
            capabilities,
            server_info,
        } => connection.execute(
            "UPDATE servers SET state = ?6, protocol_version = ?2, capabilities = ?3,
                 server_info = ?4, connected_at = ?5, retry_at = NULL WHERE name = ?1",
            params![
                server,
                protocol_version,
                capabilities.to_string(),
                server_info.to_string(),
                now,
                ServerState::Connected
            ],
        )?,
        ServerUpdate::NoResources => connection.execute(
            "UPDATE servers SET state = ?2, stale = 0, last_error = NULL WHERE name = ?1",
            params![server, ServerState::NoResources],
        )?,
        ServerUpdate::Walking => connection.execute(
            "UPDATE servers SET state = ?2 WHERE name = ?1",
            params![server, ServerState::Walking],
        )?,
        ServerUpdate::Synced { walked } => connection.execute(
            "UPDATE servers SET state = ?2, stale = 0, last_error = NULL, last_error_at = NULL,
                 walks_ok = walks_ok + ?3 WHERE name = ?1",
            params![server, ServerState::Synced, i64::from(*walked)],
        )?,
        ServerUpdate::WalkFailed { error } => connection.execute(
            "UPDATE servers SET state = ?4, stale = 1, last_error = ?2, last_error_at = ?3,
                 walks_failed = walks_failed + 1 WHERE name = ?1",
            params![server, error, now, ServerState::Failed],
        )?,
        ServerUpdate::Held { reason } => connection.execute(
            "UPDATE servers SET state = ?4, stale = 1, last_error = ?2, last_error_at = ?3
                 WHERE name = ?1",
            params![server, reason, now, ServerState::Synced],
        )?,
        ServerUpdate::Reconnecting { error } => connection.execute(
            "UPDATE servers SET state = ?4, stale = 1, last_error = ?2, last_error_at = ?3
                 WHERE name = ?1",
            params![server, error, now, ServerState::Reconnecting],
        )?,
        ServerUpdate::BackingOff { error, retry_at_ms } => connection.execute(
            "UPDATE servers SET state = ?5, stale = 1, last_error = ?2, last_error_at = ?3,
                 retry_at = ?4 WHERE name = ?1",
            params![server, error, now, retry_at_ms, ServerState::BackingOff],
        )?,
        ServerUpdate::Stopped => connection.execute(
            "UPDATE servers SET state = ?2, retry_at = NULL WHERE name = ?1",
            params![server, ServerState::Stopped],
        )?,
    };
    Ok(())
}
