//! The semantic index: a vector per entry of the embedded kinds, made off the swap path by a background thread (and its workers, one per core) from what SQLite holds, the nearest entries to a query's vector, and recent questions' vectors.
//!
//! After every burst of catalog changes the thread reads the entries of the embedded kinds
//! from SQLite (the truth), hashes each entry's text, takes the vectors it already has from the
//! vectors file, embeds the others, and only then publishes the whole set: searches use
//! vectors only for a catalog where every entry has one, and stay lexical meanwhile. The
//! embedding is spread over one worker per core (at most [`MAX_EMBEDDING_WORKERS`]): the first
//! at the daemon's priority, as the one thread always was, so the vectors are made however
//! busy the host is; the others at the lowest (nice 19), so they take only the cores nothing
//! else wants and never starve a search's question (embedded on the search's own thread) or a
//! walk.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock};
use std::time::Duration;

use tokio::sync::{broadcast, watch};

use super::kernel::dot;
use super::questions::QuestionCache;
use super::vectors::VectorFile;
use super::{Encoder, SemanticError};
use crate::config::{Precision, SearchConfig};
use crate::protocol::{Kind, VectorsState, VectorsStatus};
use crate::search::Entry;
use crate::store::{IndexSource, SearchRequest, Store};

/// How often the status's `count` moves while embedding, in entries.
const PROGRESS_EVERY: usize = 64;

/// The most threads that embed a catalog at once: one per core up to this.
pub const MAX_EMBEDDING_WORKERS: usize = 4;
/// The nice value of every embedding worker after the first: they run on what the host's
/// other threads leave idle (`background::lower_this_threads_priority`).
const SECOND_WORKERS_NICE: i32 = 19;

/// One embedded listing, with what a hit shows.
#[derive(Debug, Clone)]
pub struct Document {
    pub entry: Entry,
    /// The entry the merged view shows for its URI template (tools and prompts always are).
    pub wins: bool,
}

/// The vectors of one complete catalog state.
struct Snapshot {
    documents: Vec<Document>,
    /// `documents.len() x dimensions`, row by row.
    matrix: Vec<f32>,
}

pub struct SemanticIndex {
    encoder: OnceLock<Encoder>,
    kinds: Vec<Kind>,
    snapshot: RwLock<Arc<Snapshot>>,
    status: watch::Sender<(VectorsStatus, u64)>,
    questions: Mutex<QuestionCache>,
}

/// The text embedded for an entry: its name with its words apart (`getWeather`,
/// `get_weather` -> `get weather`), title, description and inputs.
pub fn entry_text(entry: &Entry) -> String {
    let mut text = split_identifier(&entry.name);
    for part in [&entry.title, &entry.description, &entry.inputs]
        .into_iter()
        .flatten()
    {
        if !part.is_empty() {
            text.push_str(". ");
            text.push_str(part);
        }
    }
    if matches!(entry.kind, Kind::Template | Kind::Resource) && !entry.uri.is_empty() {
        text.push_str(". ");
        text.push_str(&entry.uri);
    }
    text
}

/// `getWeatherForecast` -> `get Weather Forecast`, `list_files` -> `list files`.
fn split_identifier(name: &str) -> String {
    let mut words = String::with_capacity(name.len() + 8);
    let mut previous: Option<char> = None;
    for character in name.chars() {
        if character == '_' || character == '-' {
            words.push(' ');
        } else {
            if character.is_uppercase() && previous.is_some_and(|p| p.is_lowercase()) {
                words.push(' ');
            }
            words.push(character);
        }
        previous = Some(character);
    }
    words
}

/// Loads the model in a thread of its own and waits for it at most `timeout`: a read that
/// never ends (a file system that hangs) is a model that cannot be used, not a semantic search
/// "loading" for good. Past the deadline the load's thread is left to end by itself, its
/// model dropped. A panic in a dependency while it reads the model's files (the tokenizer's
/// JSON is the model's to choose) is a broken model too.
fn load_within(model: &Path, precision: Precision, timeout: Duration) -> Result<Encoder, String> {
    let (sender, receiver) = std::sync::mpsc::sync_channel(1);
    let path = model.to_path_buf();
    std::thread::Builder::new()
        .name("semantic-load".into())
        .spawn(move || {
            let loaded = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                Encoder::load(&path, precision)
            }));
            let _ = sender.send(loaded);
        })
        .map_err(|error| format!("cannot start the thread that loads the model: {error}"))?;
    match receiver.recv_timeout(timeout) {
        Ok(Ok(Ok(encoder))) => Ok(encoder),
        Ok(Ok(Err(error))) => Err(error.to_string()),
        Ok(Err(_)) | Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
            Err(format!("{}: loading the model panicked", model.display()))
        }
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => Err(format!(
            "{}: loading the model took longer than {timeout:?} ([search] semantic_load_timeout)",
            model.display()
        )),
    }
}

fn text_key(text: &str) -> u64 {
    xxhash_rust::xxh3::xxh3_64(text.as_bytes())
}

impl SemanticIndex {
    /// Starts the thread that loads the model (seconds, at most `load_timeout`) and then keeps
    /// the vectors of `kinds` for `store`, kept in the vectors file beside the database.
    /// `stopping` ends it.
    pub fn start(
        model: &Path,
        search: &SearchConfig,
        store: Store,
        mut stopping: watch::Receiver<bool>,
    ) -> Result<Arc<SemanticIndex>, SemanticError> {
        let (kinds, precision, load_timeout) = (
            search.semantic_kinds.clone(),
            search.semantic_precision,
            search.semantic_load_timeout,
        );
        let status = VectorsStatus {
            state: VectorsState::Loading,
            model: model
                .file_name()
                .map(|name| name.to_string_lossy().into_owned())
                .unwrap_or_else(|| model.display().to_string()),
            dimensions: 0,
            precision,
            kernel: String::new(),
            kinds: kinds.clone(),
            count: 0,
            pending: 0,
            error: None,
        };
        let index = Arc::new(SemanticIndex {
            encoder: OnceLock::new(),
            kinds,
            snapshot: RwLock::new(Arc::new(Snapshot {
                documents: Vec::new(),
                matrix: Vec::new(),
            })),
            status: watch::channel((status, 0)).0,
            questions: Mutex::new(QuestionCache::default()),
        });
        let changes = store.subscribe();
        let stop = Arc::new(AtomicBool::new(false));
        {
            let stop = stop.clone();
            tokio::spawn(async move {
                let _ = stopping.wait_for(|stopped| *stopped).await;
                stop.store(true, Ordering::Release);
            });
        }
        let worker = index.clone();
        let model = model.to_path_buf();
        std::thread::Builder::new()
            .name("semantic-index".into())
            .spawn(move || worker.run(&model, precision, store, changes, stop, load_timeout))
            .map_err(|source| SemanticError::Io {
                action: "start a thread for",
                path: PathBuf::from("the semantic index"),
                source,
            })?;
        Ok(index)
    }

    /// The model, once loaded.
    pub fn encoder(&self) -> Result<&Encoder, SemanticError> {
        self.encoder
            .get()
            .ok_or_else(|| SemanticError::Model("the model is not loaded".into()))
    }

    /// The vector of a search's question: a recent question's from the cache, else embedded
    /// here, on the caller's thread (at normal priority, ahead of the catalog's workers).
    pub fn question_vector(&self, question: &str) -> Result<Arc<[f32]>, SemanticError> {
        let cache = || {
            self.questions
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
        };
        if let Some(vector) = cache().get(question) {
            return Ok(vector);
        }
        let vector: Arc<[f32]> = self.encoder()?.embed(question)?.into();
        cache().insert(question, vector.clone());
        Ok(vector)
    }

    /// The kinds whose entries have vectors.
    pub fn kinds(&self) -> &[Kind] {
        &self.kinds
    }

    pub fn status(&self) -> VectorsStatus {
        self.status.borrow().0.clone()
    }

    /// The status and the catalog version the published vectors reflect, as they change.
    pub fn watch(&self) -> watch::Receiver<(VectorsStatus, u64)> {
        self.status.subscribe()
    }

    /// `Ok` when the vectors answer for the catalog at in-memory version `version`, else why not.
    pub fn serves(&self, version: u64) -> Result<(), String> {
        let (status, caught_up) = &*self.status.borrow();
        match status.state {
            VectorsState::Ready if *caught_up >= version => Ok(()),
            VectorsState::Ready => Err("the vectors are catching up with the latest change".into()),
            VectorsState::Loading => Err("the semantic model is loading".into()),
            VectorsState::Embedding => Err(format!(
                "the vectors are being made ({} of {} entries)",
                status.count,
                status.count + status.pending
            )),
            VectorsState::Failed => Err(format!(
                "the vectors failed ({})",
                status.error.as_deref().unwrap_or("see the log")
            )),
        }
    }

    /// The `depth` documents nearest to `query` (a vector of the model's) that `filter` asks
    /// for (its kinds, server or servers and MIME type; else the merged view's winners),
    /// best first, with their cosine similarity (the model's vectors are unit length). Ties go
    /// to the lower (kind, server, identity), so the order is total.
    pub fn nearest(
        &self,
        query: &[f32],
        filter: &SearchRequest,
        depth: usize,
    ) -> Vec<(f32, Document)> {
        let snapshot = self
            .snapshot
            .read()
            .map(|snapshot| snapshot.clone())
            .unwrap_or_else(|poisoned| poisoned.into_inner().clone());
        let Some(encoder) = self.encoder.get() else {
            return Vec::new();
        };
        let dimensions = encoder.dimensions;
        let mut scored: Vec<(f32, usize)> = Vec::new();
        for (number, document) in snapshot.documents.iter().enumerate() {
            let entry = &document.entry;
            if !filter.kinds.is_empty() && !filter.kinds.contains(&entry.kind) {
                continue;
            }
            let listed = match (&filter.server, &filter.servers) {
                (Some(server), _) => entry.server == *server,
                (None, Some(servers)) => servers.contains(&entry.server),
                (None, None) => document.wins,
            };
            if !listed {
                continue;
            }
            if let Some(mime_type) = &filter.mime_type {
                if entry.mime_type.as_ref() != Some(mime_type) {
                    continue;
                }
            }
            let row = &snapshot.matrix[number * dimensions..(number + 1) * dimensions];
            let similarity = dot(row, query);
            scored.push((similarity, number));
        }
        let order = |left: &(f32, usize), right: &(f32, usize)| {
            right.0.total_cmp(&left.0).then_with(|| {
                let (a, b) = (
                    &snapshot.documents[left.1].entry,
                    &snapshot.documents[right.1].entry,
                );
                (a.kind, &a.server, a.identity()).cmp(&(b.kind, &b.server, b.identity()))
            })
        };
        if scored.len() > depth {
            scored.select_nth_unstable_by(depth, order);
            scored.truncate(depth);
        }
        scored.sort_by(order);
        scored
            .into_iter()
            .map(|(similarity, number)| (similarity, snapshot.documents[number].clone()))
            .collect()
    }

    fn publish_status(&self, change: impl FnOnce(&mut VectorsStatus, &mut u64)) {
        self.status
            .send_modify(|(status, version)| change(status, version));
    }

    /// The thread's loop: the model, then one pass at start and one after each burst of
    /// changes.
    fn run(
        self: Arc<SemanticIndex>,
        model: &Path,
        precision: Precision,
        store: Store,
        mut changes: broadcast::Receiver<crate::store::CatalogChanged>,
        stop: Arc<AtomicBool>,
        load_timeout: Duration,
    ) {
        let stopped = || stop.load(Ordering::Acquire);
        let fail = |error: String| {
            tracing::warn!(%error, "semantic search is off; searches stay lexical");
            self.publish_status(|status, _| {
                status.state = VectorsState::Failed;
                status.error = Some(error);
            });
        };
        let encoder = match load_within(model, precision, load_timeout) {
            Ok(encoder) => encoder,
            Err(error) => return fail(error),
        };
        tracing::info!(
            model = %model.display(),
            dimensions = encoder.dimensions,
            kernel = encoder.isa().name(),
            precision = precision.name(),
            "semantic model loaded"
        );
        let (fingerprint, dimensions, name, kernel) = (
            encoder.fingerprint,
            encoder.dimensions,
            encoder.name.clone(),
            encoder.isa().name(),
        );
        let _ = self.encoder.set(encoder);
        self.publish_status(|status, _| {
            status.dimensions = dimensions;
            status.model = name;
            status.kernel = kernel.into();
        });
        let vectors_path = super::vectors::path_for(store.path());
        let mut file = match VectorFile::open(&vectors_path, fingerprint, dimensions) {
            Ok(file) => file,
            Err(error) => return fail(error.to_string()),
        };
        let mut source = None;
        loop {
            if stopped() {
                break;
            }
            let version = store.catalog_version();
            if source.is_none() {
                source = IndexSource::open(store.path()).ok();
            }
            let outcome = match &mut source {
                Some(source) => self.pass(source, &mut file, version, &stopped),
                None => Err("cannot open the database to read entries".to_string()),
            };
            if let Err(error) = outcome {
                tracing::warn!(%error, "a semantic index pass failed; it is tried again at the next change");
                source = None;
            }
            // Wait for the next change, in short slices so a stop is seen.
            loop {
                if stopped() {
                    break;
                }
                match changes.try_recv() {
                    Ok(_) | Err(broadcast::error::TryRecvError::Lagged(_)) => {
                        // Take the whole burst at once.
                        while let Ok(_) | Err(broadcast::error::TryRecvError::Lagged(_)) =
                            changes.try_recv()
                        {}
                        break;
                    }
                    Err(broadcast::error::TryRecvError::Closed) => return,
                    Err(broadcast::error::TryRecvError::Empty) => {
                        if store.catalog_version() != version {
                            break;
                        }
                        std::thread::sleep(std::time::Duration::from_millis(20));
                    }
                }
            }
        }
        let _ = file.flush();
    }

    /// Reads the embedded kinds' entries, embeds those without a vector, publishes the set.
    /// The entries are streamed into the documents the set publishes (never held twice), and
    /// the texts without a vector are made and embedded in bounded batches
    /// ([`EMBED_BATCH_ENTRIES`], [`EMBED_BATCH_BYTES`]): a re-walk that changes every entry
    /// costs the set itself and one batch, not a second copy of the catalog.
    fn pass(
        &self,
        source: &mut IndexSource,
        file: &mut VectorFile,
        version: u64,
        stopped: &(dyn Fn() -> bool + Sync),
    ) -> Result<(), String> {
        let encoder = self.encoder().map_err(|error| error.to_string())?;
        let snapshot = source.snapshot().map_err(|error| error.to_string())?;
        let priorities = snapshot.priorities().map_err(|error| error.to_string())?;
        let (documents, keys) = snapshot
            .with_kinds(&self.kinds, |entries| documents_of(entries, &priorities))
            .map_err(|error| error.to_string())?;
        drop(snapshot);
        // Each text without a vector, once, however many entries share it: by document number.
        let mut seen = HashSet::new();
        let missing: Vec<usize> = (0..documents.len())
            .filter(|number| file.get(keys[*number]).is_none() && seen.insert(keys[*number]))
            .collect();
        drop(seen);
        let total = documents.len() as u64;
        self.publish_status(|status, _| {
            status.count = total - missing.len() as u64;
            status.pending = missing.len() as u64;
            if !missing.is_empty() {
                status.state = VectorsState::Embedding;
            }
        });
        let mut done = 0usize;
        for batch in text_batches(&missing, |number| {
            (keys[number], entry_text(&documents[number].entry))
        }) {
            let finished = embed_in_parallel(encoder, &batch, stopped, |key, vector| {
                file.insert(key, vector)
                    .map_err(|error| error.to_string())?;
                done += 1;
                if done % PROGRESS_EVERY == 0 {
                    let _ = file.flush();
                    self.publish_status(|status, _| {
                        status.count += PROGRESS_EVERY as u64;
                        status.pending -= PROGRESS_EVERY as u64;
                    });
                }
                Ok(())
            })?;
            if !finished {
                return Ok(());
            }
        }
        file.flush().map_err(|error| error.to_string())?;
        let live: HashSet<u64> = keys.iter().copied().collect();
        file.retain(|key| live.contains(&key))
            .map_err(|error| error.to_string())?;
        let dimensions = encoder.dimensions;
        let mut matrix = Vec::with_capacity(documents.len() * dimensions);
        for key in &keys {
            match file.get(*key) {
                Some(vector) => matrix.extend_from_slice(vector),
                None => return Err("a vector went missing".into()),
            }
        }
        let published = Arc::new(Snapshot { documents, matrix });
        match self.snapshot.write() {
            Ok(mut slot) => *slot = published,
            Err(poisoned) => *poisoned.into_inner() = published,
        }
        self.publish_status(|status, caught_up| {
            status.state = VectorsState::Ready;
            status.count = total;
            status.pending = 0;
            status.error = None;
            *caught_up = version;
        });
        Ok(())
    }
}

/// The most texts one embedding batch holds (the search keeper's catch-up batch).
pub const EMBED_BATCH_ENTRIES: usize = crate::search::keeper::CATCH_UP_BATCH_ENTRIES;

/// The most bytes of text one embedding batch holds (one text past it is a batch of its own).
pub const EMBED_BATCH_BYTES: usize = crate::search::keeper::CATCH_UP_BATCH_BYTES;

/// The documents and their texts' keys, in the order the entries come (kind, then URI or
/// name, then server), each resource's or template's marked the winner of its URI among the
/// servers listing it: the lowest priority, then the lowest name. Holds one URI's listings at
/// a time beside the documents.
fn documents_of(
    entries: &mut dyn Iterator<Item = Entry>,
    priorities: &std::collections::BTreeMap<String, i64>,
) -> (Vec<Document>, Vec<u64>) {
    let mut documents = Vec::new();
    let mut keys = Vec::new();
    let mut group: Vec<Entry> = Vec::new();
    let mut flush = |group: &mut Vec<Entry>| {
        let winner = (0..group.len())
            .min_by_key(|number| {
                let server = &group[*number].server;
                (
                    priorities.get(server).copied().unwrap_or(i64::MAX),
                    server.clone(),
                )
            })
            .unwrap_or(0);
        for (number, entry) in group.drain(..).enumerate() {
            keys.push(text_key(&entry_text(&entry)));
            documents.push(Document {
                entry,
                wins: number == winner,
            });
        }
    };
    for entry in entries {
        let same_group = group.first().is_some_and(|first| {
            matches!(first.kind, Kind::Template | Kind::Resource)
                && first.kind == entry.kind
                && first.uri == entry.uri
        });
        if !same_group {
            flush(&mut group);
        }
        group.push(entry);
    }
    flush(&mut group);
    (documents, keys)
}

/// The texts of `numbers` (made by `text_of` as each batch is taken), in batches of at most
/// [`EMBED_BATCH_ENTRIES`] texts and [`EMBED_BATCH_BYTES`] bytes.
fn text_batches<'a>(
    numbers: &'a [usize],
    text_of: impl Fn(usize) -> (u64, String) + 'a,
) -> impl Iterator<Item = Vec<(u64, String)>> + 'a {
    let mut next = 0;
    std::iter::from_fn(move || {
        let mut batch = Vec::new();
        let mut bytes = 0;
        while let Some(number) = numbers.get(next) {
            let (key, text) = text_of(*number);
            if !batch.is_empty()
                && (batch.len() >= EMBED_BATCH_ENTRIES || bytes + text.len() > EMBED_BATCH_BYTES)
            {
                break;
            }
            bytes += text.len();
            batch.push((key, text));
            next += 1;
        }
        (!batch.is_empty()).then_some(batch)
    })
}

/// Embeds `texts` (key, text) on one worker per core (at most [`MAX_EMBEDDING_WORKERS`]),
/// all but the first at the lowest priority, handing every vector to `store` on this thread as
/// it comes. `Ok(false)` when `stopped` cut it short.
fn embed_in_parallel(
    encoder: &Encoder,
    texts: &[(u64, String)],
    stopped: &(dyn Fn() -> bool + Sync),
    mut store: impl FnMut(u64, Vec<f32>) -> Result<(), String>,
) -> Result<bool, String> {
    if texts.is_empty() {
        return Ok(true);
    }
    let workers = std::thread::available_parallelism()
        .map_or(1, |cores| cores.get())
        .clamp(1, MAX_EMBEDDING_WORKERS)
        .min(texts.len());
    let next = AtomicUsize::new(0);
    // A few vectors in flight per worker: the workers never wait on this thread's writes for
    // long, and a failed write ends them at their next send.
    let (sender, receiver) = std::sync::mpsc::sync_channel(workers * 4);
    std::thread::scope(|scope| {
        for worker in 0..workers {
            let (sender, next) = (sender.clone(), &next);
            std::thread::Builder::new()
                .name("semantic-embed".into())
                .spawn_scoped(scope, move || {
                    // A nice-19 thread gets about 1.5% of a core that a normal one wants: the
                    // first worker keeps the daemon's priority so the vectors always progress.
                    if worker > 0 {
                        crate::background::lower_this_threads_priority(SECOND_WORKERS_NICE);
                    }
                    while !stopped() {
                        let Some((key, text)) = texts.get(next.fetch_add(1, Ordering::Relaxed))
                        else {
                            break;
                        };
                        let outcome = encoder
                            .embed(text)
                            .map(|vector| (*key, vector))
                            .map_err(|error| error.to_string());
                        if sender.send(outcome).is_err() {
                            break;
                        }
                    }
                })
                .map_err(|error| format!("cannot start an embedding thread: {error}"))?;
        }
        drop(sender);
        let mut received = 0;
        for outcome in receiver {
            let (key, vector) = outcome?;
            store(key, vector)?;
            received += 1;
        }
        Ok(received == texts.len())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn texts_are_embedded_in_bounded_batches_covering_every_one() {
        // More texts than one batch holds by count, then texts that fill one by bytes.
        let small = EMBED_BATCH_ENTRIES * 2 + 7;
        let big = 40;
        let numbers: Vec<usize> = (0..small + big).collect();
        let text_of = |number: usize| {
            let size = if number < small {
                10
            } else {
                EMBED_BATCH_BYTES / 8
            };
            (number as u64, "x".repeat(size))
        };
        let batches: Vec<Vec<(u64, String)>> = text_batches(&numbers, text_of).collect();
        assert!(batches.len() >= 3 + big / 8, "{} batches", batches.len());
        for batch in &batches {
            assert!(batch.len() <= EMBED_BATCH_ENTRIES, "{} texts", batch.len());
            let bytes: usize = batch.iter().map(|(_, text)| text.len()).sum();
            assert!(bytes <= EMBED_BATCH_BYTES, "{bytes} bytes");
        }
        let keys: Vec<u64> = batches.iter().flatten().map(|(key, _)| *key).collect();
        assert_eq!(keys, (0..(small + big) as u64).collect::<Vec<_>>());
    }

    #[test]
    fn documents_mark_one_winner_per_uri_by_priority_then_name() {
        let entry = |kind: Kind, server: &str, uri: &str, name: &str| Entry {
            kind,
            server: server.into(),
            uri: uri.into(),
            name: name.into(),
            title: None,
            description: None,
            mime_type: None,
            inputs: None,
        };
        let entries = vec![
            entry(Kind::Resource, "a", "x://1", "one"),
            entry(Kind::Resource, "b", "x://1", "one"),
            entry(Kind::Resource, "c", "x://2", "two"),
            entry(Kind::Tool, "a", "", "tool"),
            entry(Kind::Tool, "b", "", "tool"),
        ];
        let priorities = [("a".to_string(), 5), ("b".to_string(), 1)]
            .into_iter()
            .collect();
        let (documents, keys) = documents_of(&mut entries.into_iter(), &priorities);
        let wins: Vec<bool> = documents.iter().map(|document| document.wins).collect();
        assert_eq!(wins, [false, true, true, true, true]);
        assert_eq!(keys.len(), documents.len());
    }

    #[test]
    fn identifiers_are_split_into_words() {
        assert_eq!(
            split_identifier("getWeatherForecast"),
            "get Weather Forecast"
        );
        assert_eq!(split_identifier("list_files"), "list files");
        assert_eq!(split_identifier("search-repos"), "search repos");
        assert_eq!(split_identifier("HTMLParser"), "HTMLParser");
    }
}
