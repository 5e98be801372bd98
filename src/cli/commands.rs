//! The commands, one function each: `status`, `ls`, `search`, `show`, `read`, `refresh`, `watch`.

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use base64::engine::general_purpose::{GeneralPurpose, GeneralPurposeConfig};
use base64::engine::DecodePaddingMode;
use base64::Engine as _;

use super::client::Client;
use super::offline::Catalog;
use super::progress::Progress;
use super::render::{
    age, escaped, print_fields, print_json, print_table, shown_snippet, utc_timestamp,
    SNIPPET_MARKERS,
};
use super::ClientError;
use crate::protocol::{
    CatalogChanged, CatalogRefresh, CatalogStatus, CatalogWatch, ChangeKind, ListParams, NoParams,
    ReadResource, RefreshOutcome, RefreshParams, SearchParams, ServerState, UriParams, WatchParams,
};

const STATUS_TIMEOUT: Duration = Duration::from_secs(30);
const READ_TIMEOUT: Duration = Duration::from_secs(120);

pub fn status(socket: &Path, as_json: bool) -> Result<(), ClientError> {
    let status =
        Client::connect(socket)?.call::<CatalogStatus>(&NoParams {}, Some(STATUS_TIMEOUT))?;
    if as_json {
        print_json(&status);
        return Ok(());
    }
    let daemon = &status.daemon;
    println!(
        "mcp-mirror {} · up {}s · {} resources · database {}",
        daemon.version,
        daemon.uptime_ms / 1000,
        daemon.resources,
        daemon.database.display(),
    );
    println!(
        "config {} · loaded {} ago",
        daemon.config.display(),
        age(Some(daemon.config_loaded_at)),
    );
    if let Some(error) = &daemon.config_error {
        println!(
            "config reload rejected, the previous configuration stays in force: {}",
            escaped(error)
        );
    }
    let rows: Vec<Vec<String>> = status
        .servers
        .iter()
        .map(|server| {
            let state = if server.stale && server.state != ServerState::Failed {
                format!("{} (stale)", server.state)
            } else {
                server.state.to_string()
            };
            // What this process knows beyond the database: the era, the actual transport and
            // how changes reach us.
            let live = server.live.as_ref();
            // A server whose notifications come faster than it may be walked says so.
            let state = match live.and_then(|live| live.throttled_until_ms) {
                Some(_) => format!("{state} (throttled)"),
                None => state,
            };
            let era = match (live.and_then(|live| live.era), &server.protocol_version) {
                (Some(era), Some(version)) => format!("{era} {version}"),
                (None, Some(version)) => version.clone(),
                _ => "-".into(),
            };
            let transport = match live.and_then(|live| live.transport) {
                Some(transport) => transport.to_string(),
                None => server.transport.to_string(),
            };
            let push = match live.and_then(|live| live.push.as_ref()) {
                Some(push) => push.to_string(),
                None => "-".into(),
            };
            vec![
                escaped(&server.name).into_owned(),
                state,
                transport,
                escaped(&era).into_owned(),
                escaped(&push).into_owned(),
                server.resources.to_string(),
                age(server.snapshot_at_ms),
                escaped(server.last_error.as_deref().unwrap_or_default()).into_owned(),
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
        rows,
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
    let mut params = ListParams::default();
    let mut rows = Vec::new();
    let mut all = Vec::new();
    loop {
        let page = catalog.list_page(&params)?;
        for resource in page.resources {
            if server.is_some_and(|wanted| Some(wanted) != resource.origin()) {
                continue;
            }
            if as_json {
                all.push(resource);
            } else {
                let fields = &resource.fields;
                rows.push(vec![
                    escaped(&resource.uri).into_owned(),
                    escaped(fields.name.as_deref().unwrap_or_default()).into_owned(),
                    escaped(fields.mime_type.as_deref().unwrap_or("-")).into_owned(),
                    escaped(resource.origin().unwrap_or_default()).into_owned(),
                ]);
            }
        }
        match page.next_cursor {
            Some(next) => params.cursor = Some(next),
            None => break,
        }
    }
    if as_json {
        print_json(&all);
    } else {
        print_table(&["URI", "NAME", "MIME TYPE", "SERVER"], rows);
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

pub fn search(
    socket: &Path,
    database: &Path,
    args: &SearchArgs,
    as_json: bool,
) -> Result<(), ClientError> {
    let (open, close) = SNIPPET_MARKERS;
    let params = SearchParams {
        query: args.query.to_string(),
        limit: args.limit,
        server: args.server.map(str::to_string),
        mime_type: args.mime_type.map(str::to_string),
        raw: args.raw.then_some(true),
        cursor: args.cursor.map(str::to_string),
        highlight: (!as_json).then(|| (open.to_string(), close.to_string())),
    };
    let result = Catalog::open(socket, database)?.search(params)?;
    if as_json {
        print_json(&result);
        return Ok(());
    }
    let rows: Vec<Vec<String>> = result
        .results
        .iter()
        .map(|hit| {
            let shown = match &hit.snippet {
                Some(snippet) => shown_snippet(snippet),
                None => escaped(hit.title.as_deref().unwrap_or(&hit.name)).into_owned(),
            };
            vec![
                format!("{:.2}", hit.score),
                escaped(&hit.uri).into_owned(),
                escaped(&hit.server).into_owned(),
                shown,
            ]
        })
        .collect();
    print_table(&["SCORE", "URI", "SERVER", "MATCH"], rows);
    if let Some(next) = &result.next_cursor {
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
    let mut rows: Vec<(String, String)> = Vec::new();
    // Every field the server sent, whatever its name: the resource as one JSON object.
    let fields = serde_json::to_value(&details.resource)
        .map_err(|error| ClientError::Protocol(error.to_string()))?;
    if let serde_json::Value::Object(fields) = fields {
        for (key, value) in fields {
            let text = match value {
                serde_json::Value::String(text) => text,
                other => other.to_string(),
            };
            rows.push((format!("{}:", escaped(&key)), escaped(&text).into_owned()));
        }
    }
    let listed_by: Vec<String> = details
        .listed_by
        .iter()
        .map(|listing| {
            format!(
                "{} (priority {})",
                escaped(&listing.server),
                listing.priority
            )
        })
        .collect();
    rows.push(("server:".into(), escaped(&details.server).into_owned()));
    rows.push(("listed by:".into(), listed_by.join(", ")));
    if details.stale {
        rows.push((
            "stale:".into(),
            "yes (the server's last walk failed)".into(),
        ));
    }
    rows.push(("snapshot age:".into(), age(details.snapshot_at_ms)));
    print_fields(rows);
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
    let result = Client::connect(socket)?
        .call::<ReadResource>(&UriParams { uri: uri.into() }, Some(READ_TIMEOUT))?;
    if let Some(cache) = &result.meta.cache {
        eprintln!(
            "mcp-mirror: served from the content cache (stored {} ago): {}",
            age(Some(cache.stored_at_ms)),
            escaped(&cache.reason)
        );
    }
    if as_json {
        print_json(&result);
        return Ok(());
    }
    let mut bytes = Vec::new();
    let mut binary = false;
    for content in &result.contents {
        if let Some(text) = &content.text {
            bytes.extend_from_slice(text.as_bytes());
        } else if let Some(blob) = &content.blob {
            binary = true;
            let decoded = decode_blob(blob).ok_or_else(|| {
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

/// MCP's base64 (standard alphabet) as servers send it: padding optional, line breaks allowed.
const BLOB_BASE64: GeneralPurpose = GeneralPurpose::new(
    &base64::alphabet::STANDARD,
    GeneralPurposeConfig::new()
        .with_decode_padding_mode(DecodePaddingMode::Indifferent)
        .with_decode_allow_trailing_bits(true),
);

/// A blob's bytes; `None` when it is not base64.
pub fn decode_blob(blob: &str) -> Option<Vec<u8>> {
    let compact: String = blob
        .chars()
        .filter(|character| !character.is_ascii_whitespace())
        .collect();
    BLOB_BASE64.decode(compact).ok()
}

pub fn refresh(
    socket: &Path,
    server: Option<&str>,
    wait: bool,
    as_json: bool,
) -> Result<(), ClientError> {
    let params = RefreshParams {
        server: server.map(str::to_string),
        wait: Some(wait),
    };
    let mut client = Client::connect(socket)?;
    let progress = (wait && std::io::stderr().is_terminal())
        .then(|| Progress::start(socket, server.map(str::to_string)));
    let result = client.call::<CatalogRefresh>(&params, None);
    if let Some(progress) = progress {
        progress.finish();
    }
    let result = result?;
    if as_json {
        print_json(&result);
        return Ok(());
    }
    let mut failed = false;
    for (name, outcome) in &result.servers {
        match outcome {
            RefreshOutcome::Queued { .. } => println!("{name}: walk requested"),
            RefreshOutcome::Walked {
                swap, duration_ms, ..
            } => println!(
                "{name}: {} resources (+{} -{} ~{}) in {duration_ms} ms",
                swap.resources, swap.added, swap.removed, swap.changed
            ),
            RefreshOutcome::Failed { error, .. } => {
                failed = true;
                println!("{name}: failed: {}", escaped(error));
            }
        }
    }
    if failed {
        return Err(ClientError::Protocol("some walks failed".into()));
    }
    Ok(())
}

/// Prints change feed entries as they are committed, until the daemon goes away.
pub fn watch(socket: &Path, since: Option<i64>, as_json: bool) -> Result<(), ClientError> {
    let mut client = Client::connect(socket)?;
    let answer = client.call::<CatalogWatch>(&WatchParams { since }, Some(STATUS_TIMEOUT))?;
    if !as_json {
        eprintln!(
            "mcp-mirror: watching the catalog from change {} on; stop with Ctrl-C",
            since.unwrap_or(answer.latest_seq)
        );
    }
    client
        .set_timeout(None)
        .map_err(|error| ClientError::Protocol(format!("cannot wait on the socket: {error}")))?;
    let mut stdout = std::io::stdout().lock();
    loop {
        let Some(changes) = client.next_message()?.notification::<CatalogChanged>() else {
            continue;
        };
        let changes = changes
            .map_err(|error| ClientError::Protocol(format!("unexpected change shape: {error}")))?;
        if changes.truncated {
            eprintln!("mcp-mirror: some changes were pruned from the bounded history; list the catalog again");
        }
        for change in changes.changes {
            let line = if as_json {
                serde_json::to_string(&change).unwrap_or_default()
            } else {
                let what = match (&change.uri, change.kind) {
                    (_, ChangeKind::Truncated) => {
                        format!("({} more changes not listed)", change.count)
                    }
                    (Some(uri), _) => escaped(uri).into_owned(),
                    (None, _) => String::new(),
                };
                format!(
                    "{}  #{}  {}  {:<8} {}",
                    utc_timestamp(change.at_ms),
                    change.seq,
                    escaped(&change.server),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_decodes_what_servers_send() {
        assert_eq!(
            decode_blob("AAEC/w==").as_deref(),
            Some(&[0u8, 1, 2, 255][..])
        );
        assert_eq!(decode_blob("aGVsbG8").as_deref(), Some(&b"hello"[..]));
        assert_eq!(decode_blob("aGVs\nbG8=").as_deref(), Some(&b"hello"[..]));
        assert_eq!(decode_blob("not base64!"), None);
    }
}
