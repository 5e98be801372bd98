//! A spec-following MCP test server serving a synthetic resource catalog over stdio or HTTP.
//!
//! It speaks the handshake era of MCP (2024-11-05 through 2025-11-25), reloads
//! a JSON scenario file when it changes, injects pagination faults on request
//! and records request counters in a stats file so tests can assert on them.

use std::collections::{HashMap, HashSet};
use std::io::{BufRead as _, IsTerminal as _, Write as _};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context as _};
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderName, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::any;
use axum::Router;
use clap::Parser;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use tokio::sync::{broadcast, mpsc};
use tracing::{debug, info, warn};

const SUPPORTED_VERSIONS: [&str; 4] = ["2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"];
const LATEST_VERSION: &str = "2025-11-25";
const CURSOR_PREFIX: &str = "mcp-fixture-cursor:";
const SESSION_HEADER: HeaderName = HeaderName::from_static("mcp-session-id");
const PROTOCOL_VERSION_HEADER: HeaderName = HeaderName::from_static("mcp-protocol-version");
const MIME_TYPES: [&str; 3] = ["text/markdown", "text/plain", "application/json"];
const BASE64_ALPHABET: &[u8; 64] =
    b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// Command line of the fixture server.
#[derive(Parser, Debug)]
#[command(version, about = "MCP test server with a synthetic resource catalog")]
struct Args {
    /// Number of resources to synthesize (a scenario's `generate` overrides it).
    #[arg(long, default_value_t = 0)]
    generate: usize,
    /// JSON scenario file, polled every 100 ms and reloaded when it changes.
    #[arg(long)]
    scenario: Option<PathBuf>,
    /// Resources per `resources/list` page (a scenario's `page_size` overrides it).
    #[arg(long, default_value_t = 50)]
    page_size: usize,
    /// Serve Streamable HTTP at `/mcp` on this loopback address instead of stdio.
    #[arg(long)]
    http: Option<SocketAddr>,
    /// Answer POSTed requests with a `text/event-stream` body instead of JSON.
    #[arg(long, requires = "http")]
    sse: bool,
    /// Write request counters to this JSON file after every served request.
    #[arg(long)]
    stats: Option<PathBuf>,
    /// Server name used in `serverInfo` and in generated URIs.
    #[arg(long, default_value = "mcp-fixture")]
    name: String,
}

/// A scenario file as written by a test; every field is optional.
#[derive(Deserialize, Default)]
#[serde(default, deny_unknown_fields)]
struct Scenario {
    generate: Option<usize>,
    prefix: Option<String>,
    resources: Vec<Value>,
    templates: Option<Vec<Value>>,
    page_size: Option<usize>,
    capabilities_resources: Option<bool>,
    faults: Faults,
}

/// Misbehaviours a scenario can switch on to exercise a client's error paths.
#[derive(Deserialize, Default, Clone)]
#[serde(default, deny_unknown_fields)]
struct Faults {
    fail_at_page: Option<usize>,
    loop_cursor: bool,
    stale_cursor_once: bool,
    duplicate_every: Option<usize>,
    page_delay_ms: Option<u64>,
    empty_string_cursor: bool,
    exit_at_page: Option<usize>,
}

/// One immutable version of the served catalog; a scenario change swaps in a new one.
struct Catalog {
    version: u64,
    resources: Vec<Value>,
    index_by_uri: HashMap<String, usize>,
    templates: Vec<Value>,
    page_size: usize,
    resources_capability: bool,
    faults: Faults,
}

/// Request counters, serialized as-is into the stats file.
#[derive(Serialize, Default, Clone)]
struct Counters {
    initialize: u64,
    sessions: u64,
    walks: u64,
    pages: u64,
    template_lists: u64,
    reads: u64,
    catalog_version: u64,
}

/// Everything that requests mutate, behind one lock that is never held across an await.
struct Shared {
    catalog: Arc<Catalog>,
    counters: Counters,
    http_sessions: HashSet<String>,
}

/// The server state shared by the transport, the request tasks and the scenario watcher.
struct Fixture {
    args: Args,
    shared: Mutex<Shared>,
    stale_cursor_fired: AtomicBool,
    list_changed: broadcast::Sender<u64>,
    next_event_id: AtomicU64,
    next_session_number: AtomicU64,
}

/// A JSON-RPC error to put in a response.
struct RpcError {
    code: i64,
    message: String,
}

/// Why a request produced no result.
enum Failure {
    Rpc(RpcError),
    /// The stdio process must exit with this code without answering.
    Exit(i32),
}

/// What to send back for one request.
enum Reply {
    Message(Value),
    Exit(i32),
}

/// A JSON-RPC message sorted by kind.
enum Incoming {
    Request {
        id: Value,
        method: String,
        params: Option<Value>,
    },
    Notification {
        method: String,
    },
    Response,
}

impl RpcError {
    fn new(code: i64, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }
}

impl From<RpcError> for Failure {
    fn from(error: RpcError) -> Self {
        Failure::Rpc(error)
    }
}

fn method_not_found(method: &str) -> Failure {
    RpcError::new(-32601, format!("method not found: {method}")).into()
}

fn invalid_params(message: &str) -> Failure {
    RpcError::new(-32602, message).into()
}

fn error_message(id: Value, error: &RpcError) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": error.code, "message": error.message}})
}

fn result_message(id: Value, result: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "result": result})
}

/// Parses one message and sorts it by kind, or says why it is not valid JSON-RPC.
fn parse_message(bytes: &[u8]) -> Result<Incoming, (Value, RpcError)> {
    let message: Value = serde_json::from_slice(bytes).map_err(|error| {
        let error = RpcError::new(-32700, format!("parse error: {error}"));
        (Value::Null, error)
    })?;
    let Value::Object(mut object) = message else {
        return Err((
            Value::Null,
            RpcError::new(-32600, "expected a JSON-RPC object"),
        ));
    };
    let id = object.remove("id");
    if object.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        let error = RpcError::new(-32600, "jsonrpc must be \"2.0\"");
        return Err((id.unwrap_or(Value::Null), error));
    }
    match (object.remove("method"), id) {
        (Some(Value::String(method)), Some(id)) => Ok(Incoming::Request {
            id,
            method,
            params: object.remove("params"),
        }),
        (Some(Value::String(method)), None) => Ok(Incoming::Notification { method }),
        (None, Some(_)) if object.contains_key("result") || object.contains_key("error") => {
            Ok(Incoming::Response)
        }
        (_, id) => Err((
            id.unwrap_or(Value::Null),
            RpcError::new(-32600, "not a JSON-RPC request, notification or response"),
        )),
    }
}

impl Catalog {
    /// Builds a catalog from the command line settings overlaid with a scenario.
    fn build(args: &Args, scenario: &Scenario, version: u64) -> anyhow::Result<Self> {
        let page_size = scenario.page_size.unwrap_or(args.page_size);
        if page_size == 0 {
            bail!("page_size must be at least 1");
        }
        let generate = scenario.generate.unwrap_or(args.generate);
        let prefix = scenario.prefix.as_deref();
        let mut resources: Vec<Value> = (0..generate)
            .map(|index| generated_resource(&args.name, index, prefix))
            .collect();
        resources.extend(scenario.resources.iter().cloned());
        let mut index_by_uri = HashMap::new();
        for (position, resource) in resources.iter().enumerate() {
            let Some(uri) = resource.get("uri").and_then(Value::as_str) else {
                bail!("resource {position} has no string \"uri\"");
            };
            index_by_uri.entry(uri.to_owned()).or_insert(position);
        }
        let templates = match &scenario.templates {
            Some(templates) => templates.clone(),
            None => default_templates(&args.name),
        };
        Ok(Self {
            version,
            resources,
            index_by_uri,
            templates,
            page_size,
            resources_capability: scenario.capabilities_resources.unwrap_or(true),
            faults: scenario.faults.clone(),
        })
    }

    fn encode_cursor(&self, offset: usize) -> String {
        if offset == self.page_size && self.faults.empty_string_cursor {
            return String::new();
        }
        base64_encode(format!("{CURSOR_PREFIX}{}:{offset}", self.version).as_bytes())
    }

    /// Turns a cursor back into an offset, or `None` when it is malformed or from another version.
    fn decode_cursor(&self, cursor: &str) -> Option<usize> {
        let offset = if cursor.is_empty() {
            if !self.faults.empty_string_cursor {
                return None;
            }
            self.page_size
        } else {
            let text = String::from_utf8(base64_decode(cursor)?).ok()?;
            let (version, offset) = text.strip_prefix(CURSOR_PREFIX)?.split_once(':')?;
            if version.parse::<u64>().ok()? != self.version {
                return None;
            }
            offset.parse::<usize>().ok()?
        };
        let in_range = offset % self.page_size == 0 && offset < self.resources.len();
        (in_range || self.faults.loop_cursor).then_some(offset)
    }

    /// Whether the `duplicate_every` fault lists the resource at `position` twice.
    fn is_duplicated(&self, position: usize) -> bool {
        let every = self.faults.duplicate_every.unwrap_or(0);
        every > 0 && (position + 1) % every == 0
    }

    /// Builds the `resources/list` result for the page that starts at `offset`.
    fn page(&self, offset: usize) -> Value {
        let total = self.resources.len();
        let start = if self.faults.loop_cursor { 0 } else { offset };
        let end = (start + self.page_size).min(total);
        let next_offset = if self.faults.loop_cursor {
            Some(self.page_size)
        } else {
            (end < total).then_some(end)
        };
        // A duplicated resource is repeated at the top of the following page, or
        // at the end of its own page when there is no following page.
        let duplicated = |position: &usize| self.is_duplicated(*position);
        let mut items: Vec<Value> = Vec::new();
        if start > 0 {
            let previous = start.saturating_sub(self.page_size)..start;
            items.extend(
                previous
                    .filter(duplicated)
                    .map(|i| self.resources[i].clone()),
            );
        }
        items.extend_from_slice(&self.resources[start..end]);
        if next_offset.is_none() {
            items.extend(
                (start..end)
                    .filter(duplicated)
                    .map(|i| self.resources[i].clone()),
            );
        }
        let mut result = json!({ "resources": items });
        if let Some(next_offset) = next_offset {
            result["nextCursor"] = Value::String(self.encode_cursor(next_offset));
        }
        result
    }
}

/// Synthesizes resource `index`, filling in every optional Resource field.
fn generated_resource(name: &str, index: usize, prefix: Option<&str>) -> Value {
    let suffix = prefix
        .map(|prefix| format!(" {prefix}"))
        .unwrap_or_default();
    let topic = index % 37;
    let audience = if index % 2 == 0 { "user" } else { "assistant" };
    json!({
        "uri": format!("fixture://{name}/docs/{index:06}.md"),
        "name": format!("doc-{index:06}"),
        "title": format!("Document {index}{suffix}"),
        "description": format!("Synthetic document number {index} about topic-{topic}{suffix}"),
        "mimeType": MIME_TYPES[index % MIME_TYPES.len()],
        "size": 1000 + index,
        "annotations": {
            "audience": [audience],
            "priority": (index % 10) as f64 / 10.0,
            "lastModified": "2026-01-01T00:00:00Z",
        },
        "icons": [
            {"src": "https://example.invalid/icon.png", "mimeType": "image/png", "sizes": ["16x16"]}
        ],
        "_meta": {"fixture/index": index},
    })
}

fn default_templates(server: &str) -> Vec<Value> {
    let template = |path: &str, name: &str, title: &str, mime_type: &str| {
        json!({
            "uriTemplate": format!("fixture://{server}/{path}"),
            "name": name,
            "title": title,
            "description": format!("{title} in the synthetic catalog"),
            "mimeType": mime_type,
        })
    };
    vec![
        template(
            "docs/{id}.md",
            "doc-by-id",
            "Document by id",
            "text/markdown",
        ),
        template(
            "topics/{topic}",
            "docs-by-topic",
            "Documents by topic",
            "application/json",
        ),
        template(
            "search{?q,limit}",
            "search",
            "Search documents",
            "application/json",
        ),
    ]
}

impl Fixture {
    fn new(args: Args, catalog: Catalog) -> Self {
        let counters = Counters {
            catalog_version: catalog.version,
            ..Counters::default()
        };
        Self {
            args,
            shared: Mutex::new(Shared {
                catalog: Arc::new(catalog),
                counters,
                http_sessions: HashSet::new(),
            }),
            stale_cursor_fired: AtomicBool::new(false),
            list_changed: broadcast::channel(16).0,
            next_event_id: AtomicU64::new(1),
            next_session_number: AtomicU64::new(1),
        }
    }

    /// Locks the shared state; poison is ignored because no holder leaves it half-updated.
    fn shared(&self) -> MutexGuard<'_, Shared> {
        self.shared.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Bumps counters and returns the current catalog in one critical section.
    fn count(&self, bump: impl FnOnce(&mut Counters)) -> Arc<Catalog> {
        let mut shared = self.shared();
        bump(&mut shared.counters);
        Arc::clone(&shared.catalog)
    }

    /// Writes the counters atomically (tmp file, then rename); a failure is logged, not fatal.
    fn write_stats(&self) {
        let Some(path) = &self.args.stats else {
            return;
        };
        // The lock is held during the write so that concurrent writers cannot
        // interleave on the tmp file or rename an older snapshot over a newer one.
        let shared = self.shared();
        let mut counters = shared.counters.clone();
        counters.catalog_version = shared.catalog.version;
        let mut tmp_path = path.clone().into_os_string();
        tmp_path.push(".tmp");
        let written = serde_json::to_vec(&counters)
            .map_err(anyhow::Error::from)
            .and_then(|bytes| Ok(std::fs::write(&tmp_path, bytes)?))
            .and_then(|()| Ok(std::fs::rename(&tmp_path, path)?));
        if let Err(error) = written {
            warn!(path = %path.display(), %error, "cannot write stats file");
        }
    }

    /// Swaps in the catalog of a new scenario, bumps the version and tells every session.
    fn apply_scenario(&self, scenario: &Scenario) -> anyhow::Result<u64> {
        let mut catalog = Catalog::build(&self.args, scenario, 0)?;
        let version = {
            let mut shared = self.shared();
            catalog.version = shared.catalog.version + 1;
            shared.catalog = Arc::new(catalog);
            shared.catalog.version
        };
        self.write_stats();
        // Nobody listening (no stdio session yet, or HTTP) is not an error.
        let _ = self.list_changed.send(version);
        Ok(version)
    }

    /// Answers one request and records it in the stats file before the answer leaves.
    async fn serve(&self, id: Value, method: &str, params: Option<Value>) -> Reply {
        debug!(method, %id, "request");
        let outcome = self.dispatch(method, params.as_ref()).await;
        self.write_stats();
        match outcome {
            Ok(result) => Reply::Message(result_message(id, result)),
            Err(Failure::Rpc(error)) => Reply::Message(error_message(id, &error)),
            Err(Failure::Exit(code)) => Reply::Exit(code),
        }
    }

    async fn dispatch(&self, method: &str, params: Option<&Value>) -> Result<Value, Failure> {
        match method {
            "initialize" => Ok(self.initialize(params)),
            "ping" => Ok(json!({})),
            "resources/list" => self.list_resources(params).await,
            "resources/templates/list" => self.list_templates(),
            "resources/read" => self.read_resource(params),
            _ => Err(method_not_found(method)),
        }
    }

    fn initialize(&self, params: Option<&Value>) -> Value {
        let stdio = self.args.http.is_none();
        let catalog = self.count(|counters| {
            counters.initialize += 1;
            // On stdio the process is the session; HTTP counts sessions as it creates them.
            if stdio {
                counters.sessions = 1;
            }
        });
        let requested = params
            .and_then(|params| params.get("protocolVersion"))
            .and_then(Value::as_str);
        let version = requested
            .filter(|version| SUPPORTED_VERSIONS.contains(version))
            .unwrap_or(LATEST_VERSION);
        let mut capabilities = json!({});
        if catalog.resources_capability {
            capabilities["resources"] = json!({"listChanged": true, "subscribe": false});
        }
        json!({
            "protocolVersion": version,
            "capabilities": capabilities,
            "serverInfo": {"name": self.args.name, "version": env!("CARGO_PKG_VERSION")},
        })
    }

    async fn list_resources(&self, params: Option<&Value>) -> Result<Value, Failure> {
        let cursor = match params.and_then(|params| params.get("cursor")) {
            None | Some(Value::Null) => None,
            Some(Value::String(cursor)) => Some(cursor.as_str()),
            Some(_) => return Err(invalid_params("cursor must be a string")),
        };
        let catalog = self.count(|counters| {
            counters.pages += 1;
            if cursor.is_none() {
                counters.walks += 1;
            }
        });
        if !catalog.resources_capability {
            return Err(method_not_found("resources/list"));
        }
        if let Some(delay) = catalog.faults.page_delay_ms {
            tokio::time::sleep(Duration::from_millis(delay)).await;
            // The catalog may have changed while this request slept; answer from the current one.
        }
        let catalog = self.count(|_| {});
        let faults = &catalog.faults;
        let offset = match cursor {
            None => 0,
            Some(cursor) => {
                if faults.stale_cursor_once && !self.stale_cursor_fired.swap(true, Ordering::SeqCst)
                {
                    return Err(invalid_params("stale cursor"));
                }
                catalog
                    .decode_cursor(cursor)
                    .ok_or_else(|| invalid_params("invalid or stale cursor"))?
            }
        };
        let page_number = offset / catalog.page_size + 1;
        if faults.exit_at_page == Some(page_number) {
            if self.args.http.is_none() {
                warn!(page_number, "exiting on request of the exit_at_page fault");
                return Err(Failure::Exit(3));
            }
            warn!(
                page_number,
                "exit_at_page applies to stdio only; ignoring it"
            );
        }
        if faults.fail_at_page == Some(page_number) {
            return Err(RpcError::new(-32603, "injected failure").into());
        }
        Ok(catalog.page(offset))
    }

    fn list_templates(&self) -> Result<Value, Failure> {
        let catalog = self.count(|counters| counters.template_lists += 1);
        if !catalog.resources_capability {
            return Err(method_not_found("resources/templates/list"));
        }
        Ok(json!({ "resourceTemplates": catalog.templates }))
    }

    fn read_resource(&self, params: Option<&Value>) -> Result<Value, Failure> {
        let catalog = self.count(|counters| counters.reads += 1);
        if !catalog.resources_capability {
            return Err(method_not_found("resources/read"));
        }
        let uri = params
            .and_then(|params| params.get("uri"))
            .and_then(Value::as_str)
            .ok_or_else(|| invalid_params("uri must be a string"))?;
        let Some(&position) = catalog.index_by_uri.get(uri) else {
            return Err(RpcError::new(-32002, "resource not found").into());
        };
        if uri.ends_with(".bin") {
            let bytes: Vec<u8> = (0..=255).collect();
            let blob = base64_encode(&bytes);
            let content = json!({"uri": uri, "mimeType": "application/octet-stream", "blob": blob});
            return Ok(json!({ "contents": [content] }));
        }
        let mime_type = catalog.resources[position]
            .get("mimeType")
            .and_then(Value::as_str)
            .unwrap_or("text/plain");
        let content =
            json!({"uri": uri, "mimeType": mime_type, "text": format!("contents of {uri}")});
        Ok(json!({ "contents": [content] }))
    }

    fn new_session_id(&self) -> String {
        let number = self.next_session_number.fetch_add(1, Ordering::Relaxed);
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |elapsed| elapsed.as_nanos() as u64);
        let mixed = nanos
            ^ (u64::from(std::process::id()) << 40)
            ^ number.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        format!("{mixed:016x}{number:04x}")
    }
}

/// Standard base64 with padding, enough for blobs and cursors without another dependency.
fn base64_encode(bytes: &[u8]) -> String {
    let mut encoded = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let byte_at = |i: usize| u32::from(chunk.get(i).copied().unwrap_or(0));
        let group = (byte_at(0) << 16) | (byte_at(1) << 8) | byte_at(2);
        for sextet in 0..4 {
            if sextet <= chunk.len() {
                let value = (group >> (18 - 6 * sextet)) & 63;
                encoded.push(char::from(BASE64_ALPHABET[value as usize]));
            } else {
                encoded.push('=');
            }
        }
    }
    encoded
}

/// Decodes canonical standard base64; anything that would not re-encode identically is rejected.
fn base64_decode(text: &str) -> Option<Vec<u8>> {
    if text.len() % 4 != 0 {
        return None;
    }
    let mut decoded = Vec::with_capacity(text.len() / 4 * 3);
    for chunk in text.as_bytes().chunks(4) {
        let padding = chunk.iter().rev().take_while(|&&c| c == b'=').count();
        let mut group = 0u32;
        for &c in &chunk[..4 - padding] {
            let value = BASE64_ALPHABET.iter().position(|&a| a == c)?;
            group = (group << 6) | value as u32;
        }
        group <<= 6 * padding;
        let bytes = [(group >> 16) as u8, (group >> 8) as u8, group as u8];
        decoded.extend_from_slice(bytes.get(..3usize.checked_sub(padding)?)?);
    }
    (base64_encode(&decoded) == text).then_some(decoded)
}

/// Reads and parses a scenario file.
async fn load_scenario(path: &Path) -> anyhow::Result<Scenario> {
    let bytes = tokio::fs::read(path)
        .await
        .with_context(|| format!("while reading scenario {}", path.display()))?;
    serde_json::from_slice(&bytes)
        .with_context(|| format!("while parsing scenario {}", path.display()))
}

/// What the watcher compares to notice a changed scenario file.
type Fingerprint = Option<(Option<SystemTime>, u64)>;

async fn fingerprint_of(path: &Path) -> Fingerprint {
    let metadata = tokio::fs::metadata(path).await.ok()?;
    Some((metadata.modified().ok(), metadata.len()))
}

/// Polls the scenario file every 100 ms and applies it whenever its mtime or size changes.
async fn watch_scenario(fixture: Arc<Fixture>, path: PathBuf, mut last_seen: Fingerprint) {
    let mut ticker = tokio::time::interval(Duration::from_millis(100));
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        let current = fingerprint_of(&path).await;
        if current == last_seen {
            continue;
        }
        last_seen = current;
        if current.is_none() {
            warn!(path = %path.display(), "scenario file is gone; keeping the previous scenario");
            continue;
        }
        let applied = match load_scenario(&path).await {
            Ok(scenario) => fixture.apply_scenario(&scenario),
            Err(error) => Err(error),
        };
        match applied {
            Ok(version) => {
                info!(path = %path.display(), catalog_version = version, "scenario reloaded")
            }
            Err(error) => {
                warn!(path = %path.display(), error = format!("{error:#}"), "ignoring bad scenario")
            }
        }
    }
}

/// A line for the stdio writer task, or the order to exit once earlier lines are out.
enum Outgoing {
    Line(String),
    Exit(i32),
}

/// Serves newline-delimited JSON-RPC on stdin and stdout until stdin closes.
async fn serve_stdio(fixture: Arc<Fixture>) -> anyhow::Result<()> {
    // The crate's tokio has no `io-std` feature, so two plain threads own the
    // blocking stdin and stdout; one writer also keeps answers from interleaving.
    let (outgoing, outgoing_queue) = mpsc::unbounded_channel::<Outgoing>();
    let writer = std::thread::Builder::new()
        .name("stdout-writer".into())
        .spawn(move || write_stdout(outgoing_queue))
        .context("while starting the stdout writer")?;
    let (line_sender, mut lines) = mpsc::channel::<std::io::Result<Vec<u8>>>(64);
    std::thread::Builder::new()
        .name("stdin-reader".into())
        .spawn(move || read_stdin(&line_sender))
        .context("while starting the stdin reader")?;

    let mut list_changed = fixture.list_changed.subscribe();
    let mut session_started = false;
    loop {
        tokio::select! {
            line = lines.recv() => {
                let Some(line) = line else {
                    break;
                };
                let line = line.context("while reading stdin")?;
                let trimmed = line.trim_ascii();
                if trimmed.is_empty() {
                    continue;
                }
                let incoming = parse_message(trimmed);
                match incoming {
                    Err((id, error)) => {
                        let line = error_message(id, &error).to_string();
                        let _ = outgoing.send(Outgoing::Line(line));
                    }
                    Ok(Incoming::Request { id, method, params }) => {
                        session_started |= method == "initialize";
                        let fixture = Arc::clone(&fixture);
                        let outgoing = outgoing.clone();
                        // A task per request keeps a slow page from blocking the reader.
                        tokio::spawn(async move {
                            let item = match fixture.serve(id, &method, params).await {
                                Reply::Message(message) => Outgoing::Line(message.to_string()),
                                Reply::Exit(code) => Outgoing::Exit(code),
                            };
                            let _ = outgoing.send(item);
                        });
                    }
                    Ok(Incoming::Notification { method }) => debug!(method, "notification"),
                    Ok(Incoming::Response) => debug!("ignoring a response from the client"),
                }
            }
            changed = list_changed.recv() => {
                // A lagged receiver still means the list changed; one notification covers them all.
                use broadcast::error::RecvError;
                let changed = matches!(changed, Ok(_) | Err(RecvError::Lagged(_)));
                if changed && session_started {
                    let method = "notifications/resources/list_changed";
                    let notification = json!({"jsonrpc": "2.0", "method": method});
                    let _ = outgoing.send(Outgoing::Line(notification.to_string()));
                }
            }
        }
    }
    // Answer the requests still in flight, then exit 0: the writer ends when the last sender drops.
    drop(outgoing);
    let joined = tokio::task::spawn_blocking(move || writer.join()).await;
    if !matches!(joined, Ok(Ok(()))) {
        bail!("the stdout writer failed");
    }
    Ok(())
}

/// Forwards stdin line by line until end of file or a read error.
fn read_stdin(lines: &mpsc::Sender<std::io::Result<Vec<u8>>>) {
    let mut stdin = std::io::stdin().lock();
    loop {
        let mut line = Vec::new();
        match stdin.read_until(b'\n', &mut line) {
            Ok(0) => return,
            Ok(_) => {
                if lines.blocking_send(Ok(line)).is_err() {
                    return;
                }
            }
            Err(error) => {
                let _ = lines.blocking_send(Err(error));
                return;
            }
        }
    }
}

/// Writes queued lines to stdout, flushing each, and exits the process when told to.
fn write_stdout(mut queue: mpsc::UnboundedReceiver<Outgoing>) {
    let mut stdout = std::io::stdout().lock();
    while let Some(item) = queue.blocking_recv() {
        match item {
            Outgoing::Line(line) => {
                if let Err(error) = writeln!(stdout, "{line}").and_then(|()| stdout.flush()) {
                    warn!(%error, "cannot write to stdout; dropping further output");
                    return;
                }
            }
            Outgoing::Exit(code) => {
                let _ = stdout.flush();
                std::process::exit(code);
            }
        }
    }
}

/// Serves Streamable HTTP at `/mcp` on a loopback address until the process is killed.
async fn serve_http(fixture: Arc<Fixture>, address: SocketAddr) -> anyhow::Result<()> {
    if !address.ip().is_loopback() {
        bail!("refusing to listen on non-loopback address {address}: use 127.0.0.1 or [::1]");
    }
    let listener = tokio::net::TcpListener::bind(address)
        .await
        .with_context(|| format!("while binding {address}"))?;
    let local = listener
        .local_addr()
        .context("while reading the bound address")?;
    let router = Router::new()
        .route("/mcp", any(mcp_endpoint))
        .with_state(fixture);
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "listening on http://{local}/mcp").context("while announcing the address")?;
    stdout.flush().context("while announcing the address")?;
    drop(stdout);
    info!(%local, "serving streamable http");
    axum::serve(listener, router)
        .await
        .context("while serving http")
}

async fn mcp_endpoint(
    State(fixture): State<Arc<Fixture>>,
    method: Method,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    match method {
        Method::POST => post_message(&fixture, &headers, &body).await,
        Method::DELETE => delete_session(&fixture, &headers),
        // This version has no server-to-client GET stream.
        _ => (
            StatusCode::METHOD_NOT_ALLOWED,
            [(header::ALLOW, "POST, DELETE")],
        )
            .into_response(),
    }
}

fn json_response(status: StatusCode, message: &Value) -> Response {
    let content_type = [(header::CONTENT_TYPE, "application/json")];
    (status, content_type, message.to_string()).into_response()
}

fn json_error(status: StatusCode, id: Value, error: RpcError) -> Response {
    json_response(status, &error_message(id, &error))
}

fn accepts_json_and_event_stream(headers: &HeaderMap) -> bool {
    let accept = headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .collect::<Vec<_>>()
        .join(",")
        .to_ascii_lowercase();
    accept.contains("application/json") && accept.contains("text/event-stream")
}

/// The session id header, if present and readable.
fn session_id(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(SESSION_HEADER)
        .and_then(|value| value.to_str().ok())
}

async fn post_message(fixture: &Fixture, headers: &HeaderMap, body: &[u8]) -> Response {
    if !accepts_json_and_event_stream(headers) {
        let message = "Accept must list both application/json and text/event-stream";
        return (StatusCode::NOT_ACCEPTABLE, message).into_response();
    }
    let incoming = parse_message(body);
    let incoming = match incoming {
        Ok(incoming) => incoming,
        Err((id, error)) => return json_error(StatusCode::BAD_REQUEST, id, error),
    };
    if let Incoming::Request { method, .. } = &incoming {
        if method == "initialize" {
            return initialize_session(fixture, incoming).await;
        }
    }
    let request_id = match &incoming {
        Incoming::Request { id, .. } => id.clone(),
        _ => Value::Null,
    };
    let Some(session) = session_id(headers) else {
        let error = RpcError::new(-32600, "missing session id");
        return json_error(StatusCode::BAD_REQUEST, request_id, error);
    };
    if !fixture.shared().http_sessions.contains(session) {
        let error = RpcError::new(-32001, "session not found");
        return json_error(StatusCode::NOT_FOUND, request_id, error);
    }
    if let Some(version) = headers.get(PROTOCOL_VERSION_HEADER) {
        let version = version.to_str().unwrap_or_default();
        if !SUPPORTED_VERSIONS.contains(&version) {
            let error = RpcError::new(-32600, format!("unsupported protocol version {version:?}"));
            return json_error(StatusCode::BAD_REQUEST, request_id, error);
        }
    }
    match incoming {
        Incoming::Request { id, method, params } => {
            let reply = fixture.serve(id, &method, params).await;
            respond(fixture, reply, None)
        }
        Incoming::Notification { method } => {
            debug!(method, "notification");
            StatusCode::ACCEPTED.into_response()
        }
        Incoming::Response => StatusCode::ACCEPTED.into_response(),
    }
}

/// Creates a session for an `initialize` request and returns its id in `Mcp-Session-Id`.
async fn initialize_session(fixture: &Fixture, incoming: Incoming) -> Response {
    let Incoming::Request { id, method, params } = incoming else {
        return StatusCode::INTERNAL_SERVER_ERROR.into_response();
    };
    let session = fixture.new_session_id();
    {
        let mut shared = fixture.shared();
        shared.http_sessions.insert(session.clone());
        shared.counters.sessions = shared.http_sessions.len() as u64;
    }
    info!(%session, "session created");
    let reply = fixture.serve(id, &method, params).await;
    respond(fixture, reply, Some(&session))
}

fn respond(fixture: &Fixture, reply: Reply, session: Option<&str>) -> Response {
    let Reply::Message(message) = reply else {
        return StatusCode::INTERNAL_SERVER_ERROR.into_response();
    };
    let mut response = if fixture.args.sse {
        let event_id = fixture.next_event_id.fetch_add(1, Ordering::Relaxed);
        let headers = [
            (header::CONTENT_TYPE, "text/event-stream"),
            (header::CACHE_CONTROL, "no-cache"),
        ];
        (StatusCode::OK, headers, sse_body(event_id, &message)).into_response()
    } else {
        json_response(StatusCode::OK, &message)
    };
    if let Some(value) = session.and_then(|session| HeaderValue::from_str(session).ok()) {
        response.headers_mut().insert(SESSION_HEADER, value);
    }
    response
}

/// Renders one message as an SSE body that exercises a client's parser.
///
/// A comment comes first (with a bare LF), then one `message` event with CRLF
/// line endings whose JSON is split over two `data:` lines; SSE joins them
/// with "\n", which is insignificant whitespace in JSON.
fn sse_body(event_id: u64, message: &Value) -> String {
    let json = message.to_string();
    let split_at = first_comma_outside_strings(&json).map_or(json.len(), |comma| comma + 1);
    let (head, tail) = json.split_at(split_at);
    format!(
        ": fixture keep-alive\n\
         event: message\r\nid: {event_id}\r\ndata: {head}\r\ndata: {tail}\r\n\r\n"
    )
}

/// The byte index of the first comma that is JSON syntax rather than part of a string.
fn first_comma_outside_strings(json: &str) -> Option<usize> {
    let mut in_string = false;
    let mut escaped = false;
    for (index, byte) in json.bytes().enumerate() {
        match (in_string, escaped, byte) {
            (true, true, _) => escaped = false,
            (true, false, b'\\') => escaped = true,
            (_, _, b'"') => in_string = !in_string,
            (false, _, b',') => return Some(index),
            _ => {}
        }
    }
    None
}

fn delete_session(fixture: &Fixture, headers: &HeaderMap) -> Response {
    let Some(session) = session_id(headers) else {
        let error = RpcError::new(-32600, "missing session id");
        return json_error(StatusCode::BAD_REQUEST, Value::Null, error);
    };
    let removed = {
        let mut shared = fixture.shared();
        let removed = shared.http_sessions.remove(session);
        shared.counters.sessions = shared.http_sessions.len() as u64;
        removed
    };
    if !removed {
        return StatusCode::NOT_FOUND.into_response();
    }
    info!(%session, "session deleted");
    fixture.write_stats();
    StatusCode::OK.into_response()
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    let args = Args::parse();
    if args.page_size == 0 {
        bail!("--page-size must be at least 1");
    }
    // The fingerprint is taken before the read so that a write racing with it is seen as a change.
    let (scenario, fingerprint) = match &args.scenario {
        Some(path) => {
            let fingerprint = fingerprint_of(path).await;
            (load_scenario(path).await?, fingerprint)
        }
        None => (Scenario::default(), None),
    };
    let catalog =
        Catalog::build(&args, &scenario, 1).context("while building the initial catalog")?;
    let (scenario_path, http) = (args.scenario.clone(), args.http);
    let fixture = Arc::new(Fixture::new(args, catalog));
    fixture.write_stats();
    if let Some(path) = scenario_path {
        tokio::spawn(watch_scenario(Arc::clone(&fixture), path, fingerprint));
    }
    match http {
        Some(address) => serve_http(fixture, address).await,
        None => serve_stdio(fixture).await,
    }
}
