//! The change feed by time: where the entries written from a time on start (a binary search over `seq`), and what a window of the feed holds, counted per server, entry kind and kind of change.

use rusqlite::{params, Connection, OptionalExtension};

use super::StoreError;
use crate::protocol::{ChangeKind, Kind};

/// Where the feed's entries written at or after `at_ms` start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FeedPosition {
    /// The sequence number just before the first such entry (the newest one when none is):
    /// the feed after it is the window.
    pub after_seq: i64,
    /// Entries that may have been written after `at_ms` were pruned (the oldest kept entry
    /// is that young and older ones existed).
    pub pruned: bool,
}

/// The first kept entry at or after `seq`: its sequence number and time.
fn entry_at_or_after(connection: &Connection, seq: i64) -> Result<Option<(i64, i64)>, StoreError> {
    Ok(connection
        .prepare_cached("SELECT seq, at FROM changes WHERE seq >= ?1 ORDER BY seq LIMIT 1")?
        .query_row([seq], |row| Ok((row.get(0)?, row.get(1)?)))
        .optional()?)
}

/// Where the entries written at or after `at_ms` start. Sequence numbers and times grow
/// together (the one writer stamps each commit's rows with its clock; `prune_changes` relies on
/// the same), so a binary search over `seq` finds it in about 20 lookups of the primary key
/// whatever the feed holds, where a scan of `at` would read every older entry.
pub fn feed_position_at(connection: &Connection, at_ms: i64) -> Result<FeedPosition, StoreError> {
    let Some((oldest_seq, oldest_at)) = entry_at_or_after(connection, i64::MIN)? else {
        return Ok(FeedPosition {
            after_seq: super::queries::latest_change_seq(connection)?,
            pruned: false,
        });
    };
    let latest = super::queries::latest_change_seq(connection)?;
    // The first x in [oldest, latest + 1] whose first entry at or after it is young enough
    // (latest + 1 has none: it stands for "no entry is").
    let (mut low, mut high) = (oldest_seq, latest.saturating_add(1));
    while low < high {
        let middle = low + (high - low) / 2;
        match entry_at_or_after(connection, middle)? {
            Some((_, at)) if at < at_ms => low = middle + 1,
            _ => high = middle,
        }
    }
    let first = entry_at_or_after(connection, low)?.map(|(seq, _)| seq);
    Ok(FeedPosition {
        after_seq: first.map_or(latest, |seq| seq - 1),
        pruned: oldest_seq > 1 && oldest_at >= at_ms,
    })
}

/// One (server, entry kind, kind of change) of a window of the feed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WindowCount {
    pub server: String,
    pub entry_kind: Kind,
    pub kind: ChangeKind,
    /// The feed entries of this group.
    pub entries: u64,
    /// Their `count`s summed: one per named change, a `truncated` entry's unnamed ones.
    pub changes: u64,
}

/// The entries after `after_seq` up to `up_to_seq` (only those of `kinds` when given), counted
/// per (server, entry kind, kind of change). One pass over the window's rows by primary key;
/// the window is at most the kept feed (`CHANGES_KEPT` entries).
pub fn window_counts(
    connection: &Connection,
    after_seq: i64,
    up_to_seq: i64,
    kinds: Option<&[Kind]>,
) -> Result<Vec<WindowCount>, StoreError> {
    let kinds = kinds
        .map(serde_json::to_string)
        .transpose()
        .map_err(|error| StoreError::Walk(error.to_string()))?;
    let mut statement = connection.prepare_cached(
        "SELECT server, entry_kind, kind, count(*), coalesce(sum(count), 0) FROM changes
         WHERE seq > ?1 AND seq <= ?2
           AND (?3 IS NULL OR entry_kind IN (SELECT value FROM json_each(?3)))
         GROUP BY server, entry_kind, kind ORDER BY server, entry_kind, kind",
    )?;
    let rows = statement.query_map(params![after_seq, up_to_seq, kinds], |row| {
        Ok(WindowCount {
            server: row.get(0)?,
            entry_kind: row.get(1)?,
            kind: row.get(2)?,
            entries: row.get::<_, i64>(3)?.max(0) as u64,
            changes: row.get::<_, i64>(4)?.max(0) as u64,
        })
    })?;
    Ok(rows.collect::<Result<_, _>>()?)
}
