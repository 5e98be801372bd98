//! The `Publisher`: loads the view into the NATS key-value bucket, then tails the store's changes into it.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::kv;
use futures_util::StreamExt;
use tokio::sync::watch;

use crate::answer::{Restriction, View};
use crate::config::{NatsConfig, PublishView};
use crate::nats::{bucket_key, FeedMark, FEED_KEY};
use crate::protocol::{ChangeKind, Kind, StoredObject, MAX_CHANGES_LIMIT};
use crate::store::{CatalogRow, Store, StoreError};
use crate::upstream::Backoff;

/// The largest value put: an entry over it is published trimmed and marked oversized, as the
/// store keeps one over `max_entry_bytes` (NATS refuses messages over its `max_payload`,
/// 1 MiB unless configured).
const MAX_VALUE_BYTES: u64 = 512 * 1024;
/// Keys read from the store per query.
const KEYS_PER_READ: usize = 500;
/// How often the feed is looked at when no change was announced (a missed broadcast).
const TAIL_INTERVAL: Duration = Duration::from_secs(5);
/// Puts awaiting JetStream's acknowledgement at once.
const PUTS_IN_FLIGHT: usize = 256;
/// How often a republish waiting for first loads looks again.
const LOAD_POLL: Duration = Duration::from_millis(500);

#[derive(Debug, thiserror::Error)]
enum PublishError {
    #[error(transparent)]
    Nats(#[from] crate::nats::NatsError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("bucket {bucket}: {reason}")]
    Bucket { bucket: String, reason: String },
}

/// Starts one publisher per view; each ends when `stopping` turns true.
/// `load_wait` is `[daemon] upstream_load_wait`.
pub(crate) fn spawn(
    config: &NatsConfig,
    shared: BTreeSet<String>,
    load_wait: Duration,
    store: &Store,
    stopping: &watch::Receiver<bool>,
) -> Vec<tokio::task::JoinHandle<()>> {
    let Some(url) = &config.url else {
        return Vec::new();
    };
    config
        .publish
        .iter()
        .map(|view| {
            let publisher = Publisher {
                url: url.clone(),
                credentials: config.credentials.clone(),
                view: view.clone(),
                shared: shared.clone(),
                load_wait,
                store: store.clone(),
            };
            let mut stopping = stopping.clone();
            tokio::spawn(async move {
                tokio::select! {
                    _ = stopping.wait_for(|stop| *stop) => {}
                    () = publisher.run() => {}
                }
            })
        })
        .collect()
}

struct Publisher {
    url: String,
    credentials: Option<std::path::PathBuf>,
    view: PublishView,
    shared: BTreeSet<String>,
    /// How long a republish waits for the view's servers' first loads.
    load_wait: Duration,
    store: Store,
}

impl Publisher {
    async fn run(self) {
        let mut backoff = Backoff::new(Duration::from_secs(1), Duration::from_secs(30));
        loop {
            if let Err(error) = self.publish(&mut backoff).await {
                let delay = backoff.next_delay();
                tracing::warn!(bucket = %self.view.bucket, %error, "publishing to NATS failed; trying again in {delay:?}");
                tokio::time::sleep(delay).await;
            }
        }
    }

    async fn publish(&self, backoff: &mut Backoff) -> Result<(), PublishError> {
        let client = crate::nats::connect(
            &self.url,
            self.credentials.as_deref(),
            Arc::new(AtomicU64::new(0)),
        )
        .await?;
        let bucket = self.open_or_create(&client).await?;
        backoff.reset();
        let mut changed = self.store.subscribe();
        let mut seq = match self.resumable(&bucket).await? {
            Some(seq) => seq,
            None => self.republish(&bucket).await?,
        };
        loop {
            seq = match self.tail(&bucket, seq).await? {
                Some(seq) => seq,
                None => self.republish(&bucket).await?,
            };
            // A lagged receiver only missed wake-ups: the feed itself is read by seq.
            let _ = tokio::time::timeout(TAIL_INTERVAL, changed.recv()).await;
        }
    }

    async fn open_or_create(&self, client: &async_nats::Client) -> Result<kv::Store, PublishError> {
        let jetstream = async_nats::jetstream::new(client.clone());
        if let Ok(bucket) = jetstream.get_key_value(&self.view.bucket).await {
            return Ok(bucket);
        }
        jetstream
            .create_key_value(kv::Config {
                bucket: self.view.bucket.clone(),
                description: "mcp-mirror: a published view of the catalog".into(),
                history: 1,
                ..kv::Config::default()
            })
            .await
            .map_err(|error| self.bucket_error(error))
    }

    fn bucket_error(&self, error: impl std::fmt::Display) -> PublishError {
        PublishError::Bucket {
            bucket: self.view.bucket.clone(),
            reason: error.to_string(),
        }
    }

    /// The seq the bucket reflects, when it is this database's and the feed still holds
    /// every change after it.
    async fn resumable(&self, bucket: &kv::Store) -> Result<Option<i64>, PublishError> {
        let mark = bucket
            .get(FEED_KEY)
            .await
            .map_err(|error| self.bucket_error(error))?
            .and_then(|value| serde_json::from_slice::<FeedMark>(&value).ok());
        let Some(mark) = mark.filter(|mark| mark.instance == self.store.instance()) else {
            return Ok(None);
        };
        let seq = mark.seq;
        let page = self
            .store
            .read(move |reader| reader.changes(Some(seq), 1, None))
            .await?;
        Ok((!page.truncated).then_some(seq))
    }

    /// The view as a token of its servers and kinds sees it now (scopes change with swaps).
    async fn view(&self) -> Result<View, PublishError> {
        let scopes = self.store.read(|reader| reader.scopes()).await?;
        Ok(View::restricted(Restriction {
            token: format!("nats:{}", self.view.bucket),
            servers: self.view.servers.clone(),
            kinds: self.view.kinds.clone(),
            shared: self.shared.clone(),
            scopes: scopes
                .into_iter()
                .map(|(server, kind, scope)| ((server, kind), scope))
                .collect::<HashMap<_, _>>(),
            may_mutate: false,
        }))
    }

    /// Publishes the changes after `seq`; `None` when they cannot be listed key by key.
    async fn tail(&self, bucket: &kv::Store, mut seq: i64) -> Result<Option<i64>, PublishError> {
        let started = seq;
        loop {
            let since = seq;
            let page = self
                .store
                .read(move |reader| reader.changes(Some(since), MAX_CHANGES_LIMIT, None))
                .await?;
            if page.truncated {
                return Ok(None);
            }
            let view = self.view().await?;
            let mut keys: BTreeMap<Kind, BTreeSet<String>> = BTreeMap::new();
            for change in &page.changes {
                seq = seq.max(change.seq);
                if !view.names(&change.server, change.entry_kind) {
                    continue;
                }
                if change.kind == ChangeKind::Truncated {
                    return Ok(None);
                }
                let key = match change.entry_kind {
                    Kind::Resource | Kind::Template => change.uri.clone(),
                    Kind::Tool | Kind::Prompt => change
                        .name
                        .as_ref()
                        .map(|name| format!("{}/{name}", change.server)),
                };
                if let Some(key) = key {
                    keys.entry(change.entry_kind).or_default().insert(key);
                }
            }
            for (kind, keys) in keys {
                let keys: Vec<String> = keys.into_iter().collect();
                for chunk in keys.chunks(KEYS_PER_READ) {
                    let asked = chunk.to_vec();
                    let reading_view = view.clone();
                    let read = self
                        .store
                        .read(move |reader| {
                            // Each key's winner among the view's servers, as its tokens see it.
                            let sees = |server: &str| reading_view.sees(server, kind);
                            reader.keyed_winners(kind, &asked, &sees)
                        })
                        .await?;
                    let mut gone: BTreeSet<&String> = chunk.iter().collect();
                    let seen: Vec<&CatalogRow> = read
                        .0
                        .iter()
                        .filter(|row| view.sees(&row.server, kind))
                        .collect();
                    for row in &seen {
                        gone.remove(&row.key);
                    }
                    self.put_all(bucket, kind, &seen).await?;
                    for key in gone {
                        bucket
                            .delete(bucket_key(kind, key))
                            .await
                            .map_err(|error| self.bucket_error(error))?;
                    }
                }
            }
            if !page.more {
                seq = seq.max(page.latest_seq);
                // A round with nothing new puts nothing: a follower's lag counts changes.
                if seq != started {
                    self.mark(bucket, seq).await?;
                }
                return Ok(Some(seq));
            }
        }
    }

    /// Puts every entry the view sees, deletes every other key, and returns the seq the
    /// bucket now reflects (read first: a change after it is tailed again).
    async fn republish(&self, bucket: &kv::Store) -> Result<i64, PublishError> {
        self.wait_for_first_loads().await?;
        let seq = self.store.read(|reader| reader.latest_change_seq()).await?;
        let view = self.view().await?;
        let mut published: BTreeSet<String> = BTreeSet::new();
        for &kind in Kind::ALL {
            let mut after: Option<String> = None;
            loop {
                let from = after.clone();
                let reading_view = view.clone();
                let (rows, next_after) = self
                    .store
                    .read(move |reader| page_of(reader, kind, from.as_deref(), &reading_view))
                    .await?;
                let seen: Vec<&CatalogRow> = rows
                    .iter()
                    .filter(|row| view.sees(&row.server, kind))
                    .collect();
                self.put_all(bucket, kind, &seen).await?;
                published.extend(seen.iter().map(|row| bucket_key(kind, &row.key)));
                match next_after {
                    Some(key) => after = Some(key),
                    None => break,
                }
            }
        }
        let mut keys = bucket
            .keys()
            .await
            .map_err(|error| self.bucket_error(error))?;
        let mut stale = Vec::new();
        while let Some(key) = keys.next().await {
            let key = key.map_err(|error| self.bucket_error(error))?;
            if key != FEED_KEY && !published.contains(&key) {
                stale.push(key);
            }
        }
        for key in stale {
            bucket
                .delete(&key)
                .await
                .map_err(|error| self.bucket_error(error))?;
        }
        self.mark(bucket, seq).await?;
        tracing::info!(bucket = %self.view.bucket, entries = published.len(), seq, "published the whole view");
        Ok(seq)
    }

    /// Waits until no server of the view is still to commit its first load, or `load_wait`
    /// has passed (then it says which servers it publishes without).
    async fn wait_for_first_loads(&self) -> Result<(), PublishError> {
        let started = std::time::Instant::now();
        let mut said = false;
        loop {
            let view = self.view().await?;
            let loading: Vec<String> = self
                .store
                .read(|reader| reader.loading_servers())
                .await?
                .into_iter()
                .filter(|server| view.sees_server(server))
                .collect();
            if loading.is_empty() {
                return Ok(());
            }
            if started.elapsed() >= self.load_wait {
                tracing::warn!(bucket = %self.view.bucket, ?loading, wait = ?self.load_wait, "publishing the whole view although these servers have not loaded yet ([daemon] upstream_load_wait)");
                return Ok(());
            }
            if !said {
                said = true;
                tracing::info!(bucket = %self.view.bucket, ?loading, "waiting for the first loads before publishing the whole view (the bucket keeps what it holds)");
            }
            tokio::time::sleep(LOAD_POLL).await;
        }
    }

    /// Puts `rows`, `PUTS_IN_FLIGHT` awaiting their acknowledgement at once; the first error
    /// ends it.
    async fn put_all(
        &self,
        bucket: &kv::Store,
        kind: Kind,
        rows: &[&CatalogRow],
    ) -> Result<(), PublishError> {
        let mut in_flight = futures_util::stream::FuturesUnordered::new();
        for row in rows {
            if in_flight.len() >= PUTS_IN_FLIGHT {
                if let Some(done) = in_flight.next().await {
                    done?;
                }
            }
            in_flight.push(self.owned_put(bucket, kind, row)?);
        }
        while let Some(done) = in_flight.next().await {
            done?;
        }
        Ok(())
    }

    /// One put as a future that owns what it sends (so many can wait at once).
    fn owned_put(
        &self,
        bucket: &kv::Store,
        kind: Kind,
        row: &CatalogRow,
    ) -> Result<impl std::future::Future<Output = Result<(), PublishError>>, PublishError> {
        let value = entry_value(kind, row).map_err(|error| self.bucket_error(error))?;
        let (bucket, key) = (bucket.clone(), bucket_key(kind, &row.key));
        let name = self.view.bucket.clone();
        Ok(async move {
            match bucket.put(key, value.into()).await {
                Ok(_) => Ok(()),
                Err(error) => Err(PublishError::Bucket {
                    bucket: name,
                    reason: error.to_string(),
                }),
            }
        })
    }

    async fn mark(&self, bucket: &kv::Store, seq: i64) -> Result<(), PublishError> {
        let mark = FeedMark {
            instance: self.store.instance().to_string(),
            seq,
        };
        let value = serde_json::to_vec(&mark).map_err(|error| self.bucket_error(error))?;
        bucket
            .put(FEED_KEY, value.into())
            .await
            .map_err(|error| self.bucket_error(error))?;
        Ok(())
    }
}

/// A page of the merged catalog of one kind after `after` (a key) as the view merges it (each
/// key's winner among its servers), as keyed rows, and the key to go on after when more follow.
fn page_of(
    reader: &crate::store::Reader,
    kind: Kind,
    after: Option<&str>,
    view: &View,
) -> Result<(Vec<CatalogRow>, Option<String>), StoreError> {
    let sees = |server: &str| view.sees(server, kind);
    match kind {
        Kind::Resource => reader.list_resources(after, KEYS_PER_READ, &sees),
        Kind::Template => reader.list_templates(after, KEYS_PER_READ, &sees),
        Kind::Tool | Kind::Prompt => {
            let after = after.and_then(|key| key.split_once('/'));
            let (rows, more) = reader.list_entries(kind, None, after, KEYS_PER_READ)?;
            let rows = rows
                .into_iter()
                .map(|row| CatalogRow {
                    key: format!("{}/{}", row.server, row.name),
                    server: row.server,
                    raw: row.raw,
                })
                .collect::<Vec<_>>();
            let next_after = more
                .then(|| rows.last().map(|row| row.key.clone()))
                .flatten();
            Ok((rows, next_after))
        }
    }
}

/// The entry as `catalog/entries` serves it, trimmed and marked oversized past
/// `MAX_VALUE_BYTES`.
fn entry_value(kind: Kind, row: &CatalogRow) -> Result<Vec<u8>, String> {
    let fitted;
    let mut raw = row.raw.as_str();
    if raw.len() as u64 > MAX_VALUE_BYTES {
        fitted = crate::store::entry::fit_entry(raw, kind, MAX_VALUE_BYTES)
            .ok_or_else(|| format!("an entry of {} bytes cannot be trimmed", raw.len()))?;
        raw = &fitted.raw;
    }
    let value = match kind {
        Kind::Resource | Kind::Template => serde_json::to_vec(&StoredObject {
            raw,
            origin: Some(&row.server),
        }),
        Kind::Tool | Kind::Prompt => {
            let name = row.key.get(row.server.len() + 1..).unwrap_or_default();
            let definition = crate::protocol::Definition::served(raw, &row.server, name)
                .map_err(|error| error.to_string())?;
            serde_json::to_vec(&definition)
        }
    };
    value.map_err(|error| error.to_string())
}
