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

#[cfg(test)]
mod tests {
    use super::*;

    /// A feed of entries `seq` 1..=`last` written at `10 * seq` ms, of which `kept` remain.
    fn feed(last: i64, kept: impl Fn(i64) -> bool) -> Connection {
        let mut connection = Connection::open_in_memory().expect("open");
        crate::store::schema::migrate(std::path::Path::new(":memory:"), &mut connection)
            .expect("migrate");
        for seq in 1..=last {
            let kind = if seq % 3 == 0 { "changed" } else { "added" };
            connection
                .execute(
                    "INSERT INTO changes (seq, at, server, kind, uri, entry_kind)
                     VALUES (?1, ?2, ?3, ?4, 'u', 'resource')",
                    params![seq, 10 * seq, if seq % 2 == 0 { "a" } else { "b" }, kind],
                )
                .expect("insert");
        }
        connection
            .execute(
                "DELETE FROM changes WHERE seq NOT IN (SELECT value FROM json_each(?1))",
                [
                    serde_json::to_string(&(1..=last).filter(|seq| kept(*seq)).collect::<Vec<_>>())
                        .expect("json"),
                ],
            )
            .expect("delete");
        connection
    }

    #[test]
    fn a_time_starts_at_the_first_entry_written_then_across_gaps_and_pruning() {
        let whole = feed(1000, |_| true);
        let at = |at_ms| feed_position_at(&whole, at_ms).expect("position");
        assert_eq!(
            at(0),
            FeedPosition {
                after_seq: 0,
                pruned: false
            }
        );
        assert_eq!(at(10).after_seq, 0);
        assert_eq!(at(11).after_seq, 1);
        assert_eq!(at(5000).after_seq, 499);
        assert_eq!(at(10_000).after_seq, 999);
        assert_eq!(at(10_001).after_seq, 1000, "none as young: the newest");
        // Gaps (every seq not divisible by 7 gone) and the oldest pruned.
        let sparse = feed(1000, |seq| seq % 7 == 0 && seq > 100);
        let at = |at_ms| feed_position_at(&sparse, at_ms).expect("position");
        assert_eq!(
            at(5000).after_seq,
            503,
            "the first kept entry at 5000 ms or later is 504"
        );
        assert_eq!(at(5040).after_seq, 503);
        assert_eq!(at(5041).after_seq, 510);
        assert_eq!(
            at(0),
            FeedPosition {
                after_seq: 104,
                pruned: true
            }
        );
        assert!(!at(2000).pruned, "the pruned entries were older");
    }

    #[test]
    fn a_window_counts_per_server_entry_kind_and_kind_of_change() {
        let connection = feed(12, |_| true);
        let counts = window_counts(&connection, 6, 12, None).expect("counts");
        let summed: Vec<(String, ChangeKind, u64)> = counts
            .into_iter()
            .map(|count| (count.server, count.kind, count.changes))
            .collect();
        // 7..=12: a has 8, 10, 12 (12 changed), b has 7, 9, 11 (9 changed).
        assert_eq!(
            summed,
            [
                ("a".to_string(), ChangeKind::Added, 2),
                ("a".to_string(), ChangeKind::Changed, 1),
                ("b".to_string(), ChangeKind::Added, 2),
                ("b".to_string(), ChangeKind::Changed, 1),
            ]
        );
        let tools = window_counts(&connection, 0, 12, Some(&[Kind::Tool])).expect("counts");
        assert!(tools.is_empty());
    }
}
