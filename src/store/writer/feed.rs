//! The change feed's rows as a swap writes them: its bounds, the `truncated` row of a large
//! swap, and the pruning to `CHANGES_KEPT` and `CHANGES_MAX_AGE_MS` (the `CatalogChanged`
//! broadcast after a commit is `Writer::announce`).

use super::*;

/// The most per-key rows one swap adds to the change feed (every key of any real swap, so a
/// follower fetches only what changed); past it, one 'truncated' row with a count, and a
/// follower lists again, which is then the cheaper way anyway.
pub const CHANGES_PER_SWAP: u64 = 1_000_000;
/// A first load (a server with no entries yet) records its first keys and one 'truncated'
/// row for the rest: a follower lists a new server whole, and a million rows stay cheap.
pub const CHANGES_PER_FIRST_LOAD: u64 = 1_000;
/// The change feed keeps this many newest entries, none older than `CHANGES_MAX_AGE_MS`;
/// a follower whose cursor is older lists again.
pub const CHANGES_KEPT: i64 = 1_000_000;
pub const CHANGES_MAX_AGE_MS: i64 = 7 * 24 * 3600 * 1000;

/// Moves the catalog's generation (`catalog_generation`) inside `transaction`: every commit
/// that changes what a list answer holds calls this before it commits, so a reader sees the
/// new rows and the new generation together or neither (an ETag made from the generation
/// read with the rows cannot name two bodies).
pub(in crate::store) fn advance_generation(
    transaction: &rusqlite::Transaction<'_>,
) -> Result<(), StoreError> {
    execute(
        transaction,
        "UPDATE catalog_generation SET generation = generation + 1",
        [],
    )?;
    Ok(())
}

/// Adds the 'truncated' row for the changes of one swap that were not recorded one by one.
pub(super) fn record_truncated(
    transaction: &rusqlite::Transaction<'_>,
    now: i64,
    server: &str,
    total: u64,
    recorded: u64,
) -> Result<(), StoreError> {
    if total > recorded {
        execute(
            transaction,
            "INSERT INTO changes (at, server, kind, uri, count) VALUES (?1, ?2, ?4, NULL, ?3)",
            params![
                now,
                server,
                (total - recorded) as i64,
                ChangeKind::Truncated
            ],
        )?;
    }
    Ok(())
}

/// Forgets the oldest change feed entries past `CHANGES_KEPT` and those older than
/// `CHANGES_MAX_AGE_MS` (seq and time grow together, so the expired rows are the oldest
/// seqs: the look stops at the first row young enough); returns the newest seq.
pub(super) fn prune_changes(transaction: &rusqlite::Transaction<'_>) -> Result<i64, StoreError> {
    let latest: i64 = query_one(transaction, "SELECT coalesce(max(seq), 0) FROM changes", [])?;
    let young: Option<i64> = query_one(
        transaction,
        "SELECT seq FROM changes WHERE at >= ?1 ORDER BY seq LIMIT 1",
        [now_ms() - CHANGES_MAX_AGE_MS],
    )?;
    let keep_from = young.unwrap_or(latest + 1).max(latest - CHANGES_KEPT + 1);
    execute(
        transaction,
        "DELETE FROM changes WHERE seq < ?1",
        [keep_from],
    )?;
    Ok(latest)
}
