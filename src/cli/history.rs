//! `mcp-mirror history KIND SERVER/KEY` and `mcp-mirror diff KIND SERVER/KEY [--from V] [--to V]`: an entry's kept versions and two of them compared; from the database when no daemon runs.

use std::path::Path;

use super::offline::{Catalog, DatabaseChoice};
use super::render::{escaped, print_json, print_table, utc_timestamp};
use super::ClientError;
use crate::protocol::{self as wire, Kind};

/// `tool`, `prompt`, `template` or `resource`, and `SERVER/KEY` split at its first `/`.
fn entry_of(kind: &str, spec: &str) -> Result<(Kind, String, String), ClientError> {
    let kind: Kind =
        serde_json::from_value(serde_json::Value::String(kind.to_string())).map_err(|_| {
            ClientError::Usage(format!(
                "the kind is one of tool, prompt, template, resource, not {kind:?}"
            ))
        })?;
    let Some((server, key)) = spec.split_once('/') else {
        return Err(ClientError::Usage(format!(
            "name the {kind} as SERVER/KEY, not {spec:?}"
        )));
    };
    Ok((kind, server.to_string(), key.to_string()))
}

/// `mcp-mirror history`: every kept version, newest first.
pub fn history(
    socket: &Path,
    database: &DatabaseChoice,
    kind: &str,
    spec: &str,
    as_json: bool,
) -> Result<(), ClientError> {
    let (kind, server, key) = entry_of(kind, spec)?;
    let mut catalog = Catalog::open(socket, database)?;
    let mut params = wire::HistoryParams {
        kind,
        server,
        key,
        cursor: None,
        limit: Some(wire::MAX_HISTORY_PAGE),
        include_definitions: false,
    };
    let mut versions = Vec::new();
    let mut result = loop {
        let page = catalog.history(&params)?;
        versions.extend(page.versions.iter().cloned());
        match &page.next_cursor {
            Some(next) => params.cursor = Some(next.clone()),
            None => break page,
        }
    };
    result.versions = versions;
    if as_json {
        print_json(&result);
        return Ok(());
    }
    let rows = result
        .versions
        .iter()
        .map(|version| {
            vec![
                version.version.to_string(),
                utc_timestamp(version.first_seen_ms),
                match (version.current, version.last_seen_ms) {
                    (true, _) => "current".to_string(),
                    (false, Some(at)) => utc_timestamp(at),
                    (false, None) => String::new(),
                },
                version.digest.chars().take(12).collect(),
                version.bytes.to_string(),
            ]
        })
        .collect();
    print_table(&["VERSION", "FIRST SEEN", "UNTIL", "DIGEST", "BYTES"], rows);
    Ok(())
}

/// `mcp-mirror diff`: two versions (default: the previous and the current) compared.
pub fn diff(
    socket: &Path,
    database: &DatabaseChoice,
    kind: &str,
    spec: &str,
    versions: (Option<i64>, Option<i64>),
    as_json: bool,
) -> Result<(), ClientError> {
    let (kind, server, key) = entry_of(kind, spec)?;
    let params = wire::DiffParams {
        kind,
        server,
        key,
        from: versions.0,
        to: versions.1,
    };
    let result = Catalog::open(socket, database)?.diff(&params)?;
    if as_json {
        print_json(&result);
        return Ok(());
    }
    println!(
        "{kind} {}/{}: version {} ({}) -> version {} ({})",
        result.server,
        escaped(&result.key),
        result.from.version,
        utc_timestamp(result.from.first_seen_ms),
        result.to.version,
        utc_timestamp(result.to.first_seen_ms)
    );
    if result.structural.is_empty() {
        println!("no differences");
        return Ok(());
    }
    print_structural_diff(&result.structural, "");
    Ok(())
}

/// A structural diff for a terminal, each line after `indent`: the tool's changes in words,
/// then the paths removed (-), added (+) and changed (~) with their values. `drift` prints its
/// entries' diffs against the accepted version the same way.
pub fn print_structural_diff(diff: &wire::StructuralDiff, indent: &str) {
    for change in &diff.tool_changes {
        println!("{indent}* {}", escaped(&change.sentence()));
    }
    let shown = |value: &serde_json::Value| escaped(&value.to_string()).into_owned();
    for path in &diff.removed {
        println!("{indent}- {}: {}", escaped(&path.path), shown(&path.value));
    }
    for path in &diff.added {
        println!("{indent}+ {}: {}", escaped(&path.path), shown(&path.value));
    }
    for path in &diff.changed {
        println!(
            "{indent}~ {}: {} -> {}",
            escaped(&path.path),
            shown(&path.from),
            shown(&path.to)
        );
    }
}
