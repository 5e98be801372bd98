//! A downstream's side of the NATS fan-out: a server whose source is a JetStream key-value
//! bucket. Its first sync reads the bucket's current values (a watch of every key, last value
//! each) into one walk's staging and swaps them in; then each round of the publisher's updates
//! (`super::round`) is one delta through the HTTP follow's own path (`StagedWalk::commit_delta`),
//! its bucket revision the cursor committed in the same transaction, so a kill -9 anywhere
//! resumes exactly, and a client here sees the round's before or after, as it would at the
//! upstream. A cursor
//! of another bucket (one made again) or older than the bucket's oldest revision (a purged
//! history) means one reload of the whole bucket.

use std::collections::{BTreeMap, HashMap};
use std::time::Instant;

use async_nats::jetstream::kv;
use futures_util::StreamExt;
use serde_json::value::RawValue;

use super::round::{Round, Staging};
use super::{bucket_key, bucket_state, kind_of_bucket_key, FeedMark, NatsError, FEED_KEY};
use crate::config::WalkLimits;
use crate::protocol::Kind;
use crate::store::{
    now_ms, EntryRow, FollowCursor, ResourceRow, ServerUpdate, StagedWalk, Store, StoreError,
    TemplateRow, WalkReport,
};
use crate::walk::definitions::followed_entry_row;
use crate::walk::{resource_row, template_row};

/// Why following a bucket stopped; the session reports it and starts over after a wait.
#[derive(Debug, thiserror::Error)]
pub enum FollowError {
    #[error(transparent)]
    Nats(#[from] NatsError),
    #[error("the bucket's watch failed: {0}")]
    Watch(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// What a follower has done, for the live status.
#[derive(Debug, Clone, Copy, Default)]
pub struct FollowProgress {
    /// The bucket revision the snapshot reflects.
    pub revision: u64,
    /// Revisions of the bucket after it, when the last batch was applied.
    pub lag_revisions: u64,
    /// From the last applied update's publication to its commit here.
    pub lag_ms: u64,
    pub reloads: u64,
    pub deltas: u64,
}

/// The publisher's place in the bucket (`FEED_KEY`): absent until its first whole publish of
/// the view has ended, so a bucket without one holds part of a view at most.
pub async fn feed_mark(kv: &kv::Store) -> Result<Option<FeedMark>, FollowError> {
    let value = kv
        .get(FEED_KEY)
        .await
        .map_err(|error| FollowError::Watch(error.to_string()))?;
    Ok(value.and_then(|bytes| serde_json::from_slice(&bytes).ok()))
}

/// Resources and templates read from the bucket, staged `STAGE_ROWS` at a time (one writer
/// operation a row made a first load of 100,000 entries a minute long); tools and prompts,
/// staged whole after the resources' swap.
#[derive(Default)]
pub(super) struct ReadRows {
    resources: Vec<ResourceRow>,
    templates: Vec<TemplateRow>,
    entries: BTreeMap<Kind, Vec<EntryRow>>,
}

/// Rows of one kind sent to the writer at once.
const STAGE_ROWS: usize = 1_000;

impl ReadRows {
    /// Stages what is buffered once `STAGE_ROWS` wait (everything with `all`).
    pub(super) async fn flush(&mut self, staged: &StagedWalk, all: bool) -> Result<(), StoreError> {
        if !self.resources.is_empty() && (all || self.resources.len() >= STAGE_ROWS) {
            staged
                .add_resources(std::mem::take(&mut self.resources))
                .await?;
        }
        if !self.templates.is_empty() && (all || self.templates.len() >= STAGE_ROWS) {
            staged
                .add_templates(std::mem::take(&mut self.templates))
                .await?;
        }
        Ok(())
    }
}

/// One server following one bucket.
pub struct Follower {
    server: String,
    bucket: String,
    limits: WalkLimits,
    store: Store,
    kv: kv::Store,
    /// Each bucket key of the snapshot, and the kind and key of its entry: what a delete
    /// marker (which carries no value) removes.
    keys: HashMap<String, (Kind, String)>,
    /// The publisher's database, recorded in each entry's chain of mirrors.
    upstream: Option<String>,
    instance: String,
    pub progress: FollowProgress,
}

impl Follower {
    /// Resumes from the stored revision when it is this bucket's and the bucket still holds
    /// every revision after it; else reloads the whole bucket.
    pub async fn start(
        store: &Store,
        server: &str,
        bucket: &str,
        kv: kv::Store,
        limits: WalkLimits,
        progress: FollowProgress,
    ) -> Result<Follower, FollowError> {
        let state = bucket_state(&kv, bucket).await?;
        let name = server.to_string();
        let cursor = store
            .read(move |reader| reader.follow_cursor(&name))
            .await?;
        let mut follower = Follower {
            server: server.to_string(),
            bucket: bucket.to_string(),
            limits,
            store: store.clone(),
            kv,
            keys: HashMap::new(),
            upstream: None,
            instance: state.instance.clone(),
            progress,
        };
        follower.upstream = follower.feed_mark().await?.map(|mark| mark.instance);
        let resumable = cursor.as_ref().is_some_and(|cursor| {
            cursor.instance == state.instance
                && u64::try_from(cursor.seq).is_ok_and(|seq| seq + 1 >= state.first_revision)
        });
        match (resumable, cursor) {
            (true, Some(cursor)) => {
                follower.progress.revision = cursor.seq as u64;
                let name = server.to_string();
                let keys = store.read(move |reader| reader.server_keys(&name)).await?;
                follower.keys = keys
                    .into_iter()
                    .map(|(kind, key)| (bucket_key(kind, &key), (kind, key)))
                    .collect();
                // The stored snapshot is whole: what the bucket has after its revision comes
                // as deltas, each of which keeps it `synced`.
                store
                    .update_server(server, ServerUpdate::Synced { walked: false })
                    .await?;
                tracing::info!(
                    server,
                    bucket,
                    revision = cursor.seq,
                    "following the bucket from the stored revision"
                );
            }
            _ => follower.reload(state.values).await?,
        }
        Ok(follower)
    }

    async fn feed_mark(&self) -> Result<Option<FeedMark>, FollowError> {
        feed_mark(&self.kv).await
    }

    /// Reads every current value of the bucket into one walk and swaps it in; the cursor is
    /// the newest revision read.
    async fn reload(&mut self, values: u64) -> Result<(), FollowError> {
        let started = Instant::now();
        let started_at_ms = now_ms();
        let staged = self.store.begin_walk(&self.server);
        // Tools and prompts are staged after the resources' swap, as a walk of an upstream
        // mirror does (a kind's staging is keyed by name alone, and a first load's by server).
        let mut rows = ReadRows::default();
        let mut keys = HashMap::new();
        let mut revision = bucket_state(&self.kv, &self.bucket).await?.last_revision;
        if values > 0 {
            // The last value of every key, then what comes after (a plain watch starts at
            // the next update).
            let mut watch = self
                .kv
                .watch_with_history(">")
                .await
                .map_err(|error| FollowError::Watch(error.to_string()))?;
            while let Some(entry) = watch.next().await {
                let entry = entry.map_err(|error| FollowError::Watch(error.to_string()))?;
                revision = revision.max(entry.revision);
                let last = entry.delta == 0;
                if entry.operation == kv::Operation::Put {
                    if let Some((kind, key)) = self.read_row(&entry, &mut rows) {
                        keys.insert(entry.key.clone(), (kind, key));
                    }
                    rows.flush(&staged, false).await?;
                }
                if last {
                    break;
                }
            }
        }
        rows.flush(&staged, true).await?;
        let mut entry_rows = rows.entries;
        let report = WalkReport {
            started_at_ms,
            duration_ms: started.elapsed().as_millis() as i64,
            ..WalkReport::default()
        };
        let context = |step: &str, error: StoreError| {
            FollowError::Store(StoreError::Walk(format!("{step}: {error}")))
        };
        staged
            .commit(report)
            .await
            .map_err(|error| context("swapping in the bucket's resources", error))?;
        for kind in Kind::ENTRY_KINDS {
            let rows = entry_rows.remove(kind).unwrap_or_default();
            self.store
                .swap_entries(&self.server, *kind, rows)
                .await
                .map_err(|error| context(&format!("swapping in the bucket's {kind}s"), error))?;
        }
        let cursor = FollowCursor {
            instance: self.instance.clone(),
            seq: revision as i64,
        };
        self.store
            .set_follow_cursor(&self.server, Some(cursor))
            .await
            .map_err(|error| context("recording the bucket revision", error))?;
        self.store
            .update_server(&self.server, ServerUpdate::Synced { walked: true })
            .await
            .map_err(|error| context("marking the bucket's load whole", error))?;
        self.keys = keys;
        self.progress.revision = revision;
        self.progress.reloads += 1;
        tracing::info!(
            server = %self.server,
            bucket = %self.bucket,
            revision,
            entries = self.keys.len(),
            "loaded the whole bucket"
        );
        Ok(())
    }

    /// Reads the entry of one `Put` into `rows`, when its value is an entry of the kind its key
    /// names and its key's digest is that key (a value under another entry's key is left out).
    fn read_row(&self, entry: &kv::Entry, rows: &mut ReadRows) -> Option<(Kind, String)> {
        if entry.operation != kv::Operation::Put {
            return None;
        }
        let kind = kind_of_bucket_key(&entry.key)?;
        let raw = serde_json::from_slice::<Box<RawValue>>(&entry.value).ok()?;
        let item = crate::walk::take_entry(raw, self.upstream.as_deref()).ok()?;
        let max_bytes = self.limits.max_entry_bytes;
        let key = match kind {
            Kind::Resource => match resource_row(item, max_bytes) {
                Some(row) if bucket_key(kind, &row.uri) == entry.key => {
                    let key = row.uri.clone();
                    rows.resources.push(row);
                    key
                }
                _ => return None,
            },
            Kind::Template => match template_row(&item, &self.limits).ok().flatten() {
                Some(row) if bucket_key(kind, &row.uri_template) == entry.key => {
                    let key = row.uri_template.clone();
                    rows.templates.push(row);
                    key
                }
                _ => return None,
            },
            Kind::Tool | Kind::Prompt => match followed_entry_row(kind, item, max_bytes) {
                Some(row) if bucket_key(kind, &row.name) == entry.key => {
                    let key = row.name.clone();
                    rows.entries.entry(kind).or_default().push(row);
                    key
                }
                _ => return None,
            },
        };
        Some((kind, key))
    }

    /// The watch of every update after the snapshot's revision.
    pub async fn watch(&self) -> Result<kv::Watch, FollowError> {
        self.kv
            .watch_all_from_revision(self.progress.revision + 1)
            .await
            .map_err(|error| FollowError::Watch(error.to_string()))
    }

    /// Adds an update to `round`, reading and staging it at once (so the round's commit at
    /// its mark has little left to do); true once the round is full (`Round::push`).
    pub async fn take(&self, round: &mut Round, entry: kv::Entry) -> Result<bool, FollowError> {
        let begin = || self.store.begin_delta(&self.server);
        if let Some(staging) = round.staging_for(&entry, self.upstream.as_deref(), begin) {
            self.stage(staging, entry.key.clone(), &entry).await?;
        }
        Ok(round.push(entry))
    }

    /// Reads one update into `staging` and stages what its rows have gathered.
    async fn stage(
        &self,
        staging: &mut Staging,
        bucket_key: String,
        entry: &kv::Entry,
    ) -> Result<(), FollowError> {
        let read = self.read_row(entry, &mut staging.rows);
        staging.rows.flush(&staging.walk, false).await?;
        staging.read.push((bucket_key, read));
        Ok(())
    }

    /// Applies a round of updates as one delta with its newest revision as the cursor. A
    /// delta the store cannot apply (the server was added again meanwhile) is a reload instead.
    pub async fn apply(&mut self, round: Round) -> Result<(), FollowError> {
        let Some((revision, pending, published_ns)) = round.newest() else {
            return Ok(());
        };
        let (latest, upstream, staging) = round.into_parts();
        if upstream.is_some() {
            self.upstream = upstream;
        }
        // Staged as it came, unless that cannot stand: then from the last update of each key.
        let staging = match staging {
            Some(staging) => staging,
            None => {
                let mut staging = Staging::new(self.store.begin_delta(&self.server), None);
                for (bucket_key, entry) in latest {
                    self.stage(&mut staging, bucket_key, &entry).await?;
                }
                staging
            }
        };
        let Staging {
            walk: staged,
            mut rows,
            read,
            ..
        } = staging;
        let mut removed = Vec::new();
        let mut touched: BTreeMap<Kind, Vec<String>> = BTreeMap::new();
        let mut now_known = Vec::new();
        for (bucket_key, new) in read {
            let old = self.keys.get(&bucket_key).cloned();
            if let Some((kind, key)) = &old {
                match kind {
                    Kind::Resource if new.is_none() => removed.push(key.clone()),
                    Kind::Resource => {}
                    kind => touched.entry(*kind).or_default().push(key.clone()),
                }
            }
            if let Some((kind, key)) = &new {
                if *kind != Kind::Resource {
                    touched.entry(*kind).or_default().push(key.clone());
                }
            }
            now_known.push((bucket_key, new));
        }
        rows.flush(&staged, true).await?;
        let mut entry_rows = rows.entries;
        let templates = touched.remove(&Kind::Template);
        let mut entry_deltas = Vec::new();
        for (kind, keys) in touched {
            let walk = self.store.begin_delta(&self.server);
            let rows = entry_rows.remove(&kind).unwrap_or_default();
            if !rows.is_empty() {
                walk.add_entries(kind, rows).await?;
            }
            entry_deltas.push((kind, walk, keys));
        }
        let cursor = FollowCursor {
            instance: self.instance.clone(),
            seq: revision as i64,
        };
        if let Err(error) = staged
            .commit_delta(removed, templates, entry_deltas, cursor)
            .await
        {
            tracing::info!(server = %self.server, %error, "reloading the bucket instead of applying its updates");
            let values = bucket_state(&self.kv, &self.bucket).await?.values;
            return self.reload(values).await;
        }
        for (bucket_key, known) in now_known {
            match known {
                Some(known) => self.keys.insert(bucket_key, known),
                None => self.keys.remove(&bucket_key),
            };
        }
        self.progress.revision = revision;
        self.progress.lag_revisions = pending;
        self.progress.deltas += 1;
        let now_ns = i128::from(now_ms()) * 1_000_000;
        self.progress.lag_ms =
            u64::try_from((now_ns - published_ns).max(0) / 1_000_000).unwrap_or(0);
        Ok(())
    }
}
