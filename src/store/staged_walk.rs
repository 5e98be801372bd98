//! A walk being staged (`StagedWalk`): its pages queued for the writer, at most a few in
//! flight, a first load's pages paced by the search index's room, and its commit of a whole
//! walk, of one kind of entries or of a followed upstream's delta.

use std::sync::Arc;

use tokio::sync::{mpsc, oneshot, OwnedSemaphorePermit, Semaphore};

use super::definitions::{EntryRow, EntrySwap};
use super::error::StoreError;
use super::follow::FollowCursor;
use super::rows::{ResourceRow, SwapOutcome, TemplateRow, WalkReport};
use super::writer::{self, Batch, DeltaOutcome, WriteOp};
use crate::protocol::Kind;

/// How many pages of one walk may wait for the writer before the walk waits too.
const PAGES_IN_FLIGHT: usize = 4;
/// How many pages of one walk's resources may wait for the writer and then for the search
/// index (which builds a large first load from its pages during the walk) before the walk
/// waits too: the index sees every page of a first load, and holds only that walk back.
const INDEX_PAGES_IN_FLIGHT: usize = 4;
/// The longest one walk waits for the search index in all (`INDEX_PAGES_IN_FLIGHT`). Past
/// it the walk no longer waits: the index takes the pages it has room for and reads the
/// others from the database after the commit (the search index's `prebuild`).
pub const FIRST_LOAD_INDEX_HOLD: std::time::Duration = std::time::Duration::from_secs(30);
/// A walk waits for the search index only once it has left this many rows without room
/// there: until then a page the index has no room for goes on without it, and the index reads
/// it from the database after the commit. So a first load is visible at the walk's own pace
/// and searchable by the index soon after: the read-back is shared by two threads
/// (`search::prebuild`), and a walk of 1,000,000 that reaches this lag is searchable a few
/// seconds after it is visible (BENCHMARKS.md, "searchable by the index"), while waiting for
/// the index from the first page held a 1,000,000 walk to the index's pace (visible after
/// 10.2 s against 6.4 s).
pub const FIRST_LOAD_INDEX_LAG_ROWS: u64 = 500_000;

/// A walk being staged; dropping it without `commit` discards what it staged.
pub struct StagedWalk {
    id: u64,
    server: String,
    writer: mpsc::UnboundedSender<WriteOp>,
    in_flight: Arc<Semaphore>,
    /// Room for the walk's resource pages on their way to the search index.
    index_room: Arc<Semaphore>,
    /// What the walk has left without the index, and waited for it, so far.
    index_held: std::sync::Mutex<IndexHeld>,
    /// How long it may (`FIRST_LOAD_INDEX_HOLD`).
    index_hold: std::time::Duration,
    /// A followed upstream's delta, not a walk (`WriteOp::Stage::delta`).
    delta: bool,
    finished: bool,
}

/// A walk's account with the search index: rows it staged without room there (the index
/// reads them after the commit), and how long it waited for room.
#[derive(Default)]
struct IndexHeld {
    rows_left: u64,
    waited: std::time::Duration,
}

impl StagedWalk {
    /// Queues a page of resources for staging; waits only when the writer is behind.
    pub async fn add_resources(&self, rows: Vec<ResourceRow>) -> Result<(), StoreError> {
        self.stage(Batch::Resources(rows)).await
    }

    pub async fn add_templates(&self, rows: Vec<TemplateRow>) -> Result<(), StoreError> {
        self.stage(Batch::Templates(rows)).await
    }

    /// Queues a page of tools or prompts (`kind`) for staging.
    pub async fn add_entries(&self, kind: Kind, rows: Vec<EntryRow>) -> Result<(), StoreError> {
        self.stage(Batch::Entries(kind, rows)).await
    }

    async fn stage(&self, batch: Batch) -> Result<(), StoreError> {
        let permit = self
            .in_flight
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| StoreError::WriterGone)?;
        let index_permit = match &batch {
            Batch::Resources(rows) => self.index_room(rows.len() as u64).await,
            Batch::Templates(_) | Batch::Entries(..) => None,
        };
        let operation = WriteOp::Stage {
            walk_id: self.id,
            server: self.server.clone(),
            batch,
            delta: self.delta,
            permit,
            index_permit,
        };
        self.writer
            .send(operation)
            .map_err(|_| StoreError::WriterGone)
    }

    /// Room for one more page (of `rows` rows) on its way to the search index: at once when
    /// there is some; else `None` while the walk has left fewer than
    /// `FIRST_LOAD_INDEX_LAG_ROWS` rows without the index (the page is staged all the same,
    /// and the index reads it after the commit); else after a wait, until the walk has waited
    /// `FIRST_LOAD_INDEX_HOLD` in all, and `None` past that.
    async fn index_room(&self, rows: u64) -> Option<OwnedSemaphorePermit> {
        if let Ok(permit) = self.index_room.clone().try_acquire_owned() {
            return Some(permit);
        }
        let left = {
            let mut held = self
                .index_held
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            if held.rows_left + rows <= FIRST_LOAD_INDEX_LAG_ROWS {
                held.rows_left += rows;
                return None;
            }
            self.index_hold.saturating_sub(held.waited)
        };
        if left.is_zero() {
            return None;
        }
        let started = std::time::Instant::now();
        let permit = tokio::time::timeout(left, self.index_room.clone().acquire_owned()).await;
        self.index_held
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .waited += started.elapsed();
        permit.ok().and_then(Result::ok)
    }

    /// Swaps the staged walk in as the server's snapshot, in one transaction.
    pub async fn commit(self, report: WalkReport) -> Result<SwapOutcome, StoreError> {
        self.finish(report).await
    }

    async fn finish(mut self, report: WalkReport) -> Result<SwapOutcome, StoreError> {
        self.finished = true;
        let (reply, answer) = oneshot::channel();
        self.writer
            .send(WriteOp::Commit {
                walk_id: self.id,
                server: self.server.clone(),
                report,
                reply,
            })
            .map_err(|_| StoreError::WriterGone)?;
        answer.await.map_err(|_| StoreError::WriterGone)?
    }

    /// Swaps the staged walk of tools or prompts in as the server's snapshot of `kind`, in
    /// one transaction.
    pub async fn commit_entries(mut self, kind: Kind) -> Result<EntrySwap, StoreError> {
        self.finished = true;
        let (reply, answer) = oneshot::channel();
        self.writer
            .send(WriteOp::CommitEntries {
                walk_id: self.id,
                server: self.server.clone(),
                kind,
                reply,
            })
            .map_err(|_| StoreError::WriterGone)?;
        answer.await.map_err(|_| StoreError::WriterGone)?
    }
}

impl StagedWalk {
    /// Applies the staged rows as a delta of a followed upstream: they are added or changed,
    /// `removed` go, the rest of the snapshot stays; of the URI templates in `templates` (when
    /// any changed), the staged ones are their new text and the others go. The cursor moves in
    /// the same transaction.
    pub async fn commit_delta(
        mut self,
        removed: Vec<String>,
        templates: Option<Vec<String>>,
        entries: Vec<(Kind, StagedWalk, Vec<String>)>,
        cursor: FollowCursor,
    ) -> Result<DeltaOutcome, StoreError> {
        self.finished = true;
        let entries = entries
            .into_iter()
            .map(|(kind, mut walk, touched)| {
                // The delta's commit discards their staging.
                walk.finished = true;
                writer::EntryDelta {
                    kind,
                    walk_id: walk.id,
                    touched,
                }
            })
            .collect();
        let delta = writer::Delta {
            removed,
            templates,
            entries,
            cursor,
        };
        let (reply, answer) = oneshot::channel();
        self.writer
            .send(WriteOp::CommitDelta {
                walk_id: self.id,
                server: self.server.clone(),
                delta,
                reply,
            })
            .map_err(|_| StoreError::WriterGone)?;
        answer.await.map_err(|_| StoreError::WriterGone)?
    }
}

impl StagedWalk {
    /// A walk of `server` numbered `id`, staging through `writer`, that waits at most
    /// `index_hold` in all for the search index; a followed upstream's `delta` when true.
    pub(super) fn begin(
        id: u64,
        server: &str,
        writer: mpsc::UnboundedSender<WriteOp>,
        index_hold: std::time::Duration,
        delta: bool,
    ) -> StagedWalk {
        StagedWalk {
            id,
            server: server.to_string(),
            writer,
            in_flight: Arc::new(Semaphore::new(PAGES_IN_FLIGHT)),
            index_room: Arc::new(Semaphore::new(INDEX_PAGES_IN_FLIGHT)),
            index_held: std::sync::Mutex::new(IndexHeld::default()),
            index_hold,
            delta,
            finished: false,
        }
    }
}

impl Drop for StagedWalk {
    fn drop(&mut self) {
        if !self.finished {
            let _ = self.writer.send(WriteOp::Abort { walk_id: self.id });
        }
    }
}
