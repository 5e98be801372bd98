//! `run(config, shutdown)`: wires config, store, supervisor and socket together, and stops them in order.

use std::future::Future;
use std::sync::atomic::AtomicUsize;
use std::sync::Arc;
use std::time::Instant;

use anyhow::Context;
use tokio::sync::watch;

use crate::api::{self, ApiContext};
use crate::config::Config;
use crate::store::{ServerEntry, Store};
use crate::supervisor::Supervisor;

/// Runs the daemon until `shutdown` completes, then stops in a fixed order: stop accepting on
/// the socket, cancel walks and close sessions, close the store, remove the socket file.
pub async fn run(config: Config, shutdown: impl Future<Output = ()>) -> anyhow::Result<()> {
    let store =
        Store::open(&config.daemon.database).context("while opening the catalog database")?;
    let entries = config
        .servers
        .iter()
        .map(ServerEntry::from_config)
        .collect();
    store
        .sync_servers(entries)
        .await
        .context("while recording the configured servers")?;
    let listener = api::bind(&config.daemon.socket)?;
    let (stop, stopping) = watch::channel(false);
    let supervisor = Arc::new(Supervisor::start(&config.servers, &store));
    let context = Arc::new(ApiContext {
        store: store.clone(),
        supervisor: supervisor.clone(),
        socket_path: config.daemon.socket.clone(),
        config_path: config.source.clone(),
        started: Instant::now(),
        clients: AtomicUsize::new(0),
    });
    let api_task = tokio::spawn(api::serve(listener, context.clone(), stopping.clone()));
    tracing::info!(
        socket = %config.daemon.socket.display(),
        database = %config.daemon.database.display(),
        servers = config.servers.len(),
        "mcp-mirror is serving"
    );

    shutdown.await;
    tracing::info!("shutting down");
    let _ = stop.send(true);
    let _ = api_task.await;
    supervisor.shutdown().await;
    store.close().await;
    if let Err(error) = std::fs::remove_file(&config.daemon.socket) {
        tracing::debug!(%error, "could not remove the socket file");
    }
    tracing::info!("stopped");
    Ok(())
}
