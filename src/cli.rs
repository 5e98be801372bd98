//! The client commands: talk to the daemon's socket and print tables or JSON.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{json, Value};

use crate::store::{SearchHit, ServerStatus};

/// Exit codes that tell outcomes apart for scripts.
pub const EXIT_FAILURE: u8 = 1;
pub const EXIT_UNREACHABLE: u8 = 3;

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("cannot reach the daemon at {path}: {reason}\nis `mcp-mirror serve` running? start it with `mcp-mirror serve --config daemon.toml`, or pass --socket PATH")]
    Unreachable { path: PathBuf, reason: String },
    #[error("the daemon answered with error {code}: {message}")]
    Remote { code: i64, message: String },
    #[error("{0}")]
    Protocol(String),
}

impl ClientError {
    pub fn exit_code(&self) -> u8 {
        match self {
            ClientError::Unreachable { .. } => EXIT_UNREACHABLE,
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
        let mut answer = String::new();
        let read = self.reader.read_line(&mut answer).map_err(lost)?;
        if read == 0 {
            return Err(ClientError::Protocol(
                "the daemon closed the connection".into(),
            ));
        }
        let mut answer: Value = serde_json::from_str(&answer).map_err(|error| {
            ClientError::Protocol(format!("the daemon sent invalid JSON: {error}"))
        })?;
        if let Some(error) = answer.get("error") {
            return Err(ClientError::Remote {
                code: error.get("code").and_then(Value::as_i64).unwrap_or(0),
                message: error
                    .get("message")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string(),
            });
        }
        Ok(answer
            .get_mut("result")
            .map(Value::take)
            .unwrap_or(Value::Null))
    }
}

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
        .map(|server| {
            let state = if server.stale && server.state != "failed" {
                format!("{} (stale)", server.state)
            } else {
                server.state.clone()
            };
            vec![
                server.name.clone(),
                state,
                server.transport.clone(),
                server
                    .protocol_version
                    .clone()
                    .unwrap_or_else(|| "-".into()),
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
            "VERSION",
            "RESOURCES",
            "AGE",
            "LAST ERROR",
        ],
        &rows,
    );
    Ok(())
}

pub fn ls(socket: &Path, server: Option<&str>, as_json: bool) -> Result<(), ClientError> {
    let mut client = Client::connect(socket)?;
    let mut cursor: Option<String> = None;
    let mut rows = Vec::new();
    let mut all = Vec::new();
    loop {
        let params = match &cursor {
            Some(cursor) => json!({ "cursor": cursor }),
            None => json!({}),
        };
        let mut page = client.call("resources/list", params, Some(Duration::from_secs(60)))?;
        if let Some(Value::Array(resources)) = page.get_mut("resources").map(Value::take) {
            for resource in resources {
                let origin = resource["_meta"][crate::store::ORIGIN_META_KEY]
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
        }
        match page.get("nextCursor").and_then(Value::as_str) {
            Some(next) => cursor = Some(next.to_string()),
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
}

pub fn search(socket: &Path, args: &SearchArgs, as_json: bool) -> Result<(), ClientError> {
    let params = json!({
        "query": args.query,
        "limit": args.limit,
        "server": args.server,
        "mimeType": args.mime_type,
        "raw": args.raw,
    });
    let result =
        Client::connect(socket)?.call("catalog/search", params, Some(Duration::from_secs(30)))?;
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
                hit.title.clone().unwrap_or_else(|| hit.name.clone()),
                hit.server.clone(),
            ]
        })
        .collect();
    print_table(&["SCORE", "URI", "TITLE", "SERVER"], &rows);
    Ok(())
}

pub fn refresh(
    socket: &Path,
    server: Option<&str>,
    wait: bool,
    as_json: bool,
) -> Result<(), ClientError> {
    let params = json!({ "server": server, "wait": wait });
    let result = Client::connect(socket)?.call("catalog/refresh", params, None)?;
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
