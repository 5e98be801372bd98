//! What the writer puts into the write-ahead log and when the log is copied back: consecutive
//! pages of one walk share a transaction, and checkpoints wait for a quiet moment.
//!
//! A first load of 100,000 resources writes about 100 MB of WAL. With SQLite's automatic
//! checkpoint (every 1,000 pages, on the committing thread) the writer also copied all of it
//! into the database while the walk ran: a quarter of the first sync's wall time, on the
//! walk's critical path. Now the writer's connection never checkpoints by itself. A
//! checkpointer thread with its own connection copies the log when the writer has no first
//! load making progress (or once the log is half its limit), and the writer waits for a
//! checkpoint only when the log reaches `WAL_LIMIT_BYTES`.
//!
//! Outside a first load the log stays near `WAL_RESTART_BYTES`: SQLite reuses the log from its
//! start only when every frame was copied back and no reader still reads an older snapshot, and
//! readers that overlap without a gap (searches, large pages, the search index keeper) never
//! leave such a moment to a passive checkpoint. So once the log is past `WAL_RESTART_BYTES`
//! the checkpointer asks for a `RESTART`: it waits (at most `RESTART_BUSY`, holding commits
//! back meanwhile) for the readers of older snapshots to finish, while new readers read the
//! database file, and the next commit starts the log over.

use std::cell::Cell;
use std::path::PathBuf;
use std::sync::mpsc::{sync_channel, Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rusqlite::Connection;

use crate::store::StoreError;

/// Pages of one walk share one transaction up to this much row text. A commit rewrites the
/// last, partly filled page of the table and of every index, so a commit per page of 100
/// resources wrote half as much WAL again as the rows themselves; a batch much larger than
/// SQLite's page cache (2 MiB by default) spills to the log mid-transaction and writes pages
/// twice. Measured at 100,000 resources, pages of 100: a commit per page 0.62 s, batches of
/// 1,000 rows (about 400 KB) 0.52 s, 5,000 rows 0.59 s.
pub(super) const STAGE_BATCH_BYTES: usize = 384 << 10;

/// The write-ahead log grows to at most about this size. A first load defers checkpoints until
/// it is committed; at half this size the checkpointer copies alongside it, and at this size
/// the writer waits for a checkpoint that restarts the log (`after_write`). A first load of
/// 1,000,000 resources writes about 1.1 GB of log: with a limit of 1 GiB its first sync took
/// 6.4 s (copying alongside from 512 MiB), with 2 GiB 5.2-5.6 s.
pub(super) const WAL_LIMIT_BYTES: i64 = 2 << 30;

/// The WAL file is truncated back to this size when it restarts after a large load.
const WAL_KEPT_BYTES: i64 = 64 << 20;

/// Outside a first load, the checkpointer makes the log restart once it is past this size
/// (a `RESTART` checkpoint), whatever the readers do; the log then stays within about this
/// plus what is committed while the longest read transaction lasts.
pub const WAL_RESTART_BYTES: i64 = 16 << 20;

/// How long a `RESTART` checkpoint waits for readers of older snapshots (and for the writer's
/// open transaction); commits wait meanwhile. When they still hold the log, the next try is
/// `RESTART_RETRY` later, or once the log grew by another `WAL_RESTART_BYTES` (passive
/// checkpoints go on meanwhile): at most one wait per that much written. Each try that readers
/// held off waits twice as long as the last, up to `RESTART_BUSY_MAX` (a loaded daemon's
/// reads last seconds: the soak saw one reader or another on an older snapshot 96% of the
/// time, a slot held for up to 2.3 s); one that restarts the log starts again from the first.
const RESTART_BUSY: Duration = Duration::from_millis(250);
const RESTART_BUSY_MAX: Duration = Duration::from_secs(2);
const RESTART_RETRY: Duration = Duration::from_secs(5);

/// A first load defers checkpoints only while it makes progress: while it staged a page of
/// rows within `FIRST_LOAD_IDLE`, and for at most `FIRST_LOAD_DEFER_MAX` from its first page
/// (a load of 1,000,000 resources takes about 5 s). A load that stalls, or trickles for
/// longer, is checkpointed alongside like any other write.
pub(super) const FIRST_LOAD_IDLE: Duration = Duration::from_secs(10);
pub(super) const FIRST_LOAD_DEFER_MAX: Duration = Duration::from_secs(120);

/// The log's size (in pages) below which no checkpoint is asked for: SQLite's own default.
const CHECKPOINT_PAGES: i64 = 1_000;

thread_local! {
    /// Pages in the writer's WAL after its last commit (the WAL hook runs on the writer thread).
    static WAL_PAGES: Cell<i64> = const { Cell::new(0) };
}

fn note_wal_pages(_wal: &rusqlite::hooks::Wal, pages: std::ffi::c_int) -> rusqlite::Result<()> {
    WAL_PAGES.with(|noted| noted.set(i64::from(pages)));
    Ok(())
}

/// What `catalog/status` shows of the log: the last checkpoint, and whether checkpoints wait
/// for a first load. Shared by the writer, the checkpointer and the store.
#[derive(Debug, Default)]
pub struct WalWatch {
    state: Mutex<WalState>,
    /// Held by the checkpointer's `RESTART` (which takes SQLite's write lock) and by the
    /// writer's one deferred transaction, the swap: SQLite refuses a read transaction's upgrade
    /// to a write at once, without its busy handler, while another connection holds the write
    /// lock. The writer's other transactions begin `IMMEDIATE` and wait for the lock instead.
    restart_gate: Mutex<()>,
}

#[derive(Debug, Default, Clone)]
struct WalState {
    /// Checkpoints wait for a first load until then (`FIRST_LOAD_IDLE` after its last page).
    defer_until: Option<Instant>,
    last: Option<CheckpointOutcome>,
    checkpoints: u64,
    restarts: u64,
    restarts_busy: u64,
}

/// One checkpoint, as `catalog/status` shows it.
#[derive(Debug, Clone)]
struct CheckpointOutcome {
    at_ms: i64,
    mode: &'static str,
    log_pages: i64,
    copied_pages: i64,
    busy: bool,
}

impl WalWatch {
    /// Keeps the checkpointer from taking the write lock until the guard drops.
    fn hold_restarts(&self) -> std::sync::MutexGuard<'_, ()> {
        self.restart_gate
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn state(&self) -> std::sync::MutexGuard<'_, WalState> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Checkpoints wait for a first load now (or no longer).
    fn defer(&self, loading: bool) {
        self.state().defer_until = loading.then(|| Instant::now() + FIRST_LOAD_IDLE);
    }

    fn deferred(&self) -> bool {
        self.state()
            .defer_until
            .is_some_and(|until| Instant::now() < until)
    }

    fn note(&self, mode: &'static str, done: &Checkpointed) {
        let mut state = self.state();
        state.checkpoints += 1;
        if mode != "PASSIVE" {
            state.restarts += 1;
            state.restarts_busy += u64::from(done.busy);
        }
        state.last = Some(CheckpointOutcome {
            at_ms: crate::store::now_ms(),
            mode,
            log_pages: done.log,
            copied_pages: done.copied,
            busy: done.busy,
        });
    }

    /// The log as `catalog/status` shows it; `log_path` is the database's `-wal` file.
    pub fn status(&self, log_path: &std::path::Path) -> crate::protocol::WalStatus {
        let state = self.state().clone();
        crate::protocol::WalStatus {
            bytes: std::fs::metadata(log_path).map(|found| found.len()).ok(),
            restart_bytes: WAL_RESTART_BYTES as u64,
            deferred_for_first_load: state
                .defer_until
                .is_some_and(|until| Instant::now() < until),
            checkpoints: state.checkpoints,
            restarts: state.restarts,
            restarts_busy: state.restarts_busy,
            last_checkpoint: state.last.map(|last| crate::protocol::CheckpointStatus {
                at_ms: last.at_ms,
                mode: last.mode.to_ascii_lowercase(),
                log_pages: last.log_pages,
                copied_pages: last.copied_pages,
                busy: last.busy,
            }),
        }
    }
}

/// The writer's side of the WAL: its open page batch, and the checkpoint policy.
pub(super) struct WriteAheadLog {
    /// The walk whose pages the open transaction holds, and how much row text so far.
    batch: Option<(u64, usize)>,
    limit_pages: i64,
    checkpointer: Option<Checkpointer>,
    watch: Arc<WalWatch>,
}

impl WriteAheadLog {
    /// Turns the connection's automatic checkpoints off and starts the checkpointer; the log
    /// grows to at most about `limit_bytes` (`WAL_LIMIT_BYTES`). Should that fail, SQLite goes
    /// on checkpointing as it commits, as it did before: slower first loads, nothing lost.
    #[cfg(test)]
    pub(super) fn take_over(connection: &Connection, limit_bytes: i64) -> Self {
        Self::watched(connection, limit_bytes, Arc::default())
    }

    /// `take_over`, reporting checkpoints to `watch` (`catalog/status`).
    pub(super) fn watched(connection: &Connection, limit_bytes: i64, watch: Arc<WalWatch>) -> Self {
        match Self::try_take_over(connection, limit_bytes, watch.clone()) {
            Ok(wal) => wal,
            Err(error) => {
                tracing::warn!(%error, "cannot checkpoint on a thread of its own; SQLite checkpoints as the writer commits");
                // Also replaces the WAL hook with SQLite's own.
                let _ = connection.pragma_update(None, "wal_autocheckpoint", CHECKPOINT_PAGES);
                WriteAheadLog {
                    batch: None,
                    limit_pages: i64::MAX,
                    checkpointer: None,
                    watch,
                }
            }
        }
    }

    fn try_take_over(
        connection: &Connection,
        limit_bytes: i64,
        watch: Arc<WalWatch>,
    ) -> Result<Self, StoreError> {
        let page_size: i64 = connection.pragma_query_value(None, "page_size", |row| row.get(0))?;
        let checkpointer = match connection.path() {
            Some(path) if !path.is_empty() => Some(Checkpointer::start(
                PathBuf::from(path),
                watch.clone(),
                WAL_RESTART_BYTES / page_size.max(512),
            )?),
            _ => None,
        };
        connection.pragma_update(None, "wal_autocheckpoint", 0)?;
        connection.pragma_update(None, "journal_size_limit", WAL_KEPT_BYTES)?;
        // After `wal_autocheckpoint`, which installs SQLite's own hook.
        connection.wal_hook(Some(note_wal_pages));
        Ok(WriteAheadLog {
            batch: None,
            limit_pages: limit_bytes / page_size.max(512),
            checkpointer,
            watch,
        })
    }

    /// Readies the connection for one page of `walk_id` holding `bytes` of row text: the open
    /// batch goes on while it is that walk's and under `STAGE_BATCH_BYTES`; else it is
    /// committed and a new one begins.
    /// Foreign keys are off in a batch: a first load's rows name a server id no `servers` row
    /// has until its promotion (the pragma cannot change inside a transaction).
    pub(super) fn stage_page(
        &mut self,
        connection: &Connection,
        walk_id: u64,
        bytes: usize,
    ) -> Result<(), StoreError> {
        match &mut self.batch {
            Some((open, staged)) if *open == walk_id && *staged < STAGE_BATCH_BYTES => {
                *staged += bytes;
                return Ok(());
            }
            Some(_) => self.commit_batch(connection)?,
            None => {}
        }
        connection.pragma_update(None, "foreign_keys", false)?;
        if let Err(error) = connection.execute_batch("BEGIN IMMEDIATE") {
            connection.pragma_update(None, "foreign_keys", true)?;
            return Err(error.into());
        }
        self.batch = Some((walk_id, bytes));
        Ok(())
    }

    /// Keeps the checkpointer's `RESTART` off the write lock while the guard lives: for a
    /// transaction that reads before it writes (`WalWatch::restart_gate`).
    pub(super) fn hold_restarts(&self) -> std::sync::MutexGuard<'_, ()> {
        self.watch.hold_restarts()
    }

    /// The walk of the open batch, if one is open.
    pub(super) fn batch_walk(&self) -> Option<u64> {
        self.batch.map(|(walk_id, _)| walk_id)
    }

    /// Commits the open batch, if any: before any other operation, and before idle work. When
    /// the commit fails its pages are gone, and the caller fails their walk.
    pub(super) fn commit_batch(&mut self, connection: &Connection) -> Result<(), StoreError> {
        let Some(_) = self.batch.take() else {
            return Ok(());
        };
        let committed = connection.execute_batch("COMMIT");
        if committed.is_err() && !connection.is_autocommit() {
            let _ = connection.execute_batch("ROLLBACK");
        }
        let restored = connection.pragma_update(None, "foreign_keys", true);
        committed?;
        restored?;
        // A batch is part of a walk: only the log's limits apply (`after_write`).
        self.limits(connection);
        Ok(())
    }

    /// After an operation: the checkpointer copies the log back once no first load makes
    /// progress (`loading`: the writer's `first_load_in_flight`), or alongside one once the
    /// log is half its limit; at the limit the writer copies it itself, so the log restarts
    /// (a log written while a checkpoint runs cannot restart until one catches up with it).
    /// While the search index reads a committed first load's pages back (`reading_back`) the
    /// checkpointer waits whatever the log's size: the writer leaves the full-text backlog
    /// meanwhile, so the log does not grow, and a 1,000,000 load leaves more than half the
    /// limit, whose copy took a core from the read-back.
    pub(super) fn after_write(
        &mut self,
        connection: &Connection,
        loading: bool,
        reading_back: bool,
    ) {
        let pages = WAL_PAGES.with(Cell::get);
        // The checkpointer waits while a first load makes progress, and `FIRST_LOAD_IDLE`
        // after its last page at most (an idle writer does not come back to say it ended).
        self.watch
            .defer((loading && pages < self.limit_pages / 2) || reading_back);
        self.limits(connection);
    }

    /// The log's limits: a checkpoint asked for past `CHECKPOINT_PAGES` (the checkpointer
    /// waits out a first load's deferral itself), the writer's own at `limit_pages`.
    fn limits(&mut self, connection: &Connection) {
        let pages = WAL_PAGES.with(Cell::get);
        if self.batch.is_some() {
            return;
        }
        if pages >= self.limit_pages {
            // Waits (up to the busy timeout) for the checkpointer and for readers of the log;
            // while they still hold it, the writer tries again after each commit.
            let started = Instant::now();
            let done = checkpoint(connection, "RESTART");
            if let Ok(done) = &done {
                self.watch.note("RESTART", done);
            }
            match done {
                Ok(done) if done.busy => tracing::warn!(
                    log = done.log,
                    copied = done.copied,
                    ms = started.elapsed().as_millis() as u64,
                    "the write-ahead log is at its limit and readers still hold it; trying again after the next commit"
                ),
                Ok(done) => tracing::info!(
                    log = done.log,
                    copied = done.copied,
                    ms = started.elapsed().as_millis() as u64,
                    "checkpointed the write-ahead log at its limit"
                ),
                Err(error) => tracing::warn!(%error, "checkpointing the write-ahead log failed"),
            }
            // The next commit reports the log's size again.
            WAL_PAGES.with(|noted| noted.set(0));
        } else if pages >= CHECKPOINT_PAGES {
            if let Some(checkpointer) = &self.checkpointer {
                checkpointer.ask();
            }
        }
    }

    /// Stops the checkpointer, then checkpoints and empties the log: a clean stop leaves the
    /// whole catalog in the database file, as an operator copying `catalog.db` expects. (The
    /// readers' connections are still open, so the writer's close is not the last one, which
    /// would checkpoint by itself.)
    pub(super) fn close(&mut self, connection: &Connection) {
        let _ = self.commit_batch(connection);
        if let Some(checkpointer) = self.checkpointer.take() {
            checkpointer.stop();
        }
        let started = Instant::now();
        match checkpoint(connection, "TRUNCATE") {
            Ok(done) => tracing::debug!(
                log = done.log,
                copied = done.copied,
                busy = done.busy,
                ms = started.elapsed().as_millis() as u64,
                "checkpointed and emptied the write-ahead log"
            ),
            Err(error) => tracing::warn!(%error, "checkpointing the write-ahead log failed"),
        }
    }
}

/// What `PRAGMA wal_checkpoint` did: `busy` when it could not finish (another checkpoint
/// ran, or a reader still needed the log), the log's pages, and how many are now in the
/// database.
struct Checkpointed {
    busy: bool,
    log: i64,
    copied: i64,
}

/// `PRAGMA wal_checkpoint(mode)`: `PASSIVE` copies what no reader still needs without
/// waiting; `RESTART` waits for other checkpoints and for readers, so the log restarts;
/// `TRUNCATE` also empties the log file.
fn checkpoint(connection: &Connection, mode: &str) -> rusqlite::Result<Checkpointed> {
    connection.query_row(&format!("PRAGMA wal_checkpoint({mode})"), [], |row| {
        Ok(Checkpointed {
            busy: row.get::<_, i64>(0)? != 0,
            log: row.get(1)?,
            copied: row.get(2)?,
        })
    })
}

/// A thread with its own connection that checkpoints when asked; the writer goes on
/// committing meanwhile (a passive checkpoint never blocks a commit or a reader, only another
/// checkpoint: the writer's `RESTART` at the limit waits for it).
struct Checkpointer {
    asks: SyncSender<()>,
    thread: JoinHandle<()>,
}

impl Checkpointer {
    fn start(path: PathBuf, watch: Arc<WalWatch>, restart_pages: i64) -> Result<Self, StoreError> {
        let connection = Connection::open(&path).map_err(|source| StoreError::Open {
            path: path.clone(),
            source,
        })?;
        // Only a `RESTART` waits (`PASSIVE` never calls the busy handler).
        connection.busy_timeout(RESTART_BUSY)?;
        let (asks, asked) = sync_channel(1);
        let thread = std::thread::Builder::new()
            .name("store-checkpoint".into())
            .spawn(move || {
                crate::background::lower_this_threads_priority(crate::background::BACKGROUND_NICE);
                run_checkpointer(connection, asked, watch, restart_pages)
            })
            .map_err(|error| {
                StoreError::Walk(format!("cannot start the checkpoint thread: {error}"))
            })?;
        Ok(Checkpointer { asks, thread })
    }

    /// Asks for a checkpoint; one already asked for and not yet begun covers this one too.
    fn ask(&self) {
        match self.asks.try_send(()) {
            Ok(()) | Err(TrySendError::Full(())) | Err(TrySendError::Disconnected(())) => {}
        }
    }

    fn stop(self) {
        drop(self.asks);
        let _ = self.thread.join();
    }
}

/// How long the checkpointer waits to try again when readers held part of the log back.
const RETRY_HELD_BACK: Duration = Duration::from_secs(1);

/// Checkpoints when asked; a checkpoint that readers held back (they still read older
/// frames), or that a first load's deferral put off (`WalWatch::defer`), is tried again a
/// second later, so an idle daemon's log is copied back all the same. Past `restart_pages`
/// outside a first load, a `RESTART` follows the passive checkpoint; while readers keep it
/// busy, again `RESTART_RETRY` later or `restart_pages` further.
fn run_checkpointer(
    connection: Connection,
    asked: Receiver<()>,
    watch: Arc<WalWatch>,
    restart_pages: i64,
) {
    let mut held_back = false;
    // While readers hold a restart off: when, or at what size of the log, to try again, and
    // how long the next try waits for them.
    let mut next_restart = (Instant::now(), 0);
    let mut restart_busy = RESTART_BUSY;
    loop {
        let wake = if held_back {
            asked.recv_timeout(RETRY_HELD_BACK)
        } else {
            asked.recv().map_err(|_| RecvTimeoutError::Disconnected)
        };
        if let Err(RecvTimeoutError::Disconnected) = wake {
            return;
        }
        if watch.deferred() {
            held_back = true;
            continue;
        }
        let started = Instant::now();
        let passive = checkpoint(&connection, "PASSIVE");
        let done = match passive {
            Ok(done)
                if done.log >= restart_pages
                    && (Instant::now() >= next_restart.0 || done.log >= next_restart.1) =>
            {
                watch.note("PASSIVE", &done);
                let _ = connection.busy_timeout(restart_busy);
                let restarted = {
                    let _gate = watch.hold_restarts();
                    checkpoint(&connection, "RESTART")
                };
                next_restart = match &restarted {
                    Ok(busy) if busy.busy => {
                        restart_busy = (restart_busy * 2).min(RESTART_BUSY_MAX);
                        (Instant::now() + RESTART_RETRY, busy.log + restart_pages)
                    }
                    _ => {
                        restart_busy = RESTART_BUSY;
                        (Instant::now(), 0)
                    }
                };
                restarted.map(|done| ("RESTART", done))
            }
            other => other.map(|done| ("PASSIVE", done)),
        };
        match done {
            Ok((mode, done)) => {
                watch.note(mode, &done);
                held_back = done.busy || done.copied < done.log;
                tracing::debug!(
                    mode,
                    log = done.log,
                    copied = done.copied,
                    busy = done.busy,
                    ms = started.elapsed().as_millis() as u64,
                    "checkpointed the write-ahead log"
                );
            }
            Err(error) => {
                held_back = false;
                tracing::warn!(%error, "checkpointing the write-ahead log failed");
            }
        }
    }
}
