//! `catalog/status`: the daemon's and every server's state, from the store, the live sessions and the socket's limits.

use std::sync::atomic::Ordering;

use super::{internal, DaemonContext, View};
use crate::protocol::{self as wire, ErrorObject, Kind};

pub(crate) async fn status(context: &DaemonContext) -> Result<wire::StatusResult, ErrorObject> {
    let (servers, change_seq, read_cache_bytes, merged_resources, kind_counts) = context
        .store
        .read(|reader| {
            Ok((
                reader.status()?,
                reader.latest_change_seq()?,
                reader.read_cache_bytes()?,
                reader.merged_resource_count()?,
                reader.kind_counts()?,
            ))
        })
        .await
        .map_err(internal)?;
    let mut live = context.supervisor.live_status().await;
    let database_bytes = std::fs::metadata(context.store.path())
        .map(|metadata| metadata.len())
        .ok();
    let resources: u64 = servers.iter().map(|server| server.resources).sum();
    let config_load = context
        .config_load
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .clone();
    let daemon = wire::DaemonStatus {
        version: env!("CARGO_PKG_VERSION").into(),
        pid: std::process::id(),
        uptime_ms: context.started.elapsed().as_millis() as u64,
        database: Some(context.store.path().to_path_buf()),
        database_bytes,
        socket: Some(context.socket_path.clone()),
        config: Some(context.config_path.clone()),
        clients: context.clients.load(Ordering::Relaxed),
        resources,
        merged_resources: Some(merged_resources),
        change_seq,
        read_cache_bytes,
        config_loaded_at: config_load.loaded_at_ms,
        config_error: config_load.error,
        config_error_at: config_load.error_at_ms,
        database_error: context.store.database_error(),
        socket_limits: socket_activity(context),
        search_index: context.search_index.as_ref().map(|index| index.status()),
        #[cfg(feature = "semantic")]
        vectors: context.semantic.as_ref().map(|semantic| semantic.status()),
        #[cfg(not(feature = "semantic"))]
        vectors: None,
        wal: Some(context.store.wal_status()),
    };
    let mut servers: Vec<wire::ServerStatus> = servers
        .into_iter()
        .map(|mut server| {
            // The row as stored, with what its session knows.
            server.live = live.remove(&server.name);
            // The bucket revision the snapshot reflects is the cursor committed with it, read
            // here with the row: it never lags a catalog the client has just read, as the
            // follower's own note of it (set just after the commit returns) can.
            let fleet = server.live.as_mut().and_then(|live| live.fleet.as_mut());
            if let (Some(fleet), Some(seq)) = (fleet, server.follow_seq) {
                fleet.revision = u64::try_from(seq).unwrap_or(0);
            }
            server
        })
        .collect();
    crate::answer::entries::add_kind_status(kind_counts, &mut servers);
    Ok(wire::StatusResult { daemon, servers })
}

fn socket_activity(context: &DaemonContext) -> wire::SocketActivity {
    let searches = context.search_gate.activity();
    wire::SocketActivity {
        max_clients: context.max_clients,
        clients_refused: context.refused_clients.load(Ordering::Relaxed),
        max_concurrent_searches: searches.max_concurrent,
        search_timeout_ms: context.search_gate.limits().timeout.as_millis() as u64,
        searches_running: searches.running,
        searches_waiting: searches.waiting,
        searches_peak: searches.peak_running,
        searches_refused: searches.refused_busy,
        searches_timed_out: searches.timed_out,
        searches_in_place: searches.in_place,
    }
}

/// What a restricted view may know of the status: the servers it names, of each only the
/// kinds it sees (a kind it does not see counts nothing), and totals over those alone; not
/// where the daemon's files are, nor what the daemon says about them (the database's and the
/// configuration's errors name paths), nor, when it leaves servers out, the search index's
/// count over every server.
pub(crate) fn restrict(status: &mut wire::StatusResult, view: &View) {
    if view.is_owner() {
        return;
    }
    let daemon = &mut status.daemon;
    (daemon.database, daemon.socket, daemon.config) = (None, None, None);
    (daemon.database_bytes, daemon.database_error) = (None, None);
    (daemon.config_error, daemon.config_error_at) = (None, None);
    daemon.wal = None;
    let configured = status.servers.len();
    status
        .servers
        .retain(|server| view.sees_server(&server.name));
    // The index's size counts every server's entries: a view without some servers is not
    // told it.
    if status.servers.len() < configured {
        if let Some(index) = status.daemon.search_index.as_mut() {
            index.documents = 0;
        }
    }
    for server in &mut status.servers {
        let name = server.name.clone();
        if !view.sees(&name, Kind::Resource) {
            server.resources = 0;
        }
        if !view.sees(&name, Kind::Template) {
            server.templates = 0;
        }
        server.kinds.retain(|kind, _| view.sees(&name, *kind));
    }
    status.daemon.resources = status.servers.iter().map(|server| server.resources).sum();
    // The merged count spans every server; it is not derivable from the visible ones.
    status.daemon.merged_resources = None;
}
