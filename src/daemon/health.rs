//! The daemon's health: the probe through its own accept loop, and the loop that pings the
//! writer and the socket for the watchdog, checks the socket file it bound (`SocketFile`), and
//! logs a status line.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::UnixStream;
use tokio::sync::{mpsc, watch};

use super::socket_file::SocketFile;
use crate::protocol::ServerState;
use crate::protocol::ServerStatus;
use crate::store::Store;
use crate::systemd::Notifier;

/// How long a self-probe of the socket may take before we call the daemon stuck.
const PROBE_BOUND: Duration = Duration::from_secs(5);

/// How often `STATUS=` is refreshed when systemd set no watchdog.
const STATUS_INTERVAL: Duration = Duration::from_secs(10);

/// One JSON-RPC `ping` through the socket's accept loop on a connection the daemon makes to
/// itself (one end of a socket pair handed to the loop): proves the loop and dispatch are
/// alive. It never opens the socket's file: a socket unit's file belongs to root with mode
/// 0600, which a `DynamicUser` daemon may not connect to (a readiness check through the path
/// failed there with EACCES and the service restarted in a loop).
pub(super) async fn probe_socket(probes: &mpsc::Sender<UnixStream>) -> anyhow::Result<()> {
    let exchange = async {
        let (mut stream, served) =
            UnixStream::pair().context("cannot create a socket pair to probe the socket")?;
        probes
            .send(served)
            .await
            .map_err(|_| anyhow::anyhow!("the socket's accept loop has stopped"))?;
        stream
            .write_all(b"{\"jsonrpc\":\"2.0\",\"id\":0,\"method\":\"ping\"}\n")
            .await?;
        let mut line = String::new();
        BufReader::new(stream).read_line(&mut line).await?;
        anyhow::ensure!(
            line.contains("\"result\""),
            "the socket answered ping with {line:?}"
        );
        Ok(())
    };
    tokio::time::timeout(PROBE_BOUND, exchange)
        .await
        .map_err(|_| anyhow::anyhow!("no answer to ping within {PROBE_BOUND:?}"))?
}

/// Keeps `STATUS=` current and pets the watchdog at half its interval, but only after a round
/// trip through the store's writer thread and the socket's accept loop, and while the socket
/// file we bound is still there: a daemon stuck in either, or unreachable by its clients, stops
/// petting, and systemd restarts it (which binds the file again).
pub(super) async fn health_loop(
    notifier: Arc<Notifier>,
    watchdog: Option<Duration>,
    store: Store,
    probes: mpsc::Sender<UnixStream>,
    socket_file: SocketFile,
    mut stopping: watch::Receiver<bool>,
) {
    let period = watchdog
        .map(|interval| interval / 2)
        .unwrap_or(STATUS_INTERVAL);
    let mut ticker = tokio::time::interval(period);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last_status = String::new();
    loop {
        tokio::select! {
            _ = ticker.tick() => {}
            _ = stopping.changed() => return,
        }
        let check = async {
            if let Some(problem) = store.check_database_file() {
                anyhow::bail!(problem);
            }
            store.ping_writer().await?;
            probe_socket(&probes).await?;
            if let Some(problem) = socket_file.lost() {
                anyhow::bail!(problem);
            }
            Ok::<_, anyhow::Error>(summarize(&store.read(|reader| reader.status()).await?))
        };
        match tokio::time::timeout(period, check).await {
            Ok(Ok(summary)) => {
                if watchdog.is_some() {
                    notifier.watchdog();
                }
                if summary != last_status {
                    notifier.status(&summary);
                    last_status = summary;
                }
            }
            Ok(Err(error)) => {
                tracing::warn!(error = %format!("{error:#}"), "health check failed; not petting the watchdog")
            }
            Err(_) => {
                tracing::warn!("health check took longer than {period:?}; not petting the watchdog")
            }
        }
    }
}

/// The summary sent with `READY=1`.
pub(super) async fn current_summary(store: &Store) -> String {
    match store.read(|reader| reader.status()).await {
        Ok(servers) => summarize(&servers),
        Err(error) => format!("serving; cannot read the server states: {error}"),
    }
}

/// "12 servers, 11 in sync, 48,213 resources": what `systemctl status` shows.
pub(crate) fn summarize(servers: &[ServerStatus]) -> String {
    let offline = servers
        .iter()
        .filter(|server| server.state == ServerState::Offline)
        .count();
    let configured = servers.len() - offline;
    let in_sync = servers
        .iter()
        .filter(|server| {
            server.state != ServerState::Offline && !server.stale && server.snapshot_at_ms.is_some()
        })
        .count();
    let resources: u64 = servers.iter().map(|server| server.resources).sum();
    let mut summary = format!(
        "{configured} server{}, {in_sync} in sync, {} resources",
        if configured == 1 { "" } else { "s" },
        thousands(resources)
    );
    if offline > 0 {
        summary.push_str(&format!(", {offline} removed but kept offline"));
    }
    summary
}

pub(super) fn thousands(number: u64) -> String {
    let digits = number.to_string();
    let mut grouped = String::with_capacity(digits.len() + digits.len() / 3);
    for (index, digit) in digits.chars().enumerate() {
        if index > 0 && (digits.len() - index) % 3 == 0 {
            grouped.push(',');
        }
        grouped.push(digit);
    }
    grouped
}

#[cfg(test)]
mod tests {
    use super::thousands;

    #[test]
    fn groups_thousands() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(48_213), "48,213");
        assert_eq!(thousands(1_000_000), "1,000,000");
    }
}
