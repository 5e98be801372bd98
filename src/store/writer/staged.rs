//! What a walk has staged so far (`StagedCounts`): the snapshot it is compared with, its
//! counts, and, for a first load, the pending load its rows went to (`PendingLoad`).

use std::sync::atomic::AtomicU64;
use std::time::Instant;

use rusqlite::Connection;

use super::sql::server_id;
use super::wal::{FIRST_LOAD_DEFER_MAX, FIRST_LOAD_IDLE};
use crate::store::{StoreError, WalkReport};

/// A first load in flight: its rows are in `resources` under `id`, a negative id no `servers`
/// row has (`pending_loads`), so no reader sees them until `promote` gives the server that id.
#[derive(Debug, Default, Clone)]
pub(super) struct PendingLoad {
    pub(super) id: i64,
    /// The ids its rows took, in order, as ranges (both ends included): each page's rows take
    /// consecutive ids, and pages that follow each other without another swap between them
    /// make one range.
    pub(super) ranges: Vec<(i64, i64)>,
    /// Pages staged without room in the search index's hand-off (the walk waited
    /// `FIRST_LOAD_INDEX_HOLD` for it): the index reads them after the commit.
    pub(super) unsent_pages: u64,
}

/// A staged walk of resources to commit: what the swap and a first load's promotion both
/// read (`actor::commit_walk` picks which).
#[derive(Clone, Copy)]
pub(super) struct WalkToCommit<'a> {
    pub(super) walk_id: u64,
    pub(super) counts: &'a StagedCounts,
    pub(super) server: &'a str,
    pub(super) report: &'a WalkReport,
    /// Raised when the commit leaves rows to the full-text backlog.
    pub(super) full_text_behind: &'a AtomicU64,
}

/// What one walk has staged, and the snapshot it was compared with.
#[derive(Debug, Default, Clone)]
pub(super) struct StagedCounts {
    /// The server's id when staging began: light rows stand for "as in this snapshot".
    pub(super) snapshot: Option<i64>,
    /// The snapshot had no resources then (a first load): nothing to look up. Never a delta.
    pub(super) snapshot_empty: bool,
    /// Distinct resources staged.
    pub(super) staged: u64,
    /// Staged resources the snapshot holds (unchanged or changed).
    pub(super) matched: u64,
    /// A first load of a recorded server stages straight into `resources`, as a pending load.
    pub(super) pending: Option<PendingLoad>,
    /// When pages of rows came: a first load defers checkpoints only while it makes progress.
    pub(super) progress: Progress,
}

/// When a walk staged its first and its last page of rows (`loading` in the writer).
#[derive(Debug, Default, Clone)]
pub(super) struct Progress {
    first: Option<Instant>,
    last: Option<Instant>,
}

impl Progress {
    /// A page of `rows` rows staged now (an empty page is no progress).
    pub(super) fn note(&mut self, rows: usize) {
        if rows == 0 {
            return;
        }
        let now = Instant::now();
        self.first.get_or_insert(now);
        self.last = Some(now);
    }

    /// A page of rows came within `FIRST_LOAD_IDLE`, and the first within `FIRST_LOAD_DEFER_MAX`.
    pub(super) fn recent(&self, now: Instant) -> bool {
        match (self.first, self.last) {
            (Some(first), Some(last)) => {
                now.saturating_duration_since(last) < FIRST_LOAD_IDLE
                    && now.saturating_duration_since(first) < FIRST_LOAD_DEFER_MAX
            }
            _ => false,
        }
    }
}

impl StagedCounts {
    /// The counts of a walk of `server` about to stage its first page of resources. A walk
    /// onto an empty snapshot is a first load (`pending`), with nothing to look up. A `delta`
    /// never is: its rows are noted against the snapshot they change (`staging_added`), however
    /// empty, since its commit applies only what was noted (`apply_delta`).
    pub(super) fn against(
        connection: &Connection,
        server: &str,
        delta: bool,
    ) -> Result<Self, StoreError> {
        let snapshot = server_id(connection, server)?;
        let snapshot_empty = !delta
            && match snapshot {
                Some(server_id) => !connection.query_row(
                    "SELECT EXISTS (SELECT 1 FROM resources WHERE server_id = ?1)",
                    [server_id],
                    |row| row.get::<_, bool>(0),
                )?,
                None => true,
            };
        let pending = match snapshot {
            Some(_) if snapshot_empty => {
                connection.execute("INSERT INTO pending_loads (server) VALUES (?1)", [server])?;
                Some(PendingLoad {
                    id: -connection.last_insert_rowid(),
                    ranges: Vec::new(),
                    unsent_pages: 0,
                })
            }
            _ => None,
        };
        Ok(StagedCounts {
            snapshot,
            snapshot_empty,
            pending,
            ..StagedCounts::default()
        })
    }
}
