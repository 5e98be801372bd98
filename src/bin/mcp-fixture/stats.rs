//! Request and stream counters, rewritten atomically to the `--stats` file after every change.

use std::path::PathBuf;
use std::sync::{Mutex, PoisonError};

use serde::Serialize;
use tracing::warn;

/// Counters summed over every endpoint of the process, serialized as-is into the stats file.
#[derive(Serialize, Clone)]
pub struct Counters {
    /// The process id, so a test can tell a restarted server from the old one.
    pub pid: u32,
    pub initialize: u64,
    pub discover: u64,
    /// Live sessions: HTTP sessions (Streamable HTTP and legacy SSE) or 1 for an initialized stdio process.
    pub sessions: u64,
    pub sessions_created: u64,
    /// `resources/list` requests without a cursor.
    pub walks: u64,
    /// All `resources/list` requests.
    pub pages: u64,
    pub template_lists: u64,
    pub reads: u64,
    pub get_streams_opened: u64,
    pub get_streams_open: u64,
    pub listens_opened: u64,
    pub listens_open: u64,
    pub legacy_streams_opened: u64,
    pub legacy_streams_open: u64,
    /// `notifications/resources/list_changed` messages written to any channel.
    pub list_changed_sent: u64,
    pub server_pings_sent: u64,
    pub client_ping_answers: u64,
    pub catalog_version: u64,
    /// `server/discover` requests refused with -32022 by the `refuse_discovers` fault.
    pub refused_discovers: u64,
    /// Unknown methods answered `{}` by the `bare_result_for_unknown_methods` fault.
    pub bare_results: u64,
    /// Requests left unanswered by the `unanswered_methods` fault.
    pub unanswered: u64,
    /// When (ms since the Unix epoch) the last `TIMES_KEPT` GET requests to `/mcp` arrived,
    /// refused ones included, and listens opened, and 503 answers went out.
    pub get_requests_at_ms: Vec<u64>,
    pub listens_opened_at_ms: Vec<u64>,
    pub unavailable_at_ms: Vec<u64>,
}

/// How many times each `*_at_ms` list keeps.
const TIMES_KEPT: usize = 256;

/// Appends the current time to one of the `*_at_ms` lists, keeping the newest `TIMES_KEPT`.
pub fn record_now(times: &mut Vec<u64>) {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_millis() as u64);
    if times.len() == TIMES_KEPT {
        times.remove(0);
    }
    times.push(now);
}

/// The counters and where to write them.
pub struct Stats {
    path: Option<PathBuf>,
    counters: Mutex<Counters>,
}

impl Stats {
    pub fn new(path: Option<PathBuf>, catalog_version: u64) -> Self {
        let counters = Counters {
            pid: std::process::id(),
            initialize: 0,
            discover: 0,
            sessions: 0,
            sessions_created: 0,
            walks: 0,
            pages: 0,
            template_lists: 0,
            reads: 0,
            get_streams_opened: 0,
            get_streams_open: 0,
            listens_opened: 0,
            listens_open: 0,
            legacy_streams_opened: 0,
            legacy_streams_open: 0,
            list_changed_sent: 0,
            server_pings_sent: 0,
            client_ping_answers: 0,
            catalog_version,
            refused_discovers: 0,
            bare_results: 0,
            unanswered: 0,
            get_requests_at_ms: Vec::new(),
            listens_opened_at_ms: Vec::new(),
            unavailable_at_ms: Vec::new(),
        };
        Self {
            path,
            counters: Mutex::new(counters),
        }
    }

    /// Applies `change` and rewrites the file before returning, so a test that sees an
    /// answer also sees the counters that answer bumped.
    pub fn update(&self, change: impl FnOnce(&mut Counters)) {
        // The lock is held during the write so that concurrent writers cannot
        // interleave on the tmp file or rename an older snapshot over a newer one.
        let mut counters = self.counters.lock().unwrap_or_else(PoisonError::into_inner);
        change(&mut counters);
        let Some(path) = &self.path else {
            return;
        };
        let mut tmp_path = path.clone().into_os_string();
        tmp_path.push(".tmp");
        let written = serde_json::to_vec(&*counters)
            .map_err(anyhow::Error::from)
            .and_then(|bytes| Ok(std::fs::write(&tmp_path, bytes)?))
            .and_then(|()| Ok(std::fs::rename(&tmp_path, path)?));
        if let Err(error) = written {
            warn!(path = %path.display(), %error, "cannot write stats file");
        }
    }
}
