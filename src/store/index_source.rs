//! What the search index reads from the store: snapshots of the generation, the priorities, the change feed and the entries of every kind.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rusqlite::{params, Connection, OptionalExtension};

use super::{schema, StoreError};
use crate::protocol::{ChangeKind, Kind};

/// One listing of an entry of any kind by a server, as the index keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub kind: Kind,
    pub server: String,
    /// A resource's URI or a template's URI template; empty for tools and prompts.
    pub uri: String,
    pub name: String,
    pub title: Option<String>,
    pub description: Option<String>,
    pub mime_type: Option<String>,
    /// The names and descriptions of a tool's input properties or a prompt's arguments:
    /// searched, not stored.
    pub inputs: Option<String>,
}

impl Entry {
    /// What identifies the entry within its server and kind: the URI (or URI template) of a
    /// resource (or template), the name of a tool or prompt.
    pub fn identity(&self) -> &str {
        match self.kind {
            Kind::Resource | Kind::Template => &self.uri,
            Kind::Tool | Kind::Prompt => &self.name,
        }
    }

    /// The order a rebuild takes entries in, and groups them by: kind, then the URI for
    /// resources and templates (one group per URI), name and server for tools and prompts.
    pub(crate) fn rebuild_order(&self, other: &Entry) -> std::cmp::Ordering {
        self.kind.cmp(&other.kind).then_with(|| match self.kind {
            Kind::Resource | Kind::Template => self.uri.cmp(&other.uri),
            Kind::Tool | Kind::Prompt => {
                (&self.name, &self.server).cmp(&(&other.name, &other.server))
            }
        })
    }
}

/// What the writer tells the search index of a first load while it is staged, so the index
/// can build a large one during its walk (the search index's `prebuild`). Never waits on the
/// index: each page carries the walk's room for it (`room`), which the index gives back once
/// the page is written, so the channel holds at most a few pages per walk and only that walk
/// waits for a slow index (at most `FIRST_LOAD_INDEX_HOLD`; past it the pages go without,
/// and the index reads them from the database after the commit, by the ids they took).
#[derive(Debug)]
pub enum LoadEvent {
    /// One staged page of the first load of `server`, pending under `id`; its rows took the
    /// consecutive ids `ids` (both ends included).
    Page {
        id: i64,
        server: String,
        ids: (i64, i64),
        entries: Vec<Entry>,
        room: tokio::sync::OwnedSemaphorePermit,
    },
    /// The load committed: its server has the id `id` now, and `resources` resources, whose
    /// rows took the ids of `ranges` (both ends included).
    Promoted {
        id: i64,
        resources: u64,
        ranges: Vec<(i64, i64)>,
        /// Present when the walk staged pages without room in the index, which the index
        /// reads back from the database now; dropped once it has (`ReadBackWatch`).
        read_back: Option<ReadingBack>,
    },
    /// The load failed or was discarded: its pages are to be forgotten.
    Dropped { id: i64 },
}

impl Entry {
    /// A resource row as the index keeps it, its texts moved out of it (the rest of the row,
    /// its raw text above all, is dropped).
    pub(crate) fn of_resource(server: &str, row: super::ResourceRow) -> Entry {
        Entry {
            kind: Kind::Resource,
            server: server.to_string(),
            uri: row.uri,
            name: row.name,
            title: row.title,
            description: row.description,
            mime_type: row.mime_type,
            inputs: None,
        }
    }
}

/// The longest the writer's full-text backlog and the checkpointer wait for one read-back of a
/// first load's pages (`ReadBackWatch`): about 5 s of one core at 1,000,000 resources
/// (`FIRST_LOAD_INDEX_LAG_ROWS` rows at about 9 µs), longer on a busy host; past this they go
/// on alongside it, as they did before.
pub const READ_BACK_PAUSE_MAX: Duration = Duration::from_secs(60);

/// Whether the search index is reading the pages of a committed first load back from the
/// database (those its walk staged without room in the index). Meanwhile the writer leaves the
/// full-text backlog (and FTS5's merges) and the checkpointer leaves the log, for at most
/// `READ_BACK_PAUSE_MAX`: the load is visible and waits only for the index now, which answers
/// every search FTS5 would (FTS5 answers while the index cannot), and on a small host the
/// three shared the cores: a 1,000,000 first load on 2 busy cores (load average 8) read back
/// its 500,000 rows with 6.2 s of CPU over 22.7 s while the backlog (5.7 s of the writer's
/// CPU) and the checkpoint (1.6 s) ran at nice 0 beside the read-back's nice 5; with both
/// waiting, 6.8 s over 9.9 s.
#[derive(Debug, Default)]
pub struct ReadBackWatch {
    running: Mutex<ReadBacks>,
}

#[derive(Debug, Default)]
struct ReadBacks {
    count: usize,
    /// When the oldest read-back still running began.
    since: Option<Instant>,
}

/// One read-back of a first load's pages (`ReadBackWatch`) until dropped, whatever its
/// outcome: the writer makes it, the index drops it once it has read the pages back.
#[derive(Debug)]
pub struct ReadingBack {
    watch: Arc<ReadBackWatch>,
}

impl ReadBackWatch {
    fn running(&self) -> std::sync::MutexGuard<'_, ReadBacks> {
        self.running
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A read-back begins now.
    pub(crate) fn begin(self: &Arc<Self>) -> ReadingBack {
        let mut running = self.running();
        running.count += 1;
        running.since.get_or_insert_with(Instant::now);
        ReadingBack {
            watch: self.clone(),
        }
    }

    /// Whether the backlog and the checkpointer wait for a read-back now.
    pub(crate) fn pausing(&self) -> bool {
        let running = self.running();
        running.count > 0
            && running
                .since
                .is_some_and(|since| since.elapsed() < READ_BACK_PAUSE_MAX)
    }
}

impl Drop for ReadingBack {
    fn drop(&mut self) {
        let mut running = self.watch.running();
        running.count = running.count.saturating_sub(1);
        if running.count == 0 {
            running.since = None;
        }
    }
}

/// Where the writer sends `LoadEvent`s (`Store::feed_first_loads`); unbounded, as the pages
/// in it are bounded by the walks' room (`LoadEvent::Page`).
pub type LoadFeed = std::sync::mpsc::Sender<LoadEvent>;

/// A read-only connection of the search index's own, so a rebuild that streams every entry
/// never holds one of the query connections.
pub struct IndexSource {
    connection: Connection,
}

/// A read transaction the index reads through, renewed between the pages of a long read.
///
/// Between renewals everything read is from one committed state. A renewal (`renew`, and
/// between the pages `with_entries` streams) moves it to the newest state: a read
/// transaction held for the minutes a reload's million entries take to index pinned the
/// write-ahead log, which then grew by everything written meanwhile (2 GB in the soak) since
/// no checkpoint may pass a reader's snapshot. A pass reads forward from the generation it
/// started at and commits at that generation, so what a later state adds is applied again by
/// the next pass (the feed after that generation names it): the index converges.
pub struct SourceSnapshot<'a> {
    connection: &'a Connection,
}

/// The rows one page of `with_entries` reads between two renewals: resources and templates
/// are small; a tool's or prompt's inputs may be up to `max_entry_bytes`, so fewer of them.
fn page_rows(kind: Kind) -> i64 {
    match kind {
        Kind::Resource | Kind::Template => 1_000,
        Kind::Tool | Kind::Prompt => 32,
    }
}

/// Each kind's rows as the index reads them, one statement per kind: kind, server, URI (or
/// URI template, or '' for tools and prompts), name, title, description, MIME type, inputs.
fn entries_sql(kind: Kind) -> &'static str {
    match kind {
        Kind::Resource => {
            "SELECT s.name, r.uri, r.name, r.title, r.description, r.mime_type, NULL
             FROM resources r JOIN servers s ON s.id = r.server_id"
        }
        Kind::Template => {
            "SELECT s.name, t.uri_template, t.name, t.title, t.description, t.mime_type, NULL
             FROM resource_templates t JOIN servers s ON s.id = t.server_id"
        }
        // `inputs` lives in the full-text table only (its own content, looked up by rowid).
        Kind::Tool | Kind::Prompt => {
            "SELECT s.name, '', e.name, e.title, e.description, NULL,
                    (SELECT f.inputs FROM entries_fts f WHERE f.rowid = e.id)
             FROM entries e JOIN servers s ON s.id = e.server_id"
        }
    }
}

/// A server's resources with ids in a range. `+r.server_id`: the id range must drive the
/// statement. Left to itself SQLite searched the server's index and visited every row of the
/// server for each range (a first load's 613,000 rows read back at 52 µs a row, 32 s).
fn resources_with_ids_sql() -> String {
    format!(
        "{} WHERE +r.server_id = ?1 AND r.id BETWEEN ?2 AND ?3 ORDER BY r.id",
        entries_sql(Kind::Resource)
    )
}

/// The column a kind's rows are found by (with the server), and ordered by in a rebuild.
fn identity_column(kind: Kind) -> &'static str {
    match kind {
        Kind::Resource => "r.uri",
        Kind::Template => "t.uri_template",
        Kind::Tool | Kind::Prompt => "e.name",
    }
}

/// The condition that keeps only the kind's own rows (tools and prompts share a table).
fn kind_condition(kind: Kind) -> &'static str {
    match kind {
        Kind::Resource | Kind::Template => "1",
        Kind::Tool => "e.kind = 'tool'",
        Kind::Prompt => "e.kind = 'prompt'",
    }
}

impl IndexSource {
    pub fn open(path: &Path) -> Result<IndexSource, StoreError> {
        Ok(IndexSource {
            connection: schema::open_reader(path)?,
        })
    }

    /// Starts a read transaction and pins its snapshot with a first read.
    pub fn snapshot(&mut self) -> Result<SourceSnapshot<'_>, StoreError> {
        let snapshot = SourceSnapshot {
            connection: &self.connection,
        };
        snapshot.begin()?;
        Ok(snapshot)
    }
}

impl Drop for SourceSnapshot<'_> {
    fn drop(&mut self) {
        // Read only: nothing to lose. An error leaves the connection to be dropped with it.
        let _ = self.connection.execute_batch("ROLLBACK");
    }
}

impl SourceSnapshot<'_> {
    fn begin(&self) -> Result<(), StoreError> {
        self.connection.execute_batch("BEGIN DEFERRED")?;
        self.connection
            .query_row("SELECT count(*) FROM servers", [], |_| Ok(()))?;
        Ok(())
    }

    /// Ends this read and starts one at the newest committed state (no statement of it may
    /// be running).
    pub fn renew(&self) -> Result<(), StoreError> {
        self.connection.execute_batch("ROLLBACK")?;
        self.begin()
    }

    /// The store generation: the change feed's newest sequence number, which every swap that
    /// changed something and every dropped server moves on.
    pub fn generation(&self) -> Result<u64, StoreError> {
        let seq: i64 =
            self.connection
                .query_row("SELECT coalesce(max(seq), 0) FROM changes", [], |row| {
                    row.get(0)
                })?;
        Ok(seq.max(0) as u64)
    }

    pub fn priorities(&self) -> Result<BTreeMap<String, i64>, StoreError> {
        let mut statement = self
            .connection
            .prepare_cached("SELECT name, priority FROM servers")?;
        let rows = statement.query_map([], |row| Ok((row.get(0)?, row.get(1)?)))?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// The id of `server` and how many resources it has, when it is recorded.
    pub fn server_resources(&self, server: &str) -> Result<Option<(i64, u64)>, StoreError> {
        Ok(self
            .connection
            .query_row(
                "SELECT s.id, (SELECT count(*) FROM resources r WHERE r.server_id = s.id)
                 FROM servers s WHERE s.name = ?1",
                [server],
                |row| Ok((row.get::<_, i64>(0)?, row.get::<_, i64>(1)?.max(0) as u64)),
            )
            .optional()?)
    }

    /// The resources of the server whose id is `server_id` whose rows took ids from `first`
    /// to `last` (both included): the pages of a first load its search index had no room for
    /// during the walk (the search index's `prebuild`).
    pub fn resources_with_ids(
        &self,
        server_id: i64,
        first: i64,
        last: i64,
    ) -> Result<Vec<Entry>, StoreError> {
        let mut statement = self.connection.prepare_cached(&resources_with_ids_sql())?;
        let rows = statement.query_map(params![server_id, first, last], |row| {
            entry(Kind::Resource, row)
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Stored entries of every kind (a first load's pending rows belong to no server yet).
    pub fn entry_count(&self) -> Result<u64, StoreError> {
        let count: i64 = self.connection.query_row(
            "SELECT (SELECT count(*) FROM resources WHERE server_id IN (SELECT id FROM servers))
                    + (SELECT count(*) FROM resource_templates)
                    + (SELECT count(*) FROM entries)",
            [],
            |row| row.get(0),
        )?;
        Ok(count.max(0) as u64)
    }

    /// Hands `use_them` every stored entry of every kind, in the rebuild's order (kind, then
    /// URI or name, then server), or only those of one (server, kind), as an iterator that
    /// streams them from the database.
    pub fn with_entries<R>(
        &self,
        scope: Option<(&str, Kind)>,
        use_them: impl FnOnce(&mut dyn Iterator<Item = Entry>) -> R,
    ) -> Result<R, StoreError> {
        let kinds: Vec<Kind> = match scope {
            None => Kind::ALL.to_vec(),
            Some((_, kind)) => vec![kind],
        };
        self.with_entries_of(&kinds, scope.map(|(server, _)| server), use_them)
    }

    /// Like `with_entries` for every server, but of `kinds` only (the semantic index reads
    /// the kinds it embeds without streaming every resource).
    #[cfg(feature = "semantic")]
    pub fn with_kinds<R>(
        &self,
        kinds: &[Kind],
        use_them: impl FnOnce(&mut dyn Iterator<Item = Entry>) -> R,
    ) -> Result<R, StoreError> {
        self.with_entries_of(kinds, None, use_them)
    }

    fn with_entries_of<R>(
        &self,
        kinds: &[Kind],
        server: Option<&str>,
        use_them: impl FnOnce(&mut dyn Iterator<Item = Entry>) -> R,
    ) -> Result<R, StoreError> {
        let mut pages = Pages {
            snapshot: self,
            kinds: kinds.iter().copied().collect(),
            server,
            after: None,
            page: Vec::new().into_iter(),
            failure: None,
        };
        let outcome = use_them(&mut pages);
        match pages.failure {
            Some(error) => Err(error),
            None => Ok(outcome),
        }
    }

    /// The next page of `kind`'s entries after the key `after` (identity, then server; one
    /// server's, or every server's in the rebuild's order), in a statement finished before it
    /// returns.
    fn entries_page(
        &self,
        kind: Kind,
        server: Option<&str>,
        after: Option<&(String, String)>,
    ) -> Result<Vec<Entry>, StoreError> {
        let identity = identity_column(kind);
        let select = match server {
            Some(_) => entries_sql(kind).to_string(),
            // Every server's: the rows drive the statement, in their identity index's order,
            // so a page reads its rows and no more. Left to itself SQLite loops over the
            // servers and sorts every row of the kind for each page.
            None => entries_sql(kind).replacen(" JOIN servers s", " CROSS JOIN servers s", 1),
        };
        let mut sql = format!("{select} WHERE {}", kind_condition(kind));
        if server.is_some() {
            sql.push_str(" AND s.name = ?1");
        }
        if after.is_some() {
            // The first term is a range of the kind's identity index; the second skips the
            // listings of the last identity already read.
            sql.push_str(&format!(
                " AND {identity} >= ?2 AND ({identity} > ?2 OR s.name > ?3)"
            ));
        }
        sql.push_str(&format!(" ORDER BY {identity}, s.name LIMIT ?4"));
        let mut statement = self.connection.prepare_cached(&sql)?;
        let (identity, last_server) = after
            .map(|(identity, server)| (identity.as_str(), server.as_str()))
            .unwrap_or_default();
        let mut rows = statement.query(params![
            server.unwrap_or_default(),
            identity,
            last_server,
            page_rows(kind)
        ])?;
        let mut page = Vec::new();
        while let Some(row) = rows.next()? {
            page.push(entry(kind, row)?);
        }
        Ok(page)
    }

    /// The entry of `kind` that `server` lists under `identity`, if it still does.
    pub fn entry(
        &self,
        server: &str,
        kind: Kind,
        identity: &str,
    ) -> Result<Option<Entry>, StoreError> {
        let sql = format!(
            "{} WHERE {} AND s.name = ?1 AND {} = ?2",
            entries_sql(kind),
            kind_condition(kind),
            identity_column(kind)
        );
        let mut statement = self.connection.prepare_cached(&sql)?;
        Ok(statement
            .query_row(params![server, identity], |row| entry(kind, row))
            .optional()?)
    }

    /// Per server and kind, what changed after generation `after`, without the keys: whether
    /// every listing is to be read again (`FeedDiff::Everything`) or only the keys the feed
    /// names, which `changes_page` then hands out a bounded page at a time (a re-walk that
    /// changed a million entries names a million keys). `None` when the feed no longer
    /// reaches back that far (its oldest entries were pruned).
    pub fn changed_groups(&self, after: u64) -> Result<Option<FeedGroups>, StoreError> {
        let after = after.min(i64::MAX as u64) as i64;
        let oldest: Option<i64> =
            self.connection
                .query_row("SELECT min(seq) FROM changes", [], |row| row.get(0))?;
        if oldest.is_some_and(|oldest| oldest > after + 1) {
            return Ok(None);
        }
        let mut statement = self.connection.prepare(
            "SELECT seq, server, kind, entry_kind, uri, name FROM changes WHERE seq > ?1 ORDER BY seq",
        )?;
        let mut rows = statement.query([after])?;
        let mut groups = FeedGroups::new();
        while let Some(row) = rows.next()? {
            let Some(change) = feed_row(row)? else {
                continue;
            };
            let group = groups
                .entry((change.server, change.kind))
                .or_insert(FeedGroup {
                    everything: false,
                    keys: 0,
                    changed_after_everything: false,
                });
            group.changed_after_everything |= group.everything;
            match change.identity {
                Some(_) => group.keys += 1,
                None => group.everything = true,
            }
        }
        Ok(Some(groups))
    }

    /// At most `limit` rows of the change feed after sequence number `after` up to `until`
    /// (both sequence numbers), oldest first, and the sequence number of the last row read
    /// (rows of kinds this code does not know are read and skipped); `None` when no row is
    /// left.
    pub fn changes_page(
        &self,
        after: u64,
        until: u64,
        limit: usize,
    ) -> Result<(Vec<FeedRow>, Option<u64>), StoreError> {
        let after = after.min(i64::MAX as u64) as i64;
        let until = until.min(i64::MAX as u64) as i64;
        let mut statement = self.connection.prepare_cached(
            "SELECT seq, server, kind, entry_kind, uri, name FROM changes
             WHERE seq > ?1 AND seq <= ?2 ORDER BY seq LIMIT ?3",
        )?;
        let mut rows =
            statement.query(params![after, until, limit.min(i64::MAX as usize) as i64])?;
        let mut page = Vec::new();
        let mut last = None;
        while let Some(row) = rows.next()? {
            last = Some(row.get::<_, i64>(0)?.max(0) as u64);
            if let Some(change) = feed_row(row)? {
                page.push(change);
            }
        }
        Ok((page, last))
    }
}

/// The entries `with_entries` hands out, read a page at a time, the read renewed between
/// pages. The first error ends the stream; it is returned once the consumer is done.
struct Pages<'a, 'b> {
    snapshot: &'b SourceSnapshot<'a>,
    kinds: std::collections::VecDeque<Kind>,
    server: Option<&'b str>,
    /// The key of the last entry of the page being handed out (identity, server): where
    /// the next page starts.
    after: Option<(String, String)>,
    page: std::vec::IntoIter<Entry>,
    failure: Option<StoreError>,
}

impl Iterator for Pages<'_, '_> {
    type Item = Entry;

    fn next(&mut self) -> Option<Entry> {
        loop {
            if let Some(entry) = self.page.next() {
                return Some(entry);
            }
            let kind = *self.kinds.front()?;
            if self.failure.is_some() {
                return None;
            }
            let read = match self.after {
                // Between two pages: the newest state, so no page pins the log for long.
                Some(_) => self.snapshot.renew(),
                None => Ok(()),
            }
            .and_then(|()| {
                self.snapshot
                    .entries_page(kind, self.server, self.after.as_ref())
            });
            match read {
                Ok(page) if page.is_empty() => {
                    self.kinds.pop_front();
                    self.after = None;
                }
                Ok(page) => {
                    self.after = page
                        .last()
                        .map(|last| (last.identity().to_string(), last.server.clone()));
                    self.page = page.into_iter();
                }
                Err(error) => {
                    self.failure = Some(error);
                    return None;
                }
            }
        }
    }
}

/// What one (server, kind) did since a generation, as `changed_groups` counts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FeedGroup {
    /// The feed left some changes out: every listing of the server of the kind is to be read
    /// again.
    pub everything: bool,
    /// How many rows of the feed name one key each (a key changed twice is counted twice).
    pub keys: u64,
    /// A row of the feed came after the first one that left changes out: the catalog moved on
    /// after that swap (a first load's index built during its walk is older than it).
    pub changed_after_everything: bool,
}

/// Per (server, kind), what changed since a generation.
pub type FeedGroups = BTreeMap<(String, Kind), FeedGroup>;

/// One row of the change feed as the search index reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FeedRow {
    pub seq: u64,
    pub server: String,
    pub kind: Kind,
    /// The identity the row names (a URI, a URI template, a name); `None` when it stands for
    /// changes left out (a `truncated` row, or a change this code does not know).
    pub identity: Option<String>,
}

/// Reads one row of `seq, server, kind, entry_kind, uri, name`; `None` for a kind of entry
/// this code does not know (it is not in the index either).
fn feed_row(row: &rusqlite::Row<'_>) -> Result<Option<FeedRow>, StoreError> {
    let seq: i64 = row.get(0)?;
    let server: String = row.get(1)?;
    let change: Option<ChangeKind> = row.get::<_, String>(2)?.parse().ok();
    let Ok(kind) = row.get::<_, String>(3)?.parse::<Kind>() else {
        return Ok(None);
    };
    let identity: Option<String> = match kind {
        Kind::Resource | Kind::Template => row.get(4)?,
        Kind::Tool | Kind::Prompt => row.get(5)?,
    };
    let identity = match change {
        Some(ChangeKind::Truncated) | None => None,
        Some(_) => identity,
    };
    Ok(Some(FeedRow {
        seq: seq.max(0) as u64,
        server,
        kind,
        identity,
    }))
}

/// The sequence number of the newest change of any kind in the feed (0 when none): the
/// generation the search index must reflect to answer for the catalog as it stands.
pub fn index_generation(connection: &Connection) -> Result<u64, StoreError> {
    let seq: Option<i64> = connection
        .prepare_cached("SELECT max(seq) FROM changes")?
        .query_row([], |row| row.get(0))?;
    Ok(seq.unwrap_or(0).max(0) as u64)
}

fn entry(kind: Kind, row: &rusqlite::Row<'_>) -> rusqlite::Result<Entry> {
    Ok(Entry {
        kind,
        server: row.get(0)?,
        uri: row.get(1)?,
        name: row.get(2)?,
        title: row.get(3)?,
        description: row.get(4)?,
        mime_type: row.get(5)?,
        inputs: row.get(6)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A range of a server's rows is read by its ids, not by the server's index (which
    /// visits every row the server has, for every range of a million-row read-back).
    #[test]
    fn a_range_of_ids_is_read_by_the_ids() {
        let directory = tempfile::tempdir().expect("tempdir");
        let connection = schema::open_writer(&directory.path().join("catalog.db")).expect("open");
        let mut statement = connection
            .prepare(&format!("EXPLAIN QUERY PLAN {}", resources_with_ids_sql()))
            .expect("plan");
        let plan: Vec<String> = statement
            .query_map(params![1, 1, 5000], |row| row.get::<_, String>(3))
            .expect("query")
            .collect::<Result<_, _>>()
            .expect("rows");
        assert!(
            plan.iter()
                .any(|step| step.starts_with("SEARCH r USING INTEGER PRIMARY KEY")),
            "{plan:?}"
        );
    }
}
