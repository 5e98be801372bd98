//! The writer as an actor: `Writer` owns the connection and the state of every staged walk;
//! `run` takes the next operation (`next_op`, which works off the backlogs while none waits),
//! `handle`s it with one function per write operation, and `announce` tells of every commit.

use std::collections::HashMap;
use std::ops::ControlFlow;
use std::time::{Duration, Instant};

use super::index_tee::{self, PendingPage};
use super::reload::Reload;
use super::staged::WalkToCommit;
use super::*;

/// What the writer knows of one staged walk.
#[derive(Default)]
struct StagedWalk {
    /// What the walk has staged of resources, and against which snapshot; `None` until its
    /// first page of resources.
    counts: Option<StagedCounts>,
    /// The first error of a page of the walk: its later pages are skipped and its commit
    /// reports it.
    failure: Option<String>,
}

/// What one commit changed, as the writer tells it (`Writer::announce`).
struct Announcement {
    /// One broadcast per server and kind the commit touched.
    events: Vec<CatalogChanged>,
    /// Whether what a search sees may have changed (the resources, or their listings' order):
    /// the catalog's version moves on.
    catalog_changed: bool,
}

/// The writer thread's state: the connection, the operations' queue, what the writer tells of
/// commits, and the state of every walk in flight.
pub(in crate::store) struct Writer {
    connection: Connection,
    channels: Channels,
    /// Every walk that staged a page (or failed to) and has not committed or aborted yet.
    walks: HashMap<u64, StagedWalk>,
    /// The full-text backlog has ids left to index between operations.
    indexing: bool,
    /// Big re-walks whose new snapshot is copied a batch at a time, between operations and
    /// after each one (`reload.rs`), in the order their walks committed.
    reloads: VecDeque<Reload>,
    /// Snapshots no server has to delete (a first load's pending id, a reload's old id), a
    /// batch at a time between operations.
    discarding: VecDeque<i64>,
    wal: WriteAheadLog,
    /// When the writer last wrote: the full-text indexes' segments are merged once it has
    /// been idle for `MERGE_QUIET` since (`full_text::merge_step`); `None` once nothing is
    /// left to merge.
    wrote_at: Option<Instant>,
    /// Merge steps the last full-text backlog batch owes before the next (`pay_merge_owed`).
    merges_owed: u32,
    /// The writer's clock for waiting on the next operation with a deadline; without one
    /// (it could not be made) merges start as soon as no operation waits.
    clock: Option<tokio::runtime::Runtime>,
}

/// The full-text indexes are merged once the writer has written nothing for this long: the
/// swaps of a burst (a follower's deltas, a fleet's followers all applying one change) commit
/// without a merge in front of them, and the merging waits for the quiet after.
const MERGE_QUIET: Duration = Duration::from_secs(1);

/// Merge steps after each batch of the full-text backlog: a batch of 5,000 rows writes a
/// segment of some hundred pages. Measured with FTS5 alone, 1,000,000 rows in batches of
/// 5,000: with FTS5's automerge 15.1 s, the longest batch 214 ms; with no merging until a
/// level reaches 16 segments, 12.0 s but one batch of 1.7 s (that crisis merge); with up to 4
/// steps of 64 pages after each batch, 13.5 s, the longest batch and its steps 216 ms.
const MERGE_STEPS_PER_BATCH: u32 = 4;

/// How often the writer looks whether the search index's read-back of a first load is done,
/// while the full-text backlog waits for it (operations are taken at once meanwhile).
const READ_BACK_POLL: Duration = Duration::from_millis(50);

/// What waiting for the next operation ended with.
enum Waited {
    Operation(WriteOp),
    /// Every sender is gone.
    Closed,
    /// Nothing came before the deadline.
    Quiet,
}

/// Where the writer reads operations from and what it tells of its commits.
pub(in crate::store) struct Channels {
    pub(in crate::store) operations: mpsc::UnboundedReceiver<WriteOp>,
    pub(in crate::store) changes: broadcast::Sender<CatalogChanged>,
    pub(in crate::store) catalog_version: Arc<AtomicU64>,
    /// How many ids the full-text backlog still lists (the answer notes of SQLite searches
    /// read it).
    pub(in crate::store) full_text_behind: Arc<AtomicU64>,
    pub(in crate::store) load_feed: Arc<std::sync::OnceLock<crate::store::LoadFeed>>,
    pub(in crate::store) wal_watch: Arc<WalWatch>,
    /// Whether the search index reads a first load's pages back: the full-text backlog and
    /// the checkpointer wait meanwhile (`ReadBackWatch`).
    pub(in crate::store) read_back: Arc<crate::store::ReadBackWatch>,
}

impl Writer {
    /// Prepares the staging tables and picks up what the last run left: a full-text backlog
    /// (a crash, or a stop before it was done) and first loads it left unfinished.
    pub(in crate::store) fn new(connection: Connection, channels: Channels) -> Writer {
        if let Err(error) = connection.execute_batch(STAGING_SCHEMA) {
            tracing::error!(%error, "cannot create staging tables; the store cannot accept walks");
        }
        if let Err(error) = super::history::register_digest(&connection) {
            tracing::error!(%error, "cannot register history_digest; swaps of servers keeping a resource history will fail");
        }
        let behind = channels.full_text_behind.load(Ordering::Acquire);
        if behind > 0 {
            tracing::info!(
                ids = behind,
                "resuming the full-text indexing of a large swap's rows"
            );
        }
        let discarding: VecDeque<i64> = leftover_snapshots(&connection)
            .unwrap_or_else(|error| {
                tracing::warn!(%error, "cannot list the snapshots left by the last run");
                Vec::new()
            })
            .into();
        if !discarding.is_empty() {
            tracing::info!(
                snapshots = discarding.len(),
                "deleting the rows of unfinished first loads and replaced snapshots the last run left"
            );
        }
        let wal = WriteAheadLog::watched(&connection, WAL_LIMIT_BYTES, channels.wal_watch.clone());
        let clock = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .inspect_err(|error| {
                tracing::warn!(%error, "the writer has no clock: full-text merges start as soon as no operation waits");
            })
            .ok();
        Writer {
            connection,
            channels,
            walks: HashMap::new(),
            reloads: VecDeque::new(),
            indexing: behind > 0,
            discarding,
            wal,
            wrote_at: Some(Instant::now()),
            merges_owed: 0,
            clock,
        }
    }

    /// Handles operations until `Close` or until every sender is gone. Between operations,
    /// when none is waiting, it works off the backlogs (`next_op`), so a large swap's indexing
    /// never holds up another operation for more than one batch.
    pub(in crate::store) fn run(mut self) {
        while let Some(operation) = self.next_op() {
            // Pages of one walk share a transaction; anything else (a page of a walk that
            // failed too: its pages are skipped) commits it first.
            if !self.continues_batch(&operation) {
                self.commit_batch();
            }
            if let ControlFlow::Break(reply) = self.handle(operation) {
                return self.close(reply);
            }
            // A reload goes on after every operation too: a steady stream of them never
            // starves it.
            if !self.reloads.is_empty() {
                self.reload_step();
            }
            self.after_write();
            self.wrote_at = Some(Instant::now());
        }
    }

    /// The next operation; while none waits and a backlog is left (full-text indexing, first
    /// loads to discard), works it off a batch at a time, so a large swap's indexing never
    /// holds up an operation for more than one batch. While the search index reads a first
    /// load's pages back (`ReadBackWatch`), the full-text backlog and merges wait.
    fn next_op(&mut self) -> Option<WriteOp> {
        loop {
            let full_text_waits = self.full_text_waits();
            if (!self.indexing || full_text_waits)
                && self.discarding.is_empty()
                && self.reloads.is_empty()
            {
                let deadline = match (full_text_waits, self.wrote_at) {
                    (true, _) => Instant::now() + READ_BACK_POLL,
                    (false, Some(wrote_at)) => wrote_at + MERGE_QUIET,
                    (false, None) => return self.channels.operations.blocking_recv(),
                };
                match self.wait_for_op(deadline) {
                    Waited::Operation(operation) => return Some(operation),
                    Waited::Closed => return None,
                    Waited::Quiet if full_text_waits => {
                        // Keeps the checkpointer's deferral fresh: the writer writes nothing
                        // meanwhile to renew it.
                        self.after_write();
                        continue;
                    }
                    Waited::Quiet => {
                        self.merge_full_text();
                        continue;
                    }
                }
            }
            match self.channels.operations.try_recv() {
                Ok(operation) => return Some(operation),
                Err(TryRecvError::Empty) => self.work_off_backlog(),
                Err(TryRecvError::Disconnected) => return None,
            }
        }
    }

    /// Whether the full-text backlog and merges wait for the search index's read-back of a
    /// first load. Not without a clock: the writer would spin instead of waiting.
    fn full_text_waits(&self) -> bool {
        self.clock.is_some() && self.channels.read_back.pausing()
    }

    /// The next operation, if one comes by `deadline`.
    fn wait_for_op(&mut self, deadline: Instant) -> Waited {
        let operations = &mut self.channels.operations;
        match operations.try_recv() {
            Ok(operation) => return Waited::Operation(operation),
            Err(TryRecvError::Disconnected) => return Waited::Closed,
            Err(TryRecvError::Empty) => {}
        }
        let left = deadline.saturating_duration_since(Instant::now());
        let Some(clock) = self.clock.as_ref().filter(|_| !left.is_zero()) else {
            return Waited::Quiet;
        };
        // The timer is made inside `block_on`: it needs the clock's context.
        match clock.block_on(async { tokio::time::timeout(left, operations.recv()).await }) {
            Ok(Some(operation)) => Waited::Operation(operation),
            Ok(None) => Waited::Closed,
            Err(_) => Waited::Quiet,
        }
    }

    /// One step of merging the full-text indexes (`full_text::merge_step`); once none is left,
    /// the writer waits for operations alone until its next write.
    fn merge_full_text(&mut self) {
        self.commit_batch();
        match super::full_text::merge_step(&self.connection) {
            Ok(true) => {}
            Ok(false) => self.wrote_at = None,
            Err(error) => {
                tracing::warn!(%error, "merging the full-text index failed; the next write tries again");
                self.wrote_at = None;
            }
        }
        self.after_write();
    }

    /// One batch of the backlogs: a reload's copy first, then a snapshot to discard, else the
    /// full-text index.
    fn work_off_backlog(&mut self) {
        self.commit_batch();
        if !self.reloads.is_empty() {
            self.reload_step();
        } else if let Some(&id) = self.discarding.front() {
            match discard_batch(&mut self.connection, id) {
                Ok(false) => {}
                Ok(true) => {
                    self.discarding.pop_front();
                }
                Err(error) => {
                    // The next start tries again.
                    tracing::warn!(%error, "deleting the rows of a snapshot no server has failed");
                    self.discarding.pop_front();
                }
            }
        } else if !self.pay_merge_owed() {
            self.indexing =
                index_full_text_batch(&mut self.connection, &self.channels.full_text_behind);
            self.merges_owed = MERGE_STEPS_PER_BATCH;
        }
        self.after_write();
        self.wrote_at = Some(Instant::now());
    }

    /// One merge step of those the last full-text batch owes, if any is owed and there is
    /// something to merge: the backlog's batches merge their segments as they go, in steps
    /// between operations, and not all at once when a level reaches FTS5's crisis size.
    fn pay_merge_owed(&mut self) -> bool {
        if self.merges_owed == 0 {
            return false;
        }
        self.merges_owed -= 1;
        match super::full_text::merge_step(&self.connection) {
            Ok(true) => true,
            Ok(false) => {
                self.merges_owed = 0;
                false
            }
            Err(error) => {
                tracing::warn!(%error, "merging the full-text index failed; the next write tries again");
                self.merges_owed = 0;
                false
            }
        }
    }

    /// Carries out one operation; `Close` breaks with its reply, which `close` answers once
    /// the connection is closed.
    fn handle(&mut self, operation: WriteOp) -> ControlFlow<oneshot::Sender<()>> {
        // A server's resources change only after its reload is in: a later walk or delta
        // never lands under a reload that would then overwrite it.
        if let WriteOp::Commit { server, .. } | WriteOp::CommitDelta { server, .. } = &operation {
            self.finish_reloads_of(server);
        }
        match operation {
            WriteOp::SyncServers { sync, reply } => self.sync_servers(&sync, reply),
            WriteOp::Ping { reply } => {
                let _ = reply.send(Ok(()));
            }
            WriteOp::UpdateServer {
                server,
                update,
                reply,
            } => {
                let _ = reply.send(update_server(&self.connection, &server, &update));
            }
            WriteOp::Stage {
                walk_id,
                server,
                batch,
                delta,
                permit,
                index_permit,
            } => {
                self.stage(walk_id, &server, batch, delta, index_permit);
                drop(permit);
            }
            WriteOp::Commit {
                walk_id,
                server,
                report,
                reply,
            } => self.commit(walk_id, &server, &report, reply),
            WriteOp::CommitDelta {
                walk_id,
                server,
                delta,
                reply,
            } => self.commit_delta(walk_id, &server, &delta, reply),
            WriteOp::SetFollowCursor {
                server,
                cursor,
                reply,
            } => {
                let outcome = delta::set_follow_cursor(&self.connection, &server, cursor.as_ref());
                let _ = reply.send(outcome);
            }
            WriteOp::Abort { walk_id } => self.abort(walk_id),
            WriteOp::CommitEntries {
                walk_id,
                server,
                kind,
                reply,
            } => self.commit_entries(walk_id, &server, kind, reply),
            WriteOp::RecordScopes {
                server,
                scopes,
                update,
                reply,
            } => {
                let outcome = crate::store::scopes::record_scopes(
                    &mut self.connection,
                    &server,
                    &scopes,
                    update,
                );
                let _ = reply.send(outcome);
            }
            WriteOp::Accept { server, reply } => {
                let outcome =
                    crate::store::definitions::accept(&mut self.connection, server.as_deref());
                let _ = reply.send(outcome);
            }
            WriteOp::CacheContents {
                server,
                uri,
                contents,
                limit_bytes,
            } => {
                let outcome =
                    cache_contents(&mut self.connection, &server, &uri, &contents, limit_bytes);
                if let Err(error) = outcome {
                    tracing::warn!(server, %error, "cannot cache read contents");
                }
            }
            WriteOp::Close { reply } => return ControlFlow::Break(reply),
        }
        ControlFlow::Continue(())
    }

    fn sync_servers(&mut self, sync: &ServerSync, reply: Reply<()>) {
        let (events, outcome) = match sync_servers(&mut self.connection, sync) {
            Ok(dropped) => (dropped, Ok(())),
            Err(error) => (Vec::new(), Err(error)),
        };
        // Priorities may have changed which listing of a URI a search shows, whatever came of it.
        self.announce(Announcement {
            events,
            catalog_changed: true,
        });
        let _ = reply.send(outcome);
    }

    /// Stages one page of a walk; after one failed page the walk cannot commit, so its later
    /// pages are skipped. A first load's page then goes to the search index, its rows' texts
    /// moved, not copied.
    fn stage(
        &mut self,
        walk_id: u64,
        server: &str,
        batch: Batch,
        delta: bool,
        index_permit: Option<OwnedSemaphorePermit>,
    ) {
        if self
            .walks
            .get(&walk_id)
            .is_some_and(|walk| walk.failure.is_some())
        {
            return;
        }
        let tee_without_room = index_permit.is_none() && self.channels.load_feed.get().is_some();
        match self.stage_page(walk_id, server, &batch, delta, tee_without_room) {
            Err(error) => {
                tracing::warn!(server, walk_id, %error, "staging a page failed");
                self.walks.entry(walk_id).or_default().failure = Some(error.to_string());
            }
            Ok(Some(page)) => {
                // A first load's page goes to the search index too, once staged.
                if let (Batch::Resources(rows), Some(feed), Some(room)) =
                    (batch, self.channels.load_feed.get(), index_permit)
                {
                    index_tee::send_page(feed, page, server, rows, room);
                }
            }
            Ok(None) => {}
        }
    }

    /// Writes one page into staging (a first load's resources straight into `resources`);
    /// returns where a first load's page went, for the search index.
    fn stage_page(
        &mut self,
        walk_id: u64,
        server: &str,
        batch: &Batch,
        delta: bool,
        tee_without_room: bool,
    ) -> Result<Option<PendingPage>, StoreError> {
        let walk = self.walks.entry(walk_id).or_default();
        if let (Batch::Resources(_), None) = (batch, &walk.counts) {
            // A walk's counts, and a first load's pending id, are taken outside any batch: the
            // id's `pending_loads` row must outlive a batch rolled back, or the id could be
            // handed out again while this walk still holds it.
            self.wal.commit_batch(&self.connection)?;
            walk.counts = Some(StagedCounts::against(&self.connection, server, delta)?);
        }
        self.wal
            .stage_page(&self.connection, walk_id, batch.bytes())?;
        match (batch, walk.counts.as_mut()) {
            (Batch::Resources(rows), Some(counts)) => {
                counts.progress.note(rows.len());
                let before = counts.staged;
                stage_resources(&mut self.connection, walk_id, counts, rows)?;
                let inserted = (counts.staged - before) as i64;
                Ok(counts.pending.as_mut().and_then(|pending| {
                    index_tee::note_page(pending, server, inserted, tee_without_room)
                }))
            }
            (Batch::Resources(_), None) => Ok(None),
            (Batch::Templates(rows), _) => {
                stage_templates(&mut self.connection, walk_id, rows).map(|()| None)
            }
            (Batch::Entries(kind, rows), _) => {
                stage_entries(&mut self.connection, walk_id, server, *kind, rows).map(|()| None)
            }
        }
    }

    /// Swaps a staged walk of resources in (a first load is promoted).
    fn commit(
        &mut self,
        walk_id: u64,
        server: &str,
        report: &WalkReport,
        reply: Reply<SwapOutcome>,
    ) {
        let walk = self.walks.remove(&walk_id).unwrap_or_default();
        let counts = walk.counts.unwrap_or_default();
        // The swap reads its diff before it writes (`WalWatch::restart_gate`).
        let restarts_held = self.wal.hold_restarts();
        let outcome = match walk.failure {
            Some(error) => Err(staging_failed(&error)),
            None => commit_walk(
                &mut self.connection,
                &WalkToCommit {
                    walk_id,
                    counts: &counts,
                    server,
                    report,
                    full_text_behind: &self.channels.full_text_behind,
                },
            ),
        };
        drop(restarts_held);
        let outcome = match outcome {
            Ok(Committed::Reload(diff)) => {
                let begun = Reload::begin(
                    &self.connection,
                    walk_id,
                    server,
                    report,
                    reply,
                    diff,
                    counts.staged,
                );
                match begun {
                    // Its staging stays until the promotion: the copy reads it.
                    Ok(reload) => return self.reloads.push_back(reload),
                    Err((error, reply)) => {
                        let _ = reply.send(Err(error));
                        return discard_staging(&self.connection, walk_id);
                    }
                }
            }
            Ok(Committed::Swapped(swap, latest_seq)) => Ok((swap, latest_seq)),
            Err(error) => Err(error),
        };
        if let (Err(_), Some(pending)) = (&outcome, &counts.pending) {
            self.discarding.push_back(pending.id);
        }
        if let Some(feed) = self.channels.load_feed.get() {
            index_tee::send_end(feed, &counts, outcome.is_ok(), &self.channels.read_back);
        }
        self.note_backlog();
        // Subscribers and the caller hear first: dropping a million staged rows takes a while,
        // and the snapshot is already committed (or the walk already failed).
        let outcome = outcome.map(|(swap, latest_seq)| {
            self.announce(resources_swapped(server, &swap, latest_seq));
            swap
        });
        let _ = reply.send(outcome);
        discard_staging(&self.connection, walk_id);
    }

    /// One batch of the first reload's copy; once every row is copied, its promotion.
    fn reload_step(&mut self) {
        self.commit_batch();
        let Some(reload) = self.reloads.front_mut() else {
            return;
        };
        let outcome = match reload.copy_batch(&mut self.connection) {
            Ok(false) => return,
            Ok(true) => reload.promote(&mut self.connection, &self.channels.full_text_behind),
            Err(error) => Err(error),
        };
        if let Some(reload) = self.reloads.pop_front() {
            self.finish_reload(reload, outcome);
        }
    }

    /// Copies and promotes every reload of `server` now (and those queued before them).
    fn finish_reloads_of(&mut self, server: &str) {
        while self.reloads.iter().any(|reload| reload.server == server) {
            self.reload_step();
        }
    }

    /// Answers a reload's walk: a promoted reload's old rows and a failed one's copies are
    /// deleted in the background, and its staging is dropped.
    fn finish_reload(&mut self, reload: Reload, outcome: Result<(SwapOutcome, i64), StoreError>) {
        let left = match &outcome {
            Ok(_) => reload.diff.server_id,
            Err(error) => {
                tracing::warn!(server = reload.server, %error, "a reload failed");
                reload.pending.id
            }
        };
        self.discarding.push_back(left);
        self.note_backlog();
        let outcome = outcome.map(|(swap, latest_seq)| {
            self.announce(resources_swapped(&reload.server, &swap, latest_seq));
            swap
        });
        let _ = reload.reply.send(outcome);
        discard_staging(&self.connection, reload.walk_id);
    }

    /// Applies a followed upstream's delta with the walks of tools and prompts it names.
    fn commit_delta(
        &mut self,
        walk_id: u64,
        server: &str,
        delta: &Delta,
        reply: Reply<crate::store::DeltaOutcome>,
    ) {
        let walk_ids: Vec<u64> = std::iter::once(walk_id)
            .chain(delta.entries.iter().map(|entries| entries.walk_id))
            .collect();
        let mut walks: Vec<StagedWalk> = walk_ids
            .iter()
            .map(|id| self.walks.remove(id).unwrap_or_default())
            .collect();
        let counts = walks[0].counts.take().unwrap_or_default();
        let outcome = match walks.into_iter().find_map(|walk| walk.failure) {
            Some(error) => Err(staging_failed(&error)),
            None => delta::apply_delta(
                &mut self.connection,
                walk_id,
                &counts,
                server,
                delta,
                &self.channels.full_text_behind,
            ),
        };
        self.note_backlog();
        let outcome = outcome.map(|(outcome, latest_seq)| {
            let mut announcement = resources_swapped(server, &outcome.swap, latest_seq);
            let touched = outcome
                .entries
                .iter()
                .filter(|(_, swap)| swap.touched() > 0);
            for (kind, swap) in touched {
                announcement
                    .events
                    .push(entries_swapped(server, *kind, swap, latest_seq));
            }
            self.announce(announcement);
            outcome
        });
        let _ = reply.send(outcome);
        for id in walk_ids {
            discard_staging(&self.connection, id);
        }
    }

    /// Swaps a staged walk of tools or prompts in as the server's snapshot of `kind`.
    fn commit_entries(
        &mut self,
        walk_id: u64,
        server: &str,
        kind: Kind,
        reply: Reply<crate::store::EntrySwap>,
    ) {
        let walk = self.walks.remove(&walk_id).unwrap_or_default();
        let outcome = match walk.failure {
            Some(error) => Err(staging_failed(&error)),
            None => swap_entries(&mut self.connection, walk_id, server, kind),
        };
        let outcome = outcome.map(|(swap, latest_seq)| {
            if swap.touched() > 0 {
                self.announce(Announcement {
                    events: vec![entries_swapped(server, kind, &swap, latest_seq)],
                    catalog_changed: false,
                });
            }
            swap
        });
        let _ = reply.send(outcome);
        discard_staging(&self.connection, walk_id);
    }

    /// Forgets a walk that will not commit; a first load's rows are discarded in the background.
    fn abort(&mut self, walk_id: u64) {
        let walk = self.walks.remove(&walk_id).unwrap_or_default();
        if let Some(pending) = walk.counts.and_then(|counts| counts.pending) {
            self.discarding.push_back(pending.id);
        }
        discard_staging(&self.connection, walk_id);
    }

    /// Tells of one commit: the one place a commit is announced (the catalog's version, the
    /// `CatalogChanged` broadcast; whatever else hears of commits belongs here too). A broadcast
    /// never blocks: a slow subscriber lags, the writer goes on; nobody listening is fine, the
    /// feed in the database has it all.
    fn announce(&self, announcement: Announcement) {
        if announcement.catalog_changed {
            self.channels
                .catalog_version
                .fetch_add(1, Ordering::Release);
        }
        for event in announcement.events {
            let _ = self.channels.changes.send(event);
        }
    }

    /// A swap that left rows to the full-text backlog starts (or extends) the indexing.
    fn note_backlog(&mut self) {
        self.indexing |= self.channels.full_text_behind.load(Ordering::Acquire) > 0;
    }

    /// The log's checkpoints after a write (`WriteAheadLog::after_write`): deferred while a
    /// first load makes progress, and while the search index reads one's pages back
    /// (`ReadBackWatch`, for at most `READ_BACK_PAUSE_MAX`).
    fn after_write(&mut self) {
        let loading = self.loading();
        let reading_back = self.channels.read_back.pausing();
        self.wal
            .after_write(&self.connection, loading, reading_back);
    }

    /// Whether a first load is in flight and making progress: the log is not checkpointed
    /// meanwhile (`wal.rs`). One that stalls, or runs past `FIRST_LOAD_DEFER_MAX`, does not
    /// count: whatever a server does, the log is checkpointed within `FIRST_LOAD_IDLE` of a
    /// stall.
    fn loading(&self) -> bool {
        let now = std::time::Instant::now();
        self.walks
            .values()
            .filter_map(|walk| walk.counts.as_ref())
            .any(|counts| counts.pending.is_some() && counts.progress.recent(now))
    }

    /// Commits the writer's open batch of pages; when that fails, their walk fails with it.
    fn commit_batch(&mut self) {
        let walk = self.wal.batch_walk();
        if let (Err(error), Some(walk_id)) = (self.wal.commit_batch(&self.connection), walk) {
            tracing::warn!(walk_id, %error, "committing staged pages failed");
            let walk = self.walks.entry(walk_id).or_default();
            walk.failure.get_or_insert_with(|| error.to_string());
        }
    }

    /// Whether `operation` is the next page of the walk whose pages the open batch holds.
    fn continues_batch(&self, operation: &WriteOp) -> bool {
        matches!(operation, WriteOp::Stage { walk_id, .. }
            if Some(*walk_id) == self.wal.batch_walk()
                && !self.walks.get(walk_id).is_some_and(|walk| walk.failure.is_some()))
    }

    /// Optimizes, checkpoints the log, closes the connection and only then answers.
    fn close(self, reply: oneshot::Sender<()>) {
        let Writer {
            connection,
            channels,
            mut wal,
            reloads,
            ..
        } = self;
        // Their copies stay under pending ids, which the next start deletes.
        for reload in reloads {
            let _ = reload.reply.send(Err(StoreError::Walk(format!(
                "the store closed before the reload of {} was in; the next start walks it again",
                reload.server
            ))));
        }
        if let Err(error) = connection.execute_batch("PRAGMA optimize;") {
            tracing::debug!(%error, "PRAGMA optimize failed at close");
        }
        wal.close(&connection);
        drop(connection);
        let _ = reply.send(());
        drop(channels);
    }
}

/// The error a commit of a walk whose staging failed answers with.
fn staging_failed(error: &str) -> StoreError {
    StoreError::Walk(format!("staging failed: {error}"))
}

/// What a swap of resources (or templates) tells, when it changed anything.
fn resources_swapped(server: &str, swap: &SwapOutcome, latest_seq: i64) -> Announcement {
    let touched = swap.added + swap.removed + swap.changed + swap.templates_touched > 0;
    let events = touched.then(|| CatalogChanged {
        server: server.to_string(),
        kind: Kind::Resource,
        added: swap.added,
        removed: swap.removed,
        changed: swap.changed,
        latest_seq,
    });
    Announcement {
        events: events.into_iter().collect(),
        catalog_changed: touched,
    }
}

/// The broadcast of a swap of one kind of tools or prompts.
fn entries_swapped(
    server: &str,
    kind: Kind,
    swap: &crate::store::EntrySwap,
    latest_seq: i64,
) -> CatalogChanged {
    CatalogChanged {
        server: server.to_string(),
        kind,
        added: swap.added,
        removed: swap.removed,
        changed: swap.changed,
        latest_seq,
    }
}

/// Commits a staged walk: a first load, staged straight into `resources`, is promoted; any
/// other walk is swapped in by its diff.
pub(super) fn commit_walk(
    connection: &mut Connection,
    commit: &WalkToCommit<'_>,
) -> Result<Committed, StoreError> {
    match &commit.counts.pending {
        Some(pending) => promote(connection, commit, pending)
            .map(|(swap, latest_seq)| Committed::Swapped(swap, latest_seq)),
        None => swap(connection, commit),
    }
}
