//! `Reader`: a read-only connection whose methods are every read query of the store. The
//! daemon borrows one from the store's pool (`Store::read`), off the async threads; the CLI
//! opens one on the database file when no daemon runs. Both ask the same questions the same way.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use rusqlite::Connection;

use super::definitions::{self, DriftRow, EntryListing, KindCounts};
use super::follow::{self, CountMemo, KeyedEntries};
use super::queries::{self, ChangePage, ReadTarget};
use super::resource_search::{self, SearchRequest};
use super::views::{self, SnapshotRow, TemplateTarget};
use super::{index_source, schema, CatalogRow, FullTextPage, ListingRow, StoreError};
use crate::protocol::{Kind, ServerStatus};

pub struct Reader {
    connection: Connection,
    /// The merged resource count at a feed seq, shared by the pool's readers.
    merged_count: Arc<CountMemo>,
}

impl Reader {
    /// A reader for the store's pool.
    pub(super) fn open(path: &Path, merged_count: Arc<CountMemo>) -> Result<Reader, StoreError> {
        Ok(Reader {
            connection: schema::open_reader(path)?,
            merged_count,
        })
    }

    /// Opens an existing database read-only, for the CLI when no daemon runs; a missing file
    /// is an error rather than a new database. It never writes, so it cannot disturb a daemon
    /// that starts meanwhile.
    pub fn open_file(path: &Path) -> Result<Reader, StoreError> {
        if !path.exists() {
            return Err(StoreError::Open {
                path: path.to_path_buf(),
                source: rusqlite::Error::SqliteFailure(
                    rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_CANTOPEN),
                    Some("no such file".into()),
                ),
            });
        }
        Reader::open(path, Arc::default())
    }

    /// Every configured server's name, in name order.
    pub fn server_names(&self) -> Result<Vec<String>, StoreError> {
        views::server_names(&self.connection)
    }

    /// The server that wins each of `keys` of a kind among the servers `sees` lets in (what a
    /// view's merged catalog shows); a key none of them lists is left out.
    pub fn winners_among(
        &self,
        kind: Kind,
        keys: &[&str],
        sees: &dyn Fn(&str) -> bool,
    ) -> Result<std::collections::HashMap<String, String>, StoreError> {
        views::winners_among(&self.connection, kind, keys, sees)
    }

    /// The merged entries of `keys` of a kind (what an upstream answers a follower's
    /// `catalog/entries`), each key's winner among the servers `sees` lets in, the keys none of
    /// them lists, the feed's newest seq and the merged count, in one read transaction.
    pub fn keyed_entries(
        &self,
        kind: Kind,
        keys: &[String],
        sees: &dyn Fn(&str) -> bool,
    ) -> Result<KeyedEntries, StoreError> {
        follow::keyed_entries(&self.connection, kind, keys, &self.merged_count, sees)
    }

    /// `keyed_entries`' winners and missing keys alone, without the merged count (what the
    /// NATS publisher puts).
    pub fn keyed_winners(
        &self,
        kind: Kind,
        keys: &[String],
        sees: &dyn Fn(&str) -> bool,
    ) -> Result<(Vec<CatalogRow>, Vec<String>), StoreError> {
        follow::keyed_winners(&self.connection, kind, keys, sees)
    }

    /// The cursor a followed server's snapshot was last moved to; `None` before its first (an
    /// empty snapshot has one too: a delta applies to it like to any other).
    pub fn follow_cursor(&self, server: &str) -> Result<Option<super::FollowCursor>, StoreError> {
        follow::follow_cursor(&self.connection, server)
    }

    /// The servers with no committed snapshot of any kind: their first load is still to come.
    pub fn loading_servers(&self) -> Result<Vec<String>, StoreError> {
        follow::loading_servers(&self.connection)
    }

    /// True when the server's snapshot holds an entry of any kind.
    pub fn holds_entries(&self, server: &str) -> Result<bool, StoreError> {
        follow::holds_entries(&self.connection, server)
    }

    /// The catalog's generation now: it moves in every commit that changes what a list
    /// answer holds (entries of any kind, scopes, the servers and their priorities).
    pub fn catalog_generation(&self) -> Result<u64, StoreError> {
        queries::catalog_generation(&self.connection)
    }

    /// Runs `answer` in one read transaction whose first read is the catalog's generation, so
    /// the generation returned is the one of the snapshot every row of the answer came from
    /// (a commit in between cannot be seen by part of it).
    pub fn in_one_read<T>(
        &self,
        answer: impl FnOnce(&Reader) -> T,
    ) -> Result<(u64, T), StoreError> {
        let snapshot = self.connection.unchecked_transaction()?;
        let generation = queries::catalog_generation(&snapshot)?;
        let answered = answer(self);
        // Nothing was written; ending the read is all a commit does here.
        snapshot.commit()?;
        Ok((generation, answered))
    }

    /// Every key of `server`'s own snapshot with its kind (what a bucket follower names).
    pub fn server_keys(&self, server: &str) -> Result<Vec<(Kind, String)>, StoreError> {
        follow::server_keys(&self.connection, server)
    }

    /// The recorded scope of every (server, kind) snapshot; one without a row is unknown.
    pub fn scopes(&self) -> Result<Vec<(String, Kind, crate::protocol::CacheScope)>, StoreError> {
        super::scopes::scopes(&self.connection)
    }

    /// Every configured server's row, for `catalog/status`.
    pub fn status(&self) -> Result<Vec<ServerStatus>, StoreError> {
        queries::server_status(&self.connection)
    }

    /// A page of the merged catalog after `after_uri`, merged among the servers `sees` lets
    /// in; with the URI to continue after when more follow.
    pub fn list_resources(
        &self,
        after_uri: Option<&str>,
        limit: usize,
        sees: &dyn Fn(&str) -> bool,
    ) -> Result<(Vec<CatalogRow>, Option<String>), StoreError> {
        queries::merged_resources(&self.connection, after_uri, limit, sees)
    }

    /// A page of the merged templates after `after`, merged among the servers `sees` lets in;
    /// with the key to continue after when more follow.
    pub fn list_templates(
        &self,
        after: Option<&str>,
        limit: usize,
        sees: &dyn Fn(&str) -> bool,
    ) -> Result<(Vec<CatalogRow>, Option<String>), StoreError> {
        queries::merged_templates(&self.connection, after, limit, sees)
    }

    /// One page of ranked resources from FTS5, and the offset of the next page when there is
    /// one, noting a full-text backlog read in the same snapshot.
    pub fn search(&self, request: &SearchRequest) -> Result<FullTextPage, StoreError> {
        resource_search::search_noting_backlog(&self.connection, request)
    }

    /// Ranked tools and prompts from their FTS5 table.
    pub fn search_entries(
        &self,
        search: &SearchRequest,
    ) -> Result<Vec<super::SearchHit>, StoreError> {
        definitions::search_entries(&self.connection, search)
    }

    /// The server a read of `uri` goes to; `None` when no server lists it.
    pub fn read_target(&self, uri: &str) -> Result<Option<ReadTarget>, StoreError> {
        queries::read_target(&self.connection, uri)
    }

    /// The server whose template matches `uri`; `None` when no mirrored template does.
    pub fn template_target(&self, uri: &str) -> Result<Option<TemplateTarget>, StoreError> {
        views::template_target(&self.connection, uri)
    }

    /// Every server that lists `uri`, the winner first.
    pub fn listings(&self, uri: &str) -> Result<Vec<ListingRow>, StoreError> {
        queries::listings(&self.connection, uri)
    }

    /// A cached `resources/read` result (its JSON text) and when it was stored (ms since the epoch).
    pub fn cached_contents(
        &self,
        server: &str,
        uri: &str,
    ) -> Result<Option<(String, i64)>, StoreError> {
        queries::cached_contents(&self.connection, server, uri)
    }

    pub fn read_cache_bytes(&self) -> Result<u64, StoreError> {
        queries::read_cache_bytes(&self.connection)
    }

    /// Change feed entries after `since`, oldest first; only those of `kinds` when given.
    pub fn changes(
        &self,
        since: Option<i64>,
        limit: usize,
        kinds: Option<&[Kind]>,
    ) -> Result<ChangePage, StoreError> {
        match kinds {
            Some(kinds) => definitions::changes_of_kinds(&self.connection, since, limit, kinds),
            None => queries::changes_since(&self.connection, since, limit),
        }
    }

    /// Where the feed's entries written at or after `at_ms` start.
    pub fn feed_position_at(&self, at_ms: i64) -> Result<super::FeedPosition, StoreError> {
        super::change_window::feed_position_at(&self.connection, at_ms)
    }

    /// The feed entries after `after_seq` up to `up_to_seq`, counted per server, entry kind
    /// and kind of change.
    pub fn feed_window_counts(
        &self,
        after_seq: i64,
        up_to_seq: i64,
        kinds: Option<&[Kind]>,
    ) -> Result<Vec<super::WindowCount>, StoreError> {
        super::change_window::window_counts(&self.connection, after_seq, up_to_seq, kinds)
    }

    pub fn latest_change_seq(&self) -> Result<i64, StoreError> {
        queries::latest_change_seq(&self.connection)
    }

    /// The change feed position of the newest committed change (of any kind) a reader can see
    /// now: the search index answers only once it reflects at least this.
    pub fn index_generation(&self) -> Result<u64, StoreError> {
        index_source::index_generation(&self.connection)
    }

    /// A page of one kind's tools or prompts after (server, name), ordered by server and
    /// name, and whether more follow.
    pub fn list_entries(
        &self,
        kind: Kind,
        server: Option<&str>,
        after: Option<(&str, &str)>,
        limit: usize,
    ) -> Result<(Vec<EntryListing>, bool), StoreError> {
        definitions::list_entries(&self.connection, kind, server, after, limit)
    }

    pub fn entry(
        &self,
        kind: Kind,
        server: &str,
        name: &str,
    ) -> Result<Option<EntryListing>, StoreError> {
        definitions::entry(&self.connection, kind, server, name)
    }

    /// Per server, per kind: the entry count and the drift from the accepted definitions.
    pub fn kind_counts(&self) -> Result<BTreeMap<String, BTreeMap<Kind, KindCounts>>, StoreError> {
        definitions::kind_counts(&self.connection)
    }

    /// A page of the drift from the accepted definitions, after `after`; `true` when more follow.
    pub fn drift(
        &self,
        server: Option<&str>,
        after: Option<(&str, Kind, &str)>,
        limit: usize,
    ) -> Result<(Vec<DriftRow>, bool), StoreError> {
        definitions::drift(&self.connection, server, after, limit)
    }

    /// Up to `limit` kept versions of an entry older than version `before`, newest first
    /// (with their bodies when asked); `true` when more follow.
    #[allow(clippy::too_many_arguments)]
    pub fn history(
        &self,
        kind: Kind,
        server: &str,
        key: &str,
        before: Option<i64>,
        limit: usize,
        with_bodies: bool,
    ) -> Result<(Vec<super::VersionRow>, bool), StoreError> {
        super::history::versions(
            &self.connection,
            kind,
            server,
            key,
            before,
            limit,
            with_bodies,
        )
    }

    /// One kept version of an entry with its body (`None`: the newest).
    pub fn history_version(
        &self,
        kind: Kind,
        server: &str,
        key: &str,
        version: Option<i64>,
    ) -> Result<Option<super::VersionRow>, StoreError> {
        super::history::version(&self.connection, kind, server, key, version)
    }

    /// Whether a server of that name is configured (recorded in the database).
    pub fn server_exists(&self, server: &str) -> Result<bool, StoreError> {
        views::server_exists(&self.connection, server)
    }

    /// A page of `server`'s own snapshot after `after_uri`, keyed by URI.
    pub fn server_snapshot(
        &self,
        server: &str,
        after_uri: Option<&str>,
        limit: usize,
    ) -> Result<(Vec<SnapshotRow>, bool), StoreError> {
        views::server_snapshot(&self.connection, server, after_uri, limit)
    }

    /// The URIs of the merged catalog, each counted once.
    pub fn merged_resource_count(&self) -> Result<u64, StoreError> {
        // Counted once per feed position, as for followers: a count of distinct URIs visits
        // every resource (90 ms at 1,000,000), and status is polled.
        let transaction = self.connection.unchecked_transaction()?;
        let seq = queries::latest_change_seq(&transaction)?;
        self.merged_count.merged_resources(&transaction, seq)
    }
}
