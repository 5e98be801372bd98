//! Writing the index: a swap's diff, a change of priorities, a rebuild, each staged through
//! the one index writer and committed with its payload (or rolled back whole); the merged
//! view's `wins`/`shared` flags recomputed from the listings of each group a change touches.

use std::collections::{HashMap, HashSet};

use tantivy::collector::DocSetCollector;
use tantivy::query::{BooleanQuery, Occur, Query, TermQuery};
use tantivy::schema::IndexRecordOption;
use tantivy::{IndexWriter, Searcher, TantivyDocument};

use super::error::lock;
use super::index::{merge_policy, Payload, PROGRESS_EVERY};
use super::prebuild;
use super::schema::{Flags, SCHEMA_VERSION};
use super::*;
use crate::protocol::IndexPhase as Phase;
use crate::protocol::Kind;

/// The priority of a server the caller did not name: it loses to every named one.
const UNKNOWN_PRIORITY: i64 = i64::MAX;

impl SearchIndex {
    /// Applies one swap's diff and commits it with its generation.
    pub fn apply<I: IntoIterator<Item = Entry>>(
        &self,
        diff: ServerDiff<I>,
    ) -> Result<(), SearchError> {
        let mut writer = lock(&self.writer);
        let outcome = self.apply_locked(&writer, diff);
        self.finish(&mut writer, outcome)
    }

    /// Applies the diffs of one server's kinds in one commit, at the last one's generation.
    /// Only one server's: the merged view of each is computed from the committed listings,
    /// and one server's kinds never share a group (a resource's URI and a template's URI
    /// template are groups of their own kinds).
    pub fn apply_kinds(&self, diffs: Vec<ServerDiff<Vec<Entry>>>) -> Result<(), SearchError> {
        let mut writer = lock(&self.writer);
        let mut outcome = Ok(lock(&self.committed).clone());
        for diff in diffs {
            outcome = outcome.and_then(|_| self.apply_locked(&writer, diff));
        }
        self.finish(&mut writer, outcome)
    }

    fn apply_locked<I: IntoIterator<Item = Entry>>(
        &self,
        writer: &IndexWriter,
        diff: ServerDiff<I>,
    ) -> Result<Payload, SearchError> {
        let fields = &self.fields;
        let searcher = self.reader.searcher();
        let mut payload = lock(&self.committed).clone();
        let servers = payload.servers.clone();
        let empty = searcher.num_docs() == 0;
        let server = diff.server.as_str();
        let kind = diff.kind;
        // Identities whose other listings may need new flags once this server's is gone.
        let mut orphaned: HashSet<String> = HashSet::new();
        if diff.replace {
            if !empty {
                for (entry, _) in self.server_shared_listings(&searcher, server, kind)? {
                    orphaned.insert(entry.identity().to_string());
                }
            }
            writer.delete_query(Box::new(self.server_kind_query(server, kind)))?;
        } else {
            for identity in &diff.removed {
                writer.delete_term(fields.key_term(kind, server, identity));
                if !empty && self.others_may_list(&searcher, kind, server, identity)? {
                    orphaned.insert(identity.clone());
                }
            }
        }
        for (done, entry) in diff.upserted.into_iter().enumerate() {
            self.check_cancelled(done as u64)?;
            if entry.kind != kind {
                continue;
            }
            let identity = entry.identity();
            orphaned.remove(identity);
            let others = if empty || !self.others_may_list(&searcher, kind, server, identity)? {
                Vec::new()
            } else {
                self.listings(&searcher, kind, server, identity)?
                    .into_iter()
                    .filter(|(other, _)| other.server != entry.server)
                    .collect()
            };
            // A replaced server's listings are all deleted already; a delete per entry would
            // sit in tantivy's delete queue until the commit (some 250 bytes each).
            if !diff.replace {
                writer.delete_term(fields.key_term(kind, &entry.server, identity));
            }
            self.write_listings(writer, &servers, others, Some(entry))?;
        }
        for identity in orphaned {
            let others = self
                .listings(&searcher, kind, server, &identity)?
                .into_iter()
                .filter(|(other, _)| other.server != server)
                .collect();
            self.write_listings(writer, &servers, others, None)?;
        }
        payload.generation = Some(diff.generation);
        Ok(payload)
    }

    /// Computes the flags of every listing of one URI (the committed `others` and this diff's
    /// `new` entry) and writes the new entry and every other whose flags changed.
    fn write_listings(
        &self,
        writer: &IndexWriter,
        servers: &Priorities,
        others: Vec<(Entry, Flags)>,
        new: Option<Entry>,
    ) -> Result<(), SearchError> {
        let rank = |server: &str| {
            (
                servers.get(server).copied().unwrap_or(UNKNOWN_PRIORITY),
                server.to_string(),
            )
        };
        let listed_by = others.len() + usize::from(new.is_some());
        let winner = others
            .iter()
            .map(|(entry, _)| entry.server.as_str())
            .chain(new.iter().map(|entry| entry.server.as_str()))
            .min_by_key(|server| rank(server))
            .map(str::to_string);
        let flags_of = |entry: &Entry| Flags {
            wins: winner.as_deref() == Some(entry.server.as_str()),
            shared: listed_by > 1,
        };
        for (entry, old_flags) in others {
            let flags = flags_of(&entry);
            if flags != old_flags {
                writer.delete_term(self.fields.key_term(
                    entry.kind,
                    &entry.server,
                    entry.identity(),
                ));
                writer.add_document(self.fields.document(&entry, flags))?;
            }
        }
        if let Some(entry) = new {
            let flags = flags_of(&entry);
            writer.add_document(self.fields.document(&entry, flags))?;
        }
        Ok(())
    }

    /// False when no other server's listing in the group of `identity` was ever indexed in
    /// the live segments: then the stored listings need not be read. Terms of deleted
    /// documents count, so a "true" may be wrong, which costs a look and changes nothing.
    fn others_may_list(
        &self,
        searcher: &Searcher,
        kind: Kind,
        server: &str,
        identity: &str,
    ) -> Result<bool, SearchError> {
        let own = self.fields.key_term(kind, server, identity);
        Ok(self
            .fields
            .group_terms(searcher, kind, server, identity)?
            .iter()
            .any(|term| *term != own))
    }

    /// Every live listing in the group of `identity` in the committed index, with its flags.
    fn listings(
        &self,
        searcher: &Searcher,
        kind: Kind,
        server: &str,
        identity: &str,
    ) -> Result<Vec<(Entry, Flags)>, SearchError> {
        let query = any_term(self.fields.group_terms(searcher, kind, server, identity)?);
        self.stored(searcher, &query)
    }

    /// Every listing of `server` of `kind`.
    fn server_kind_query(&self, server: &str, kind: Kind) -> BooleanQuery {
        BooleanQuery::new(vec![
            (
                Occur::Must,
                Box::new(TermQuery::new(
                    tantivy::Term::from_field_text(self.fields.server, server),
                    IndexRecordOption::Basic,
                )) as Box<dyn Query>,
            ),
            (
                Occur::Must,
                Box::new(TermQuery::new(
                    self.fields.kind_term(kind),
                    IndexRecordOption::Basic,
                )),
            ),
        ])
    }

    /// The listings of `server` of `kind` whose URI another server lists too.
    fn server_shared_listings(
        &self,
        searcher: &Searcher,
        server: &str,
        kind: Kind,
    ) -> Result<Vec<(Entry, Flags)>, SearchError> {
        let query = BooleanQuery::new(vec![
            (
                Occur::Must,
                Box::new(self.server_kind_query(server, kind)) as Box<dyn Query>,
            ),
            (
                Occur::Must,
                Box::new(TermQuery::new(
                    self.fields.flag_term(self.fields.shared),
                    IndexRecordOption::Basic,
                )),
            ),
        ]);
        self.stored(searcher, &query)
    }

    fn stored(
        &self,
        searcher: &Searcher,
        query: &dyn Query,
    ) -> Result<Vec<(Entry, Flags)>, SearchError> {
        let addresses = searcher.search(query, &DocSetCollector)?;
        let mut listings = Vec::with_capacity(addresses.len());
        for address in addresses {
            let document: TantivyDocument = searcher.doc(address)?;
            listings.push(self.fields.entry(&document));
        }
        Ok(listings)
    }

    /// Makes the segments of a first load built during its walk (`prebuild`) the server's
    /// resources, in one commit at `generation`. False, and nothing changed, when they cannot
    /// be taken as they are: another server's resources may share one of their URIs (they were
    /// built with the flags of URIs no one else lists); or the index still holds resources of
    /// the server (deleting them in this commit would delete the added segments' too: tantivy
    /// applies to a segment added this way every delete its queue has not handed on yet, so
    /// the writer starts afresh, with an empty queue, before adding them).
    pub fn adopt_load(
        &self,
        load: prebuild::BuiltLoad,
        generation: u64,
    ) -> Result<bool, SearchError> {
        let mut writer = lock(&self.writer);
        let searcher = self.reader.searcher();
        if searcher.search(
            &self.server_kind_query(&load.server, Kind::Resource),
            &tantivy::collector::Count,
        )? > 0
            || self.others_may_share(&searcher, &load)?
        {
            return Ok(false);
        }
        // Nothing is staged since the last commit: this only gives the writer a new queue.
        writer.rollback()?;
        writer.set_merge_policy(merge_policy());
        let outcome = (|| {
            let mut payload = lock(&self.committed).clone();
            for segment in load.segments {
                writer.add_segment(segment)?;
            }
            payload.generation = Some(generation);
            Ok(payload)
        })();
        self.finish(&mut writer, outcome)?;
        Ok(true)
    }

    /// Whether a resource URI of another server in the committed index may be one of the
    /// built load's: none is there (the usual case for a large first load), or the group of
    /// each of their keys is looked up in the built segments. Terms of deleted documents count,
    /// so a "true" may be wrong; it only costs the load its early build.
    fn others_may_share(
        &self,
        searcher: &Searcher,
        load: &prebuild::BuiltLoad,
    ) -> Result<bool, SearchError> {
        let resources = TermQuery::new(
            self.fields.kind_term(Kind::Resource),
            IndexRecordOption::Basic,
        );
        let others = BooleanQuery::new(vec![
            (Occur::Must, Box::new(resources) as Box<dyn Query>),
            (
                Occur::MustNot,
                Box::new(TermQuery::new(
                    tantivy::Term::from_field_text(self.fields.server, &load.server),
                    IndexRecordOption::Basic,
                )),
            ),
        ]);
        if searcher.search(&others, &tantivy::collector::Count)? == 0 {
            return Ok(false);
        }
        let built = load
            .segments
            .iter()
            .map(|meta| tantivy::SegmentReader::open(&self.index.segment(meta.clone())))
            .collect::<Result<Vec<_>, _>>()?;
        let built_terms = built
            .iter()
            .map(|reader| reader.inverted_index(self.fields.key))
            .collect::<Result<Vec<_>, _>>()?;
        let resources = schema::kind_range(Kind::Resource);
        let mut last_group: Vec<u8> = Vec::new();
        for segment in searcher.segment_readers() {
            let terms = segment.inverted_index(self.fields.key)?;
            let mut stream = schema::terms_between(&terms, &resources)?;
            while stream.advance() {
                let group = schema::group_of_key(stream.key());
                if group == last_group.as_slice() {
                    continue;
                }
                last_group = group.to_vec();
                let listings = schema::group_bounds(group);
                for built in &built_terms {
                    if schema::terms_between(built, &listings)?.advance() {
                        return Ok(true);
                    }
                }
            }
        }
        Ok(false)
    }

    /// Records that the index reflects `generation` when a diff changed nothing it holds.
    pub fn advance(&self, generation: u64) -> Result<(), SearchError> {
        let mut writer = lock(&self.writer);
        let mut payload = lock(&self.committed).clone();
        payload.generation = Some(generation);
        self.finish(&mut writer, Ok(payload))
    }

    /// Records new server priorities: recomputes the merged view's winners of every shared
    /// URI and drops the listings of servers no longer named. Commits at the same generation.
    pub fn set_priorities(&self, servers: &Priorities) -> Result<(), SearchError> {
        let mut writer = lock(&self.writer);
        let outcome = self.set_priorities_locked(&writer, servers);
        self.finish(&mut writer, outcome)
    }

    fn set_priorities_locked(
        &self,
        writer: &IndexWriter,
        servers: &Priorities,
    ) -> Result<Payload, SearchError> {
        let mut payload = lock(&self.committed).clone();
        let searcher = self.reader.searcher();
        let dropped: Vec<String> = payload
            .servers
            .keys()
            .filter(|server| !servers.contains_key(*server))
            .cloned()
            .collect();
        let query = TermQuery::new(
            self.fields.flag_term(self.fields.shared),
            IndexRecordOption::Basic,
        );
        let mut by_uri: HashMap<(Kind, String), Vec<(Entry, Flags)>> = HashMap::new();
        for (entry, flags) in self.stored(&searcher, &query)? {
            by_uri
                .entry((entry.kind, entry.identity().to_string()))
                .or_default()
                .push((entry, flags));
        }
        for server in &dropped {
            writer.delete_term(tantivy::Term::from_field_text(self.fields.server, server));
        }
        for (_, listings) in by_uri {
            let kept = listings
                .into_iter()
                .filter(|(entry, _)| !dropped.contains(&entry.server))
                .collect();
            self.write_listings(writer, servers, kept, None)?;
        }
        payload.servers = servers.clone();
        Ok(payload)
    }

    /// Replaces the whole index with `entries` (every stored entry, in `Entry::rebuild_order`;
    /// `total` of them, for progress) at `generation`, computing the merged view as it goes.
    pub fn rebuild<I: IntoIterator<Item = Entry>>(
        &self,
        servers: &Priorities,
        generation: u64,
        total: u64,
        entries: I,
    ) -> Result<(), SearchError> {
        let mut writer = lock(&self.writer);
        self.set_phase(Phase::Rebuilding { percent: 0 });
        let outcome = self.rebuild_locked(&writer, servers, generation, total, entries);
        self.finish(&mut writer, outcome)
    }

    fn rebuild_locked<I: IntoIterator<Item = Entry>>(
        &self,
        writer: &IndexWriter,
        servers: &Priorities,
        generation: u64,
        total: u64,
        entries: I,
    ) -> Result<Payload, SearchError> {
        writer.delete_all_documents()?;
        let mut group: Vec<Entry> = Vec::new();
        let mut done = 0u64;
        let mut last_percent = 0u8;
        for entry in entries {
            if let Some(previous) = group.last() {
                match previous.rebuild_order(&entry) {
                    std::cmp::Ordering::Less => {
                        self.write_group(writer, servers, std::mem::take(&mut group))?
                    }
                    std::cmp::Ordering::Equal => {}
                    std::cmp::Ordering::Greater => {
                        return Err(SearchError::Unordered {
                            earlier: format!("{} {}", previous.kind, previous.identity()),
                            later: format!("{} {}", entry.kind, entry.identity()),
                        })
                    }
                }
            }
            group.push(entry);
            done += 1;
            self.check_cancelled(done)?;
            if done % PROGRESS_EVERY == 0 && total > 0 {
                let percent = (done.saturating_mul(100) / total).min(99) as u8;
                if percent != last_percent {
                    last_percent = percent;
                    self.status
                        .send_modify(|status| status.phase = Phase::Rebuilding { percent });
                }
            }
        }
        self.write_group(writer, servers, group)?;
        Ok(Payload {
            schema: SCHEMA_VERSION,
            generation: Some(generation),
            servers: servers.clone(),
        })
    }

    fn write_group(
        &self,
        writer: &IndexWriter,
        servers: &Priorities,
        group: Vec<Entry>,
    ) -> Result<(), SearchError> {
        if group.is_empty() {
            return Ok(());
        }
        let winner = group
            .iter()
            .map(|entry| {
                (
                    servers
                        .get(&entry.server)
                        .copied()
                        .unwrap_or(UNKNOWN_PRIORITY),
                    entry.server.as_str(),
                )
            })
            .min()
            .map(|(_, server)| server.to_string());
        let shared = group.len() > 1;
        for entry in group {
            let flags = Flags {
                wins: winner.as_deref() == Some(entry.server.as_str()),
                shared,
            };
            writer.add_document(self.fields.document(&entry, flags))?;
        }
        Ok(())
    }

    /// Commits what `outcome` staged with its payload, or discards it all on error.
    fn finish(
        &self,
        writer: &mut IndexWriter,
        outcome: Result<Payload, SearchError>,
    ) -> Result<(), SearchError> {
        let committed = outcome.and_then(|mut payload| {
            payload.schema = SCHEMA_VERSION;
            let text = serde_json::to_string(&payload).unwrap_or_default();
            let mut commit = writer.prepare_commit()?;
            commit.set_payload(&text);
            commit.commit()?;
            self.reader.reload()?;
            Ok(payload)
        });
        match committed {
            Ok(payload) => {
                *lock(&self.committed) = payload;
                self.publish(None);
                Ok(())
            }
            Err(error) => {
                match writer.rollback() {
                    Ok(_) => writer.set_merge_policy(merge_policy()),
                    Err(rollback) => {
                        tracing::warn!(%rollback, "cannot roll back the search index writer")
                    }
                }
                self.publish(None);
                Err(error)
            }
        }
    }
}

/// Documents holding any of `terms`.
fn any_term(terms: Vec<tantivy::Term>) -> BooleanQuery {
    BooleanQuery::new(
        terms
            .into_iter()
            .map(|term| {
                (
                    Occur::Should,
                    Box::new(TermQuery::new(term, IndexRecordOption::Basic)) as Box<dyn Query>,
                )
            })
            .collect(),
    )
}
