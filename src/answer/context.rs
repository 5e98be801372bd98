//! What the answers that need the live daemon take: the store, the sessions, the search index
//! and its gate, and the daemon's own facts that `catalog/status` shows.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, AtomicUsize};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::protocol::ErrorObject;
use crate::search::gate::SearchGate;
use crate::search::SearchIndex;
use crate::store::{Reader, Store};
use crate::supervisor::Supervisor;

/// What the answers of the live daemon need (the socket and the HTTP face hold one).
pub struct DaemonContext {
    pub store: Store,
    pub supervisor: Arc<Supervisor>,
    pub socket_path: PathBuf,
    pub config_path: PathBuf,
    pub started: Instant,
    pub clients: AtomicUsize,
    /// When the configuration in force was loaded, and why the last reload was refused.
    pub config_load: std::sync::Mutex<ConfigLoad>,
    /// `daemon/reload` requests to the daemon's loop, each with where its outcome goes.
    pub reloads: tokio::sync::mpsc::Sender<crate::answer::reload::ReloadRequest>,
    /// The derived search index; `None` when it could not be opened (SQLite answers).
    pub search_index: Option<Arc<SearchIndex>>,
    /// The vectors of hybrid search; `None` without `[search] semantic_model`.
    #[cfg(feature = "semantic")]
    pub semantic: Option<Arc<crate::semantic::SemanticIndex>>,
    /// Admits `catalog/search` calls: a bounded number at once, a bounded queue, a deadline.
    pub search_gate: SearchGate,
    /// The most connections served at once; more are refused at accept.
    pub max_clients: usize,
    /// Connections refused at accept, and the log of refusals (once per interval).
    pub refused_clients: AtomicU64,
    pub refusal_log: Mutex<IntervalLog>,
}

/// How often a repeated condition (refused clients, failing accepts) is logged at most.
const REPEATED_LOG_INTERVAL: Duration = Duration::from_secs(10);
/// Logs a repeated event at most once per interval, with how many happened since the last line.
#[derive(Debug)]
pub struct IntervalLog {
    interval: Duration,
    last_logged: Option<Instant>,
    unlogged: u64,
}

impl IntervalLog {
    pub fn new(interval: Duration) -> IntervalLog {
        IntervalLog {
            interval,
            last_logged: None,
            unlogged: 0,
        }
    }

    /// Counts one event; `Some(count)` when it is time to log, with the events since the last line.
    pub fn record(&mut self) -> Option<u64> {
        self.unlogged += 1;
        let due = self
            .last_logged
            .map_or(true, |last| last.elapsed() >= self.interval);
        if !due {
            return None;
        }
        self.last_logged = Some(Instant::now());
        Some(std::mem::take(&mut self.unlogged))
    }
}

impl Default for IntervalLog {
    fn default() -> Self {
        IntervalLog::new(REPEATED_LOG_INTERVAL)
    }
}

/// The daemon's record of its configuration file, shown by `catalog/status`.
#[derive(Debug, Clone, Default)]
pub struct ConfigLoad {
    pub loaded_at_ms: i64,
    /// Set when the last reload was rejected (the previous configuration stays in force).
    pub error: Option<String>,
    pub error_at_ms: Option<i64>,
}

/// Runs an answer on a `Reader` from the store's pool, off the async threads.
pub(crate) async fn on_reader<T: Send + 'static>(
    context: &DaemonContext,
    answer: impl FnOnce(&Reader) -> Result<T, ErrorObject> + Send + 'static,
) -> Result<T, ErrorObject> {
    context
        .store
        .read(move |reader| Ok(answer(reader)))
        .await
        .map_err(super::internal)?
}

/// Runs an answer as `on_reader` does, in one read transaction, and returns with it the
/// catalog's generation read first in that transaction: the generation of every row the answer
/// holds (what an HTTP validator of the answer is made from).
pub(crate) async fn on_one_read<T: Send + 'static>(
    context: &DaemonContext,
    answer: impl FnOnce(&Reader) -> Result<T, ErrorObject> + Send + 'static,
) -> Result<(u64, T), ErrorObject> {
    let (generation, answered) = context
        .store
        .read(move |reader| reader.in_one_read(answer))
        .await
        .map_err(super::internal)?;
    Ok((generation, answered?))
}
