//! The client commands: talk to the daemon's socket (or, for reading the catalog while no
//! daemon runs, the database file read-only) and print tables or JSON.

use std::io::{BufRead, BufReader, IsTerminal, Write};
use std::net::Shutdown;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::api::{CACHE_META_KEY, CATALOG_CHANGED, RESOURCE_NOT_FOUND};
use crate::store::{
    decode_search_cursor, encode_search_cursor, ChangeEntry, ReadOnlyCatalog, SearchHit,
    SearchRequest, ServerStatus, StoreError, ORIGIN_META_KEY,
};

/// Exit codes that tell outcomes apart for scripts.
pub const EXIT_FAILURE: u8 = 1;
pub const EXIT_USAGE: u8 = 2;
pub const EXIT_UNREACHABLE: u8 = 3;
pub const EXIT_NOT_FOUND: u8 = 4;

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("cannot reach the daemon at {path}: {reason}\nis `mcp-mirror serve` running? start it with `mcp-mirror serve --config daemon.toml`, or pass --socket PATH")]
    Unreachable { path: PathBuf, reason: String },
    #[error("the daemon answered with error {code}: {message}")]
    Remote {
        code: i64,
        message: String,
        data: Option<Value>,
    },
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    Usage(String),
    #[error("cannot read the database {path} either: {source}")]
    Offline { path: PathBuf, source: StoreError },
    #[error("cannot write {path}: {source}")]
    Output {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{0}")]
    Protocol(String),
}

impl ClientError {
    pub fn exit_code(&self) -> u8 {
        match self {
            ClientError::Unreachable { .. } | ClientError::Offline { .. } => EXIT_UNREACHABLE,
            ClientError::NotFound(_) => EXIT_NOT_FOUND,
            ClientError::Remote { code, data, .. }
                if *code == RESOURCE_NOT_FOUND
                    || data
                        .as_ref()
                        .is_some_and(|data| data.get("notFound").is_some()) =>
            {
                EXIT_NOT_FOUND
            }
            ClientError::Usage(_) => EXIT_USAGE,
            // Invalid params are what the user typed: a raw query FTS5 rejects, a bad cursor.
            ClientError::Remote { code, .. } if *code == crate::mcp::INVALID_PARAMS => EXIT_USAGE,
            _ => EXIT_FAILURE,
        }
    }
}

/// A connection to the daemon's socket.
pub struct Client {
    path: PathBuf,
    reader: BufReader<UnixStream>,
    writer: UnixStream,
    next_id: u64,
}

impl Client {
    pub fn connect(path: &Path) -> Result<Client, ClientError> {
        let unreachable = |reason: String| ClientError::Unreachable {
            path: path.to_path_buf(),
            reason,
        };
        let stream = UnixStream::connect(path).map_err(|error| unreachable(error.to_string()))?;
        let writer = stream
            .try_clone()
            .map_err(|error| unreachable(error.to_string()))?;
        Ok(Client {
            path: path.to_path_buf(),
            reader: BufReader::new(stream),
            writer,
            next_id: 0,
        })
    }

    /// Sends one request and waits for its answer; `timeout` bounds the wait.
    pub fn call(
        &mut self,
        method: &str,
        params: Value,
        timeout: Option<Duration>,
    ) -> Result<Value, ClientError> {
        self.next_id += 1;
        let request =
            json!({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params});
        let lost = |error: std::io::Error| ClientError::Unreachable {
            path: self.path.clone(),
            reason: format!("connection lost: {error}"),
        };
        let mut line = serde_json::to_vec(&request)
            .map_err(|error| ClientError::Protocol(error.to_string()))?;
        line.push(b'\n');
        self.writer.write_all(&line).map_err(lost)?;
        self.reader
            .get_ref()
            .set_read_timeout(timeout)
            .map_err(lost)?;
        // Notifications may come before the answer; requests are answered in order.
        let mut answer = loop {
            let message = self.next_message()?;
            if message.get("method").is_none() {
                break message;
            }
        };
        if let Some(error) = answer.get("error") {
            return Err(ClientError::Remote {
                code: error.get("code").and_then(Value::as_i64).unwrap_or(0),
                message: error
                    .get("message")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string(),
                data: error.get("data").cloned(),
            });
        }
        Ok(answer
            .get_mut("result")
            .map(Value::take)
            .unwrap_or(Value::Null))
    }

    /// The next message the daemon sends, answer or notification.
    fn next_message(&mut self) -> Result<Value, ClientError> {
        let mut line = String::new();
        let read = self
            .reader
            .read_line(&mut line)
            .map_err(|error| ClientError::Unreachable {
                path: self.path.clone(),
                reason: format!("connection lost: {error}"),
            })?;
        if read == 0 {
            return Err(ClientError::Unreachable {
                path: self.path.clone(),
                reason: "the daemon closed the connection".into(),
            });
        }
        serde_json::from_str(&line).map_err(|error| {
            ClientError::Protocol(format!("the daemon sent invalid JSON: {error}"))
        })
    }
}

/// Where catalog reads come from: the daemon, or the database file when no daemon runs.
enum Catalog {
    Daemon(Client),
    Database(ReadOnlyCatalog),
}

impl Catalog {
    /// Connects to the daemon; when it cannot be reached, opens `database` read-only and
    /// says so on stderr, so nobody mistakes a possibly stale file for the live mirror.
    fn open(socket: &Path, database: &Path) -> Result<Catalog, ClientError> {
        match Client::connect(socket) {
            Ok(client) => Ok(Catalog::Daemon(client)),
            Err(unreachable) => match ReadOnlyCatalog::open(database) {
                Ok(catalog) => {
                    eprintln!(
                        "mcp-mirror: the daemon is not running (no answer at {}); reading the database {} directly, read-only",
                        socket.display(),
                        database.display()
                    );
                    Ok(Catalog::Database(catalog))
                }
                Err(source) => {
                    eprintln!("mcp-mirror: {unreachable}");
                    Err(ClientError::Offline {
                        path: database.to_path_buf(),
                        source,
                    })
                }
            },
        }
    }

    /// One page of the merged catalog after the page that `cursor` ends.
    fn list_page(
        &mut self,
        cursor: Option<&str>,
    ) -> Result<(Vec<Value>, Option<String>), ClientError> {
        match self {
            Catalog::Daemon(client) => {
                let params = match cursor {
                    Some(cursor) => json!({ "cursor": cursor }),
                    None => json!({}),
                };
                let mut page =
                    client.call("resources/list", params, Some(Duration::from_secs(60)))?;
                let resources = match page.get_mut("resources").map(Value::take) {
                    Some(Value::Array(resources)) => resources,
                    _ => Vec::new(),
                };
                let next = page
                    .get("nextCursor")
                    .and_then(Value::as_str)
                    .map(str::to_string);
                Ok((resources, next))
            }
            Catalog::Database(catalog) => {
                let after = match cursor {
                    Some(cursor) => Some(
                        crate::store::decode_cursor(cursor)
                            .ok_or_else(|| ClientError::Protocol("invalid cursor".into()))?,
                    ),
                    None => None,
                };
                let (resources, more) = catalog
                    .list_resources(after.as_deref(), OFFLINE_PAGE_SIZE)
                    .map_err(|error| ClientError::Protocol(error.to_string()))?;
                let next = match more {
                    true => resources
                        .last()
                        .and_then(|resource| resource["uri"].as_str())
                        .map(crate::store::encode_cursor),
                    false => None,
                };
                Ok((resources, next))
            }
        }
    }

    /// `catalog/search` with the socket's params and answer shape.
    fn search(&mut self, params: Value) -> Result<Value, ClientError> {
        match self {
            Catalog::Daemon(client) => {
                client.call("catalog/search", params, Some(Duration::from_secs(30)))
            }
            Catalog::Database(catalog) => {
                let text = |key: &str| params[key].as_str().map(str::to_string);
                let mut request = SearchRequest::new(
                    text("query").unwrap_or_default(),
                    params["limit"].as_u64().unwrap_or(20).max(1) as usize,
                );
                request.server = text("server");
                request.mime_type = text("mimeType");
                request.raw = params["raw"].as_bool().unwrap_or(false);
                if let Some(cursor) = text("cursor") {
                    request.offset = decode_search_cursor(&cursor)
                        .ok_or_else(|| ClientError::Usage("invalid cursor".into()))?;
                }
                if let [Value::String(open), Value::String(close)] = params["highlight"]
                    .as_array()
                    .map(Vec::as_slice)
                    .unwrap_or(&[])
                {
                    request.highlight = (open.clone(), close.clone());
                }
                let (results, next) = catalog.search(&request).map_err(|error| match error {
                    StoreError::InvalidQuery(_) => ClientError::Usage(error.to_string()),
                    other => ClientError::Protocol(other.to_string()),
                })?;
                let mut answer = json!({ "results": results });
                if let Some(next) = next {
                    answer["nextCursor"] = Value::String(encode_search_cursor(next));
                }
                Ok(answer)
            }
        }
    }

    /// Everything known about one URI (`catalog/resource`).
    fn resource(&mut self, uri: &str) -> Result<Value, ClientError> {
        match self {
            Catalog::Daemon(client) => client.call(
                "catalog/resource",
                json!({ "uri": uri }),
                Some(Duration::from_secs(30)),
            ),
            Catalog::Database(catalog) => catalog
                .resource_details(uri)
                .map_err(|error| ClientError::Protocol(error.to_string()))?
                .ok_or_else(|| ClientError::NotFound(format!("no mirrored server lists {uri}"))),
        }
    }
}

/// Rows per page when listing straight from the database.
const OFFLINE_PAGE_SIZE: usize = 1000;

fn print_json(value: &Value) {
    println!(
        "{}",
        serde_json::to_string_pretty(value).unwrap_or_default()
    );
}

/// Prints rows as columns padded to their widest cell; the last column is not padded.
fn print_table(headers: &[&str], rows: &[Vec<String>]) {
    let mut widths: Vec<usize> = headers
        .iter()
        .map(|header| header.chars().count())
        .collect();
    for row in rows {
        for (index, cell) in row.iter().enumerate() {
            widths[index] = widths[index].max(cell.chars().count());
        }
    }
    let render = |cells: Vec<String>| {
        let last = cells.len().saturating_sub(1);
        let line: Vec<String> = cells
            .into_iter()
            .enumerate()
            .map(|(index, cell)| {
                if index == last {
                    cell
                } else {
                    format!("{cell:<width$}", width = widths[index])
                }
            })
            .collect();
        println!("{}", line.join("  ").trim_end());
    };
    render(headers.iter().map(|header| header.to_string()).collect());
    for row in rows {
        render(row.clone());
    }
}

/// "3s", "5m", "2h", "4d": how long ago `at_ms` was.
fn age(at_ms: Option<i64>) -> String {
    let Some(at_ms) = at_ms else {
        return "-".into();
    };
    let seconds = ((crate::store::now_ms() - at_ms).max(0) / 1000) as u64;
    match seconds {
        0..=59 => format!("{seconds}s"),
        60..=3599 => format!("{}m", seconds / 60),
        3600..=86_399 => format!("{}h", seconds / 3600),
        _ => format!("{}d", seconds / 86_400),
    }
}

pub fn status(socket: &Path, as_json: bool) -> Result<(), ClientError> {
    let result = Client::connect(socket)?.call(
        "catalog/status",
        json!({}),
        Some(Duration::from_secs(30)),
    )?;
    if as_json {
        print_json(&result);
        return Ok(());
    }
    let servers: Vec<ServerStatus> = serde_json::from_value(result["servers"].clone())
        .map_err(|error| ClientError::Protocol(format!("unexpected status shape: {error}")))?;
    let daemon = &result["daemon"];
    println!(
        "mcp-mirror {} · up {}s · {} resources · database {}",
        daemon["version"].as_str().unwrap_or("?"),
        daemon["uptimeMs"].as_u64().unwrap_or(0) / 1000,
        daemon["resources"].as_u64().unwrap_or(0),
        daemon["database"].as_str().unwrap_or("?"),
    );
    println!(
        "config {} · loaded {} ago",
        daemon["config"].as_str().unwrap_or("?"),
        age(daemon["configLoadedAt"].as_i64()),
    );
    if let Some(error) = daemon["configError"].as_str() {
        println!("config reload rejected, the previous configuration stays in force: {error}");
    }
    let rows: Vec<Vec<String>> = servers
        .iter()
        .zip(result["servers"].as_array().into_iter().flatten())
        .map(|(server, entry)| {
            let state = if server.stale && server.state != "failed" {
                format!("{} (stale)", server.state)
            } else {
                server.state.clone()
            };
            // What this process knows beyond the database: the era, the actual transport and
            // how changes reach us.
            let live = &entry["live"];
            let era = match (live["era"].as_str(), &server.protocol_version) {
                (Some(era), Some(version)) => format!("{era} {version}"),
                (None, Some(version)) => version.clone(),
                _ => "-".into(),
            };
            vec![
                server.name.clone(),
                state,
                live["transport"]
                    .as_str()
                    .unwrap_or(&server.transport)
                    .to_string(),
                era,
                live["push"].as_str().unwrap_or("-").to_string(),
                server.resources.to_string(),
                age(server.snapshot_at_ms),
                server.last_error.clone().unwrap_or_default(),
            ]
        })
        .collect();
    print_table(
        &[
            "SERVER",
            "STATE",
            "TRANSPORT",
            "ERA",
            "PUSH",
            "RESOURCES",
            "AGE",
            "LAST ERROR",
        ],
        &rows,
    );
    Ok(())
}

pub fn ls(
    socket: &Path,
    database: &Path,
    server: Option<&str>,
    as_json: bool,
) -> Result<(), ClientError> {
    let mut catalog = Catalog::open(socket, database)?;
    let mut cursor: Option<String> = None;
    let mut rows = Vec::new();
    let mut all = Vec::new();
    loop {
        let (resources, next) = catalog.list_page(cursor.as_deref())?;
        for resource in resources {
            let origin = resource["_meta"][ORIGIN_META_KEY]
                .as_str()
                .unwrap_or("")
                .to_string();
            if server.is_some_and(|wanted| wanted != origin) {
                continue;
            }
            if as_json {
                all.push(resource);
            } else {
                rows.push(vec![
                    resource["uri"].as_str().unwrap_or("").to_string(),
                    resource["name"].as_str().unwrap_or("").to_string(),
                    resource["mimeType"].as_str().unwrap_or("-").to_string(),
                    origin,
                ]);
            }
        }
        match next {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    if as_json {
        print_json(&Value::Array(all));
    } else {
        print_table(&["URI", "NAME", "MIME TYPE", "SERVER"], &rows);
    }
    Ok(())
}

pub struct SearchArgs<'a> {
    pub query: &'a str,
    pub limit: Option<u64>,
    pub server: Option<&'a str>,
    pub mime_type: Option<&'a str>,
    pub raw: bool,
    pub cursor: Option<&'a str>,
}

/// Bold on a terminal; plain markers elsewhere, so piped output stays readable text.
fn highlight_markers() -> (&'static str, &'static str) {
    if std::io::stdout().is_terminal() {
        ("\x1b[1m", "\x1b[0m")
    } else {
        crate::store::DEFAULT_HIGHLIGHT
    }
}

pub fn search(
    socket: &Path,
    database: &Path,
    args: &SearchArgs,
    as_json: bool,
) -> Result<(), ClientError> {
    let (open, close) = highlight_markers();
    let mut params = json!({
        "query": args.query,
        "limit": args.limit,
        "server": args.server,
        "mimeType": args.mime_type,
        "raw": args.raw,
        "cursor": args.cursor,
    });
    if !as_json {
        params["highlight"] = json!([open, close]);
    }
    let result = Catalog::open(socket, database)?.search(params)?;
    if as_json {
        print_json(&result);
        return Ok(());
    }
    let hits: Vec<SearchHit> = serde_json::from_value(result["results"].clone())
        .map_err(|error| ClientError::Protocol(format!("unexpected search shape: {error}")))?;
    let rows: Vec<Vec<String>> = hits
        .iter()
        .map(|hit| {
            vec![
                format!("{:.2}", hit.score),
                hit.uri.clone(),
                hit.server.clone(),
                hit.snippet
                    .clone()
                    .unwrap_or_else(|| hit.title.clone().unwrap_or_else(|| hit.name.clone())),
            ]
        })
        .collect();
    print_table(&["SCORE", "URI", "SERVER", "MATCH"], &rows);
    if let Some(next) = result["nextCursor"].as_str() {
        eprintln!("mcp-mirror: more results: add --cursor {next}");
    }
    Ok(())
}

/// Prints every field the mirror has for `uri`, and which servers list it.
pub fn show(socket: &Path, database: &Path, uri: &str, as_json: bool) -> Result<(), ClientError> {
    let details = Catalog::open(socket, database)?.resource(uri)?;
    if as_json {
        print_json(&details);
        return Ok(());
    }
    let resource = &details["resource"];
    let mut rows: Vec<Vec<String>> = Vec::new();
    if let Some(fields) = resource.as_object() {
        for (key, value) in fields {
            let text = match value {
                Value::String(text) => text.clone(),
                other => other.to_string(),
            };
            rows.push(vec![format!("{key}:"), text]);
        }
    }
    let listed_by: Vec<String> = details["listedBy"]
        .as_array()
        .map(|listings| {
            listings
                .iter()
                .map(|listing| {
                    format!(
                        "{} (priority {})",
                        listing["server"].as_str().unwrap_or("?"),
                        listing["priority"]
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    rows.push(vec![
        "server:".into(),
        details["server"].as_str().unwrap_or("?").into(),
    ]);
    rows.push(vec!["listed by:".into(), listed_by.join(", ")]);
    if details["stale"].as_bool() == Some(true) {
        rows.push(vec![
            "stale:".into(),
            "yes (the server's last walk failed)".into(),
        ]);
    }
    rows.push(vec![
        "snapshot age:".into(),
        age(details["snapshotAtMs"].as_i64()),
    ]);
    let width = rows
        .iter()
        .map(|row| row[0].chars().count())
        .max()
        .unwrap_or(0);
    for row in rows {
        println!("{:<width$} {}", row[0], row[1]);
    }
    Ok(())
}

/// Reads a resource through the daemon: text to stdout, binary to `--output` (or to a
/// stdout that is not a terminal).
pub fn read(
    socket: &Path,
    uri: &str,
    output: Option<&Path>,
    as_json: bool,
) -> Result<(), ClientError> {
    let result = Client::connect(socket)?.call(
        "resources/read",
        json!({ "uri": uri }),
        Some(Duration::from_secs(120)),
    )?;
    if let Some(cache) = result["_meta"].get(CACHE_META_KEY) {
        eprintln!(
            "mcp-mirror: served from the content cache (stored {} ago): {}",
            age(cache["storedAtMs"].as_i64()),
            cache["reason"]
                .as_str()
                .unwrap_or("the server is unreachable")
        );
    }
    if as_json {
        print_json(&result);
        return Ok(());
    }
    let mut bytes = Vec::new();
    let mut binary = false;
    for content in result["contents"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or(&[])
    {
        if let Some(text) = content["text"].as_str() {
            bytes.extend_from_slice(text.as_bytes());
        } else if let Some(blob) = content["blob"].as_str() {
            binary = true;
            let decoded = base64_decode(blob).ok_or_else(|| {
                ClientError::Protocol("the server sent a blob that is not valid base64".into())
            })?;
            bytes.extend_from_slice(&decoded);
        }
    }
    match output {
        Some(path) => {
            std::fs::write(path, &bytes).map_err(|source| ClientError::Output {
                path: path.to_path_buf(),
                source,
            })?;
            eprintln!(
                "mcp-mirror: wrote {} bytes to {}",
                bytes.len(),
                path.display()
            );
        }
        None if binary && std::io::stdout().is_terminal() => {
            return Err(ClientError::Usage(format!(
                "{uri} is binary ({} bytes); write it to a file with --output FILE",
                bytes.len()
            )));
        }
        None => {
            // Exact bytes for pipes; on a terminal, end the last line so the prompt starts fresh.
            if std::io::stdout().is_terminal() && !bytes.ends_with(b"\n") {
                bytes.push(b'\n');
            }
            let mut stdout = std::io::stdout().lock();
            stdout
                .write_all(&bytes)
                .and_then(|()| stdout.flush())
                .map_err(|source| ClientError::Output {
                    path: PathBuf::from("standard output"),
                    source,
                })?;
        }
    }
    Ok(())
}

/// Decodes standard base64 (padding optional, whitespace ignored); `None` on anything else.
pub fn base64_decode(text: &str) -> Option<Vec<u8>> {
    let mut bytes = Vec::with_capacity(text.len() / 4 * 3);
    let mut buffer: u32 = 0;
    let mut bits = 0;
    for byte in text.bytes() {
        let value = match byte {
            b'A'..=b'Z' => byte - b'A',
            b'a'..=b'z' => byte - b'a' + 26,
            b'0'..=b'9' => byte - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            b'=' | b'\n' | b'\r' | b' ' => continue,
            _ => return None,
        };
        buffer = (buffer << 6) | u32::from(value);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            bytes.push((buffer >> bits) as u8);
            buffer &= (1 << bits) - 1;
        }
    }
    Some(bytes)
}

pub fn refresh(
    socket: &Path,
    server: Option<&str>,
    wait: bool,
    as_json: bool,
) -> Result<(), ClientError> {
    let params = json!({ "server": server, "wait": wait });
    let mut client = Client::connect(socket)?;
    let progress = (wait && std::io::stderr().is_terminal())
        .then(|| Progress::start(socket, server.map(str::to_string)));
    let result = client.call("catalog/refresh", params, None);
    if let Some(progress) = progress {
        progress.finish();
    }
    let result = result?;
    if as_json {
        print_json(&result);
        return Ok(());
    }
    let mut failed = false;
    if let Some(servers) = result["servers"].as_object() {
        for (name, outcome) in servers {
            if outcome["queued"].as_bool() == Some(true) {
                println!("{name}: walk requested");
            } else if outcome["ok"].as_bool() == Some(true) {
                let swap = &outcome["swap"];
                println!(
                    "{name}: {} resources (+{} -{} ~{}) in {} ms",
                    swap["resources"],
                    swap["added"],
                    swap["removed"],
                    swap["changed"],
                    outcome["durationMs"]
                );
            } else {
                failed = true;
                println!(
                    "{name}: failed: {}",
                    outcome["error"].as_str().unwrap_or("?")
                );
            }
        }
    }
    if failed {
        return Err(ClientError::Protocol("some walks failed".into()));
    }
    Ok(())
}

/// A progress line on stderr while `refresh --wait` waits: each server's state and the time
/// spent, redrawn in place from `catalog/status` on a second connection.
struct Progress {
    done: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<()>,
}

impl Progress {
    fn start(socket: &Path, server: Option<String>) -> Progress {
        let done = Arc::new(AtomicBool::new(false));
        let flag = done.clone();
        let socket = socket.to_path_buf();
        let thread = std::thread::spawn(move || {
            let started = Instant::now();
            let Ok(mut client) = Client::connect(&socket) else {
                return;
            };
            while !flag.load(Ordering::Relaxed) {
                let Ok(status) =
                    client.call("catalog/status", json!({}), Some(Duration::from_secs(5)))
                else {
                    return;
                };
                let states: Vec<String> = status["servers"]
                    .as_array()
                    .map(Vec::as_slice)
                    .unwrap_or(&[])
                    .iter()
                    .filter(|entry| server.as_ref().map_or(true, |name| entry["name"] == **name))
                    .map(|entry| {
                        format!(
                            "{} {} ({} resources)",
                            entry["name"].as_str().unwrap_or("?"),
                            entry["state"].as_str().unwrap_or("?"),
                            entry["resources"]
                        )
                    })
                    .collect();
                eprint!(
                    "\r\x1b[2Kwaiting {:.1}s: {}",
                    started.elapsed().as_secs_f64(),
                    states.join(", ")
                );
                let _ = std::io::stderr().flush();
                std::thread::sleep(Duration::from_millis(200));
            }
        });
        Progress { done, thread }
    }

    fn finish(self) {
        self.done.store(true, Ordering::Relaxed);
        let _ = self.thread.join();
        eprint!("\r\x1b[2K");
    }
}

/// Prints change feed entries as they are committed, until the daemon goes away.
pub fn watch(socket: &Path, since: Option<i64>, as_json: bool) -> Result<(), ClientError> {
    let mut client = Client::connect(socket)?;
    let answer = client.call(
        "catalog/watch",
        json!({ "since": since }),
        Some(Duration::from_secs(30)),
    )?;
    if !as_json {
        eprintln!(
            "mcp-mirror: watching the catalog from change {} on; stop with Ctrl-C",
            since.unwrap_or_else(|| answer["latestSeq"].as_i64().unwrap_or(0))
        );
    }
    client
        .reader
        .get_ref()
        .set_read_timeout(None)
        .map_err(|error| ClientError::Protocol(format!("cannot wait on the socket: {error}")))?;
    let mut stdout = std::io::stdout().lock();
    loop {
        let message = client.next_message()?;
        if message["method"] != CATALOG_CHANGED {
            continue;
        }
        let params = &message["params"];
        if params["truncated"].as_bool() == Some(true) {
            eprintln!("mcp-mirror: some changes were pruned from the bounded history; list the catalog again");
        }
        let changes: Vec<ChangeEntry> = serde_json::from_value(params["changes"].clone())
            .map_err(|error| ClientError::Protocol(format!("unexpected change shape: {error}")))?;
        for change in changes {
            let line = if as_json {
                serde_json::to_string(&change).unwrap_or_default()
            } else {
                let what = match (&change.uri, change.kind.as_str()) {
                    (_, "truncated") => format!("({} more changes not listed)", change.count),
                    (Some(uri), _) => uri.clone(),
                    (None, _) => String::new(),
                };
                format!(
                    "{}  #{}  {}  {:<8} {}",
                    utc_timestamp(change.at_ms),
                    change.seq,
                    change.server,
                    change.kind,
                    what
                )
            };
            let written = writeln!(stdout, "{line}").and_then(|()| stdout.flush());
            if written.is_err() {
                return Ok(());
            }
        }
    }
}

/// `2026-01-31T12:34:56Z` from milliseconds since the epoch (UTC, proleptic Gregorian).
pub fn utc_timestamp(at_ms: i64) -> String {
    let seconds = at_ms.div_euclid(1000);
    let (days, second_of_day) = (seconds.div_euclid(86_400), seconds.rem_euclid(86_400));
    // Howard Hinnant's days-to-civil algorithm.
    let shifted = days + 719_468;
    let era = shifted.div_euclid(146_097);
    let day_of_era = shifted.rem_euclid(146_097);
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_index = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_index + 2) / 5 + 1;
    let month = if month_index < 10 {
        month_index + 3
    } else {
        month_index - 9
    };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        second_of_day / 3600,
        second_of_day % 3600 / 60,
        second_of_day % 60
    )
}

/// The stdio bridge: stdin lines go to the socket, socket lines to stdout, so an MCP client
/// that launches stdio servers can use the mirror as one server. Ends when either side closes.
pub fn bridge(socket: &Path) -> Result<(), ClientError> {
    let stream = UnixStream::connect(socket).map_err(|error| ClientError::Unreachable {
        path: socket.to_path_buf(),
        reason: error.to_string(),
    })?;
    let mut to_daemon = stream
        .try_clone()
        .map_err(|error| ClientError::Unreachable {
            path: socket.to_path_buf(),
            reason: error.to_string(),
        })?;
    // The daemon reads lines, so bytes can go over as they come; closing stdin closes our
    // half of the socket, and the daemon then ends the connection, which ends the copy below.
    std::thread::spawn(move || {
        let _ = std::io::copy(&mut std::io::stdin().lock(), &mut to_daemon);
        let _ = to_daemon.shutdown(Shutdown::Write);
    });
    let mut from_daemon = BufReader::new(stream);
    let mut stdout = std::io::stdout().lock();
    let mut line = Vec::new();
    loop {
        line.clear();
        let read =
            from_daemon
                .read_until(b'\n', &mut line)
                .map_err(|error| ClientError::Unreachable {
                    path: socket.to_path_buf(),
                    reason: format!("connection lost: {error}"),
                })?;
        if read == 0 {
            return Ok(());
        }
        // Each message is flushed whole, so the client never waits on a buffered line.
        if stdout
            .write_all(&line)
            .and_then(|()| stdout.flush())
            .is_err()
        {
            return Ok(());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_decodes_what_servers_send() {
        assert_eq!(
            base64_decode("AAEC/w==").as_deref(),
            Some(&[0u8, 1, 2, 255][..])
        );
        assert_eq!(base64_decode("aGVsbG8").as_deref(), Some(&b"hello"[..]));
        assert_eq!(base64_decode("not base64!"), None);
    }

    #[test]
    fn timestamps_are_utc() {
        assert_eq!(utc_timestamp(0), "1970-01-01T00:00:00Z");
        assert_eq!(utc_timestamp(951_782_400_000), "2000-02-29T00:00:00Z");
        assert_eq!(utc_timestamp(1_767_225_599_000), "2025-12-31T23:59:59Z");
    }
}
