//! The commands, one function each (`status` in `status.rs`): `ls`, `templates`, `search`, `show`, `read`,
//! `refresh`, `watch`.

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use base64::engine::general_purpose::{GeneralPurpose, GeneralPurposeConfig};
use base64::engine::DecodePaddingMode;
use base64::Engine as _;

use super::client::Client;
use super::offline::{Catalog, DatabaseChoice};
use super::progress::Progress;
use super::render::{
    age, escaped, print_fields, print_json, print_table, shown_snippet, thousands, utc_timestamp,
    SNIPPET_MARKERS,
};
use super::status::STATUS_TIMEOUT;
use super::ClientError;
use crate::protocol::uri_flags::URI_FLAGS_META_KEY;
use crate::protocol::{
    CatalogChanged, CatalogRefresh, CatalogWatch, ChangeKind, Kind, ListParams, ReadResource,
    RefreshOutcome, RefreshParams, RefreshState, ResourceTemplate, SearchParams, ServerListParams,
    Since, UriParams, WatchParams,
};
const READ_TIMEOUT: Duration = Duration::from_secs(120);

/// A resource's URI flags for people: `-` when it has none.
fn flags_column(flags: &[String]) -> String {
    match flags.is_empty() {
        true => "-".into(),
        false => escaped(&flags.join(",")).into_owned(),
    }
}

/// `ls`: the merged catalog; `long` adds each entry's URI flags (`uri_flags`).
pub fn ls(
    socket: &Path,
    database: &DatabaseChoice,
    server: Option<&str>,
    long: bool,
    as_json: bool,
) -> Result<(), ClientError> {
    let mut catalog = Catalog::open(socket, database)?;
    if let Some(server) = server {
        return ls_server(&mut catalog, server, long, as_json);
    }
    let mut params = ListParams::default();
    let mut rows = Vec::new();
    let mut all = Vec::new();
    loop {
        let page = catalog.list_page(&params)?;
        for resource in page.resources {
            if as_json {
                all.push(resource);
            } else {
                let fields = &resource.fields;
                let mut row = vec![
                    escaped(&resource.uri).into_owned(),
                    escaped(fields.name.as_deref().unwrap_or_default()).into_owned(),
                    escaped(fields.mime_type.as_deref().unwrap_or("-")).into_owned(),
                    escaped(&resource.attribution().unwrap_or_default()).into_owned(),
                ];
                if long {
                    row.push(flags_column(&fields.uri_flags()));
                }
                rows.push(row);
            }
        }
        match page.next_cursor {
            Some(next) => params.cursor = Some(next),
            None => break,
        }
    }
    if as_json {
        print_json(&all);
    } else if long {
        print_table(&["URI", "NAME", "MIME TYPE", "SERVER", "URI FLAGS"], rows);
    } else {
        print_table(&["URI", "NAME", "MIME TYPE", "SERVER"], rows);
    }
    Ok(())
}

/// `ls --server S`: S's own snapshot, every entry it lists, each marked with the server that
/// wins its URI in the merged catalog when that is another one.
fn ls_server(
    catalog: &mut Catalog,
    server: &str,
    long: bool,
    as_json: bool,
) -> Result<(), ClientError> {
    let mut params = ServerListParams {
        server: server.to_string(),
        ..ServerListParams::default()
    };
    let mut rows = Vec::new();
    let mut all = Vec::new();
    let (mut listed, mut won_elsewhere) = (0u64, 0u64);
    loop {
        let page = catalog.server_page(&params)?;
        for entry in page.resources {
            listed += 1;
            won_elsewhere += u64::from(entry.won_by.is_some());
            if as_json {
                all.push(entry);
                continue;
            }
            let fields = &entry.resource.fields;
            let won_by = match &entry.won_by {
                Some(winner) => format!("{} wins", escaped(winner)),
                None => "-".into(),
            };
            let mut row = vec![
                escaped(&entry.resource.uri).into_owned(),
                escaped(fields.name.as_deref().unwrap_or_default()).into_owned(),
                escaped(fields.mime_type.as_deref().unwrap_or("-")).into_owned(),
                won_by,
            ];
            if long {
                row.push(flags_column(&fields.uri_flags()));
            }
            rows.push(row);
        }
        match page.next_cursor {
            Some(next) => params.cursor = Some(next),
            None => break,
        }
    }
    if as_json {
        print_json(&all);
        return Ok(());
    }
    match long {
        true => print_table(&["URI", "NAME", "MIME TYPE", "MERGED", "URI FLAGS"], rows),
        false => print_table(&["URI", "NAME", "MIME TYPE", "MERGED"], rows),
    }
    eprintln!(
        "mcp-mirror: {} lists {}; another server wins {} of them in the merged catalog",
        escaped(server),
        thousands(listed),
        thousands(won_elsewhere)
    );
    Ok(())
}

/// The merged templates: each URI template once, from the server that wins it.
pub fn templates(
    socket: &Path,
    database: &DatabaseChoice,
    as_json: bool,
) -> Result<(), ClientError> {
    let all = all_templates(&mut Catalog::open(socket, database)?)?;
    if as_json {
        print_json(&all);
        return Ok(());
    }
    let rows = all
        .iter()
        .map(|template| {
            let fields = &template.fields;
            vec![
                escaped(&template.uri_template).into_owned(),
                escaped(fields.name.as_deref().unwrap_or_default()).into_owned(),
                escaped(fields.mime_type.as_deref().unwrap_or("-")).into_owned(),
                escaped(fields.meta.origin.as_deref().unwrap_or_default()).into_owned(),
            ]
        })
        .collect();
    print_table(&["URI TEMPLATE", "NAME", "MIME TYPE", "SERVER"], rows);
    Ok(())
}

fn all_templates(catalog: &mut Catalog) -> Result<Vec<ResourceTemplate>, ClientError> {
    let mut params = ListParams::default();
    let mut all = Vec::new();
    loop {
        let page = catalog.templates_page(&params)?;
        all.extend(page.resource_templates);
        match page.next_cursor {
            Some(next) => params.cursor = Some(next),
            None => return Ok(all),
        }
    }
}

pub struct SearchArgs<'a> {
    pub query: &'a str,
    pub limit: Option<u64>,
    pub server: Option<&'a str>,
    pub mime_type: Option<&'a str>,
    pub raw: bool,
    pub cursor: Option<&'a str>,
    /// The kinds searched; every kind when empty.
    pub kinds: &'a [Kind],
    pub mode: Option<crate::protocol::SearchMode>,
    /// Only hits with one of these URI flags (`none`: with no flag); every hit when empty.
    pub uri_flags: &'a [crate::protocol::uri_flags::UriFlagFilter],
}

pub fn search(
    socket: &Path,
    database: &DatabaseChoice,
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
        kinds: (!args.kinds.is_empty()).then(|| args.kinds.to_vec()),
        mode: args.mode,
        uri_flags: (!args.uri_flags.is_empty()).then(|| args.uri_flags.iter().copied().collect()),
    };
    let mut catalog = Catalog::open(socket, database)?;
    if let Some(server) = args.server {
        // An empty table would say the server lists nothing; the name is wrong instead.
        catalog.require_server(server)?;
    }
    let result = catalog.search(params)?;
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
            let flags = hit
                .meta
                .as_ref()
                .and_then(|meta| meta.get(URI_FLAGS_META_KEY))
                .and_then(serde_json::Value::as_array)
                .map(|flags| {
                    let names: Vec<&str> = flags.iter().filter_map(|flag| flag.as_str()).collect();
                    format!(" [{}]", names.join(","))
                })
                .unwrap_or_default();
            vec![
                format!("{:.2}", hit.score),
                hit.kind.to_string(),
                escaped(&format!(
                    "{}{flags}",
                    hit.uri.as_deref().unwrap_or(&hit.name)
                ))
                .into_owned(),
                escaped(&hit.server).into_owned(),
                shown,
            ]
        })
        .collect();
    print_table(&["SCORE", "KIND", "URI OR NAME", "SERVER", "MATCH"], rows);
    if let Some(next) = &result.next_cursor {
        eprintln!("mcp-mirror: more results: add --cursor {next}");
    }
    Ok(())
}

/// Prints every field the mirror has for `uri`, and which servers list it; or, for a URI
/// template (`uriTemplate` as `templates` lists it), the template's fields.
pub fn show(
    socket: &Path,
    database: &DatabaseChoice,
    uri: &str,
    as_json: bool,
) -> Result<(), ClientError> {
    let mut catalog = Catalog::open(socket, database)?;
    let details = match catalog.resource(uri) {
        Ok(details) => details,
        Err(not_found) if not_found.exit_code() == super::EXIT_NOT_FOUND => {
            let template = all_templates(&mut catalog)?
                .into_iter()
                .find(|template| template.uri_template == uri);
            return match template {
                Some(template) => show_template(&template, as_json),
                None => Err(not_found),
            };
        }
        Err(other) => return Err(other),
    };
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
    let server = details
        .resource
        .attribution()
        .unwrap_or_else(|| details.server.clone());
    rows.push(("server:".into(), escaped(&server).into_owned()));
    rows.push(("listed by:".into(), listed_by.join(", ")));
    if let Some(row) = flags_row(&details.resource.fields.uri_flags()) {
        rows.push(row);
    }
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

/// `show`'s line for an entry's URI flags, saying what they mean; none without flags.
fn flags_row(flags: &[String]) -> Option<(String, String)> {
    (!flags.is_empty()).then(|| {
        (
            "uri flags:".into(),
            format!(
                "{} (the URI points at the local machine or a private network: whoever follows it directly reaches that place)",
                escaped(&flags.join(", "))
            ),
        )
    })
}

fn show_template(template: &ResourceTemplate, as_json: bool) -> Result<(), ClientError> {
    if as_json {
        print_json(template);
        return Ok(());
    }
    let mut rows: Vec<(String, String)> = Vec::new();
    let fields =
        serde_json::to_value(template).map_err(|error| ClientError::Protocol(error.to_string()))?;
    if let serde_json::Value::Object(fields) = fields {
        for (key, value) in fields {
            let text = match value {
                serde_json::Value::String(text) => text,
                other => other.to_string(),
            };
            rows.push((format!("{}:", escaped(&key)), escaped(&text).into_owned()));
        }
    }
    let server = template.fields.meta.origin.as_deref().unwrap_or_default();
    rows.push(("server:".into(), escaped(server).into_owned()));
    if let Some(row) = flags_row(&template.fields.uri_flags()) {
        rows.push(row);
    }
    rows.push((
        "reads:".into(),
        "a URI that matches this template and that no server lists is read from this server".into(),
    ));
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
    // One line on a terminal; nothing when piped or when the output is JSON.
    let progress = (wait && !as_json && std::io::stderr().is_terminal())
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
                state: RefreshState::NoResources,
                ..
            } => println!("{name}: no resources (the server declares no resources capability; nothing to walk)"),
            RefreshOutcome::Walked {
                state: RefreshState::Synced,
                swap,
                duration_ms,
                ..
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
pub fn watch(socket: &Path, since: Option<&str>, as_json: bool) -> Result<(), ClientError> {
    let since = since
        .map(Since::from_command_line)
        .transpose()
        .map_err(|error| ClientError::Usage(format!("--since: {}", error.0)))?;
    let mut client = Client::connect(socket)?;
    let answer = client.call::<CatalogWatch>(&WatchParams { since }, Some(STATUS_TIMEOUT))?;
    if !as_json {
        eprintln!(
            "mcp-mirror: watching the catalog after change {}; stop with Ctrl-C",
            answer.since_seq
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
