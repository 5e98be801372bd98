//! `mcp-mirror changes [--since 1d | --since SEQ] [--kind K]`: what changed, summed up per server and kind, then change by change; from the database when no daemon runs.

use std::path::Path;

use super::offline::{Catalog, DatabaseChoice};
use super::render::{escaped, print_json, print_table, thousands, utc_timestamp};
use super::ClientError;
use crate::protocol::{self as wire, ChangeKind, Kind, Since, MAX_CHANGES_LIMIT};

/// `since` when the command names none: the last day.
pub const DEFAULT_CHANGES_SINCE: &str = "1d";

/// `mcp-mirror changes`: every page of the feed from `since` on, its summary, then its rows.
pub fn changes(
    socket: &Path,
    database: &DatabaseChoice,
    since: Option<&str>,
    kinds: &[Kind],
    as_json: bool,
) -> Result<(), ClientError> {
    let since = Since::from_command_line(since.unwrap_or(DEFAULT_CHANGES_SINCE))
        .map_err(|error| ClientError::Usage(format!("--since: {}", error.0)))?;
    let mut catalog = Catalog::open(socket, database)?;
    let mut params = wire::ChangesParams {
        since: Some(since.clone()),
        limit: Some(MAX_CHANGES_LIMIT as u64),
        kinds: (!kinds.is_empty()).then(|| kinds.to_vec()),
    };
    let mut result = catalog.changes(&params)?;
    let mut next = result.next_since;
    while let Some(after) = next {
        params.since = Some(Since::Sequence(after));
        let page = catalog.changes(&params)?;
        result.changes.extend(page.changes);
        result.truncated |= page.truncated;
        (result.more, next) = (page.more, page.next_since);
    }
    result.next_since = None;
    if as_json {
        print_json(&result);
        return Ok(());
    }
    // A sequence number has no summary from the mirror: the rows read are the whole window.
    let summary = result
        .summary
        .clone()
        .unwrap_or_else(|| tally(&result.changes));
    print_summary(&since, &summary, &result);
    if !result.changes.is_empty() {
        println!();
        print_rows(&result.changes);
    }
    Ok(())
}

/// The counts of rows read, as the mirror's summary counts a time's window.
fn tally(changes: &[wire::Change]) -> wire::ChangesSummary {
    let counts = changes.iter().map(|change| {
        let count = change.count.max(0) as u64;
        (change.server.clone(), change.entry_kind, change.kind, count)
    });
    wire::ChangesSummary::tallied(0, 0, counts)
}

fn print_summary(since: &Since, summary: &wire::ChangesSummary, result: &wire::ChangesResult) {
    let from = match since {
        Since::Sequence(sequence) => format!("after change {sequence}"),
        Since::Time(text) => format!(
            "since {} ({})",
            utc_timestamp(summary.since_ms),
            escaped(text)
        ),
    };
    let total = &summary.total;
    println!(
        "{} changes {from}: {} added, {} removed, {} changed{}",
        thousands(total.all()),
        thousands(total.added),
        thousands(total.removed),
        thousands(total.changed),
        match total.unlisted {
            0 => String::new(),
            unlisted => format!(
                ", {} more in large swaps not listed one by one",
                thousands(unlisted)
            ),
        }
    );
    if result.truncated {
        println!("the feed no longer reaches that far back: older changes were pruned");
    }
    if summary.servers.is_empty() {
        return;
    }
    let rows = summary
        .servers
        .iter()
        .map(|row| {
            vec![
                escaped(&row.server).into_owned(),
                row.entry_kind.to_string(),
                thousands(row.counts.added),
                thousands(row.counts.removed),
                thousands(row.counts.changed),
                thousands(row.counts.unlisted),
            ]
        })
        .collect();
    print_table(
        &["SERVER", "KIND", "ADDED", "REMOVED", "CHANGED", "UNLISTED"],
        rows,
    );
}

fn print_rows(changes: &[wire::Change]) {
    let rows = changes
        .iter()
        .map(|change| {
            let key = match change.kind {
                ChangeKind::Truncated => format!("({} more changes not listed)", change.count),
                _ => escaped(
                    change
                        .uri
                        .as_deref()
                        .or(change.name.as_deref())
                        .unwrap_or_default(),
                )
                .into_owned(),
            };
            vec![
                change.seq.to_string(),
                utc_timestamp(change.at_ms),
                escaped(&change.server).into_owned(),
                change.kind.to_string(),
                change.entry_kind.to_string(),
                key,
            ]
        })
        .collect();
    print_table(&["SEQ", "AT", "SERVER", "CHANGE", "KIND", "KEY"], rows);
}
