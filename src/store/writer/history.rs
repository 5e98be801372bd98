//! Definition history: each distinct version of an entry, written in the transaction of the swap that changed the snapshot, and pruned in bounded batches.
//!
//! The swaps call in with small hooks: `record_version` for an added or changed entry (with
//! `seed_version` first when a changed entry has no history yet, so its first change already
//! has a previous version to compare with), and `close_version` for a removed one. A body is
//! stored once per entry and digest (XXH3-128 of its text), so a flip-flop back to an old body
//! adds a version row pointing at the body already kept. A version costs its swap one read of
//! the entry's versions (all in the `history_by_key` index) and two appends: no write to a
//! page chosen by a digest (the 1.1x budget of a re-walk). `prune_batch` runs once per swap.
//! A resource swap, which may record tens of thousands of versions, does the same for all of
//! them at once (`resources_before`, `resources_after`, `record_pending`): a few statements
//! over its temp tables instead of about four per version, the digests computed inside them
//! (`history_digest`, registered on the writer's connection by `register_digest`). Tools,
//! prompts and templates, a few per swap, keep the hooks.

use rusqlite::functions::FunctionFlags;
use rusqlite::types::ValueRef;
use rusqlite::{params, Connection, OptionalExtension, Transaction};
use xxhash_rust::xxh3::xxh3_128;

use super::{execute, query_one};

use crate::config::HistoryBounds;
use crate::protocol::Kind;
use crate::store::StoreError;

/// The most versions one prune statement deletes beyond those its swap added: a swap's share
/// of pruning stays small, and what remains goes with the next swaps.
const PRUNE_BATCH: i64 = 500;

/// A version that pruning may remove: not the entry's current one, nor the body a user
/// accepted for it (`catalog/accept`, drift's reference).
const DELETABLE: &str = "v.last_seen IS NOT NULL AND NOT EXISTS (
        SELECT 1 FROM accepted_entries a JOIN history_bodies b ON b.id = v.body_id
        WHERE a.server_id = v.server_id AND a.kind = v.kind AND a.name = v.key AND a.raw = b.body)";

/// Which entry a version is of: a server's entry of one kind, by its key (a resource's URI,
/// a template's URI template, a tool's or prompt's name).
#[derive(Clone, Copy)]
pub(super) struct VersionKey<'a> {
    server_id: i64,
    kind: Kind,
    key: &'a str,
}

impl<'a> VersionKey<'a> {
    pub(super) fn new(server_id: i64, kind: Kind, key: &'a str) -> VersionKey<'a> {
        VersionKey {
            server_id,
            kind,
            key,
        }
    }

    fn resource(server_id: i64, uri: &'a str) -> VersionKey<'a> {
        VersionKey::new(server_id, Kind::Resource, uri)
    }
}

/// The digest a body is kept under: 32 hex digits of its XXH3-128.
fn body_digest(body: &str) -> String {
    digest_of(body.as_bytes())
}

fn digest_of(bytes: &[u8]) -> String {
    format!("{:032x}", xxh3_128(bytes))
}

/// `body_digest` in SQL, `history_digest(text)`, on the writer's connection: a swap records
/// its resource versions in a few statements over its temp tables (`record_pending`) and
/// digests their texts inside them. NULL for anything but text.
pub(super) fn register_digest(connection: &Connection) -> rusqlite::Result<()> {
    connection.create_scalar_function(
        "history_digest",
        1,
        FunctionFlags::SQLITE_UTF8 | FunctionFlags::SQLITE_DETERMINISTIC,
        |context| {
            Ok(match context.get_raw(0) {
                ValueRef::Text(text) => Some(digest_of(text)),
                _ => None,
            })
        },
    )
}

/// One kept version of an entry as a swap sees it (every field is in `history_by_key`).
struct KeptVersion {
    id: i64,
    digest: String,
    body_id: i64,
}

/// The entry's kept versions, newest first (at most `history_versions_per_key`, and the
/// accepted one), and that bound.
fn kept_versions(
    transaction: &Transaction<'_>,
    server_id: i64,
    kind: Kind,
    key: &str,
) -> Result<(Vec<KeptVersion>, usize), StoreError> {
    let mut bound = usize::MAX;
    let mut statement = transaction.prepare_cached(
        "SELECT id, digest, body_id,
                (SELECT versions_per_key FROM history_settings WHERE id = 1)
         FROM history_versions INDEXED BY history_by_key
         WHERE server_id = ?1 AND kind = ?2 AND key = ?3 ORDER BY id DESC",
    )?;
    let mut rows = statement.query(params![server_id, kind, key])?;
    let mut versions = Vec::new();
    while let Some(row) = rows.next()? {
        bound = usize::try_from(row.get::<_, i64>(3)?).unwrap_or(usize::MAX);
        versions.push(KeptVersion {
            id: row.get(0)?,
            digest: row.get(1)?,
            body_id: row.get(2)?,
        });
    }
    Ok((versions, bound))
}

/// Whether version `id` is open (its entry's current one; only an entry's newest version
/// ever is): read from its row, since `last_seen` is not in `history_by_key`.
fn is_open(transaction: &Transaction<'_>, id: i64) -> Result<bool, StoreError> {
    Ok(transaction
        .prepare_cached("SELECT last_seen IS NULL FROM history_versions WHERE id = ?1")?
        .query_row([id], |row| row.get(0))?)
}

/// Records `body` as the current version of (server, kind, key) at `now`, unless it already
/// is: the previous current version (the newest, if open) is closed, the body stored unless
/// a kept version of the entry has its digest.
pub(super) fn record_version(
    transaction: &Transaction<'_>,
    entry: VersionKey<'_>,
    body: &str,
    now: i64,
) -> Result<(), StoreError> {
    let digest = body_digest(body);
    let (versions, bound) = kept_versions(transaction, entry.server_id, entry.kind, entry.key)?;
    if let Some(newest) = versions.first() {
        if newest.digest == digest && is_open(transaction, newest.id)? {
            return Ok(());
        }
        transaction
            .prepare_cached(
                "UPDATE history_versions SET last_seen = ?2 WHERE id = ?1 AND last_seen IS NULL",
            )?
            .execute(params![newest.id, now])?;
    }
    let kept_body = versions
        .iter()
        .find(|version| version.digest == digest)
        .map(|version| version.body_id);
    insert_version(transaction, entry, (&digest, body, kept_body), now)?;
    if versions.len() >= bound {
        prune_key(transaction, entry)?;
    }
    Ok(())
}

/// Records `body` as the entry's current version when the entry has no history at all (it
/// was stored before history was kept): its change, recorded next, then closes it.
pub(super) fn seed_version(
    transaction: &Transaction<'_>,
    entry: VersionKey<'_>,
    body: &str,
    now: i64,
) -> Result<(), StoreError> {
    let known: bool = transaction
        .prepare_cached(
            "SELECT EXISTS (SELECT 1 FROM history_versions
                            WHERE server_id = ?1 AND kind = ?2 AND key = ?3)",
        )?
        .query_row(params![entry.server_id, entry.kind, entry.key], |row| {
            row.get(0)
        })?;
    if !known {
        let digest = body_digest(body);
        insert_version(transaction, entry, (&digest, body, None), now)?;
    }
    Ok(())
}

/// Appends a version of (server, kind, key) pointing at `kept_body`, else at `body` appended.
fn insert_version(
    transaction: &Transaction<'_>,
    entry: VersionKey<'_>,
    (digest, body, kept_body): (&str, &str, Option<i64>),
    now: i64,
) -> Result<(), StoreError> {
    let body_id = match kept_body {
        Some(body_id) => body_id,
        None => {
            transaction
                .prepare_cached(
                    "INSERT INTO history_bodies (digest, body, bytes) VALUES (?1, ?2, ?3)",
                )?
                .execute(params![digest, body, body.len() as i64])?;
            let body_id = transaction.last_insert_rowid();
            add_bytes(transaction, body.len() as i64)?;
            body_id
        }
    };
    transaction
        .prepare_cached(
            "INSERT INTO history_versions (server_id, kind, key, digest, body_id, first_seen)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        )?
        .execute(params![
            entry.server_id,
            entry.kind,
            entry.key,
            digest,
            body_id,
            now
        ])?;
    Ok(())
}

/// Adds `bytes` of bodies appended to the kept total (`history_settings.total_bytes`, which
/// the bytes bound reads): the writer adds them once per insert statement; a removed body
/// subtracts its own (the trigger `history_body_gone`).
fn add_bytes(transaction: &Transaction<'_>, bytes: i64) -> Result<(), StoreError> {
    if bytes != 0 {
        transaction
            .prepare_cached(
                "UPDATE history_settings SET total_bytes = total_bytes + ?1 WHERE id = 1",
            )?
            .execute([bytes])?;
    }
    Ok(())
}

/// The newest version of (server, kind, key), the only one that can be open.
const NEWEST_OF_ENTRY: &str = "(SELECT max(n.id) FROM history_versions n INDEXED BY history_by_key
      WHERE n.server_id = ?1 AND n.kind = ?2 AND n.key = ?3)";

/// The entry is no longer listed: its current version is closed at `now`.
pub(super) fn close_version(
    transaction: &Transaction<'_>,
    entry: VersionKey<'_>,
    now: i64,
) -> Result<(), StoreError> {
    transaction
        .prepare_cached(&format!(
            "UPDATE history_versions SET last_seen = ?4
                 WHERE id = {NEWEST_OF_ENTRY} AND last_seen IS NULL"
        ))?
        .execute(params![entry.server_id, entry.kind, entry.key, now])?;
    Ok(())
}

/// Whether the server's resources keep a history (`history = true`).
pub(super) fn resources_kept(
    transaction: &Transaction<'_>,
    server_id: i64,
) -> Result<bool, StoreError> {
    Ok(transaction
        .prepare_cached("SELECT history_resources FROM servers WHERE id = ?1")?
        .query_row([server_id], |row| row.get::<_, i64>(0))
        .optional()?
        .is_some_and(|kept| kept != 0))
}

/// A `swap_ids` row's URI (`x`): the one the diff noted, else its snapshot row's. A staged
/// diff notes them, so a swap's history reads no snapshot row to find its entries' keys.
const SWAP_URI: &str = "coalesce(x.uri, (SELECT uri FROM resources WHERE id = x.id))";

/// Before a swap changes a kept server's resources: removed ones are closed, changed ones
/// without a history get their old body as the version the change replaces (`swap_ids` rows
/// of kind `removed_kind` are the removed ones, the others changed). Set-based: one statement
/// closes the removed ones, and the seeds go through `record_pending` as a swap's versions do.
pub(super) fn resources_before(
    transaction: &Transaction<'_>,
    server_id: i64,
    now: i64,
    removed_kind: i64,
) -> Result<(), StoreError> {
    execute(
        transaction,
        &format!(
            "UPDATE history_versions SET last_seen = ?4
             WHERE last_seen IS NULL AND id IN (
                 SELECT (SELECT max(n.id) FROM history_versions n INDEXED BY history_by_key
                         WHERE n.server_id = ?1 AND n.kind = ?2 AND n.key = {SWAP_URI})
                 FROM temp.swap_ids x WHERE x.kind = ?3)"
        ),
        params![server_id, Kind::Resource, removed_kind, now],
    )?;
    // A changed resource with a history needs nothing here: only the ones never recorded
    // are seeded, with the text they have before the swap changes them (read only for them).
    let seeds = execute(
        transaction,
        &format!(
            "INSERT INTO temp.history_pending (resource_id, key, digest)
             SELECT id, key, history_digest(raw)
             FROM (SELECT x.id AS id, {SWAP_URI} AS key,
                          (SELECT raw FROM resources WHERE id = x.id) AS raw
                   FROM temp.swap_ids x
                   WHERE x.kind != ?3) AS s
             WHERE NOT EXISTS (
                 SELECT 1 FROM history_versions v INDEXED BY history_by_key
                 WHERE v.server_id = ?1 AND v.kind = ?2 AND v.key = s.key)"
        ),
        params![server_id, Kind::Resource, removed_kind],
    )?;
    if seeds > 0 {
        record_pending(transaction, server_id, now)?;
    }
    Ok(())
}

/// The changed resources of a swap and the added ones, into `temp.history_pending` with the
/// digests of their texts. `+server_id`: the added rows' id range drives the second part, not
/// the server's index (which visits every row the server has).
pub(super) const RESOURCES_AFTER_SQL: &str =
    "INSERT INTO temp.history_pending (resource_id, key, digest)
     SELECT id, uri, history_digest(raw) FROM (
         SELECT r.id AS id, r.uri AS uri, r.raw AS raw
         FROM temp.swap_ids x CROSS JOIN resources r ON r.id = x.id
         WHERE x.kind = ?1
         UNION ALL
         SELECT id, uri, raw FROM resources WHERE id > ?2 AND +server_id = ?3)";

/// After a swap changed a kept server's resources: the changed ones (`swap_ids` rows of kind
/// `changed_kind`) and the added ones (ids above `highest_old_id`) are recorded, all at once
/// (`record_pending`). Returns how many versions were added.
pub(super) fn resources_after(
    transaction: &Transaction<'_>,
    server_id: i64,
    now: i64,
    changed_kind: i64,
    highest_old_id: i64,
) -> Result<u64, StoreError> {
    let listed = execute(
        transaction,
        RESOURCES_AFTER_SQL,
        params![changed_kind, highest_old_id, server_id],
    )?;
    if listed == 0 {
        return Ok(0);
    }
    record_pending(transaction, server_id, now)
}

/// Records the resource versions listed in `temp.history_pending` (a resource row each, its URI and
/// the digest of its text as the listing read it) as `record_version` records one, in a few
/// statements for all of them, each entry's versions read once: one statement reads, for every
/// listed entry, how many versions it keeps, its newest version (whether it has the listed digest,
/// and if so whether it is current, from its row) and the body it keeps under that digest; an entry
/// whose newest version is current with the same digest is left as it is; the others' newest
/// versions are closed at `now` if open (by id: only the newest version is ever open); a body the
/// entry already keeps under the same digest is pointed at again, else the text is appended as a
/// new body; the versions are appended in the list's order; an entry that had `versions_per_key`
/// versions or more is pruned (`prune_key`). A swap lists each URI at most once, so no entry has
/// two versions in one list. The list is emptied. Returns how many versions were added.
fn record_pending(
    transaction: &Transaction<'_>,
    server_id: i64,
    now: i64,
) -> Result<u64, StoreError> {
    // `newest` packs the newest version's id with two flags, `(id * 2 + same digest) * 2 +
    // current`: one `max` finds the id and the digest's flag (NULL for an entry with
    // no versions) from `history_by_key` alone; the current flag, not in that index, is read
    // from the newest version's row only where the digest is the same (whether anything is
    // to be recorded at all).
    execute(
        transaction,
        "UPDATE temp.history_pending AS p SET (kept, newest, body_id) = (
             SELECT count(*),
                    max(v.id * 4 + 2 * (v.digest = p.digest)),
                    max(CASE WHEN v.digest = p.digest THEN v.body_id END)
             FROM history_versions v INDEXED BY history_by_key
             WHERE v.server_id = ?1 AND v.kind = ?2 AND v.key = p.key)",
        params![server_id, Kind::Resource],
    )?;
    execute(
        transaction,
        "UPDATE temp.history_pending SET newest = newest + (
             SELECT last_seen IS NULL FROM history_versions WHERE id = newest / 4)
         WHERE newest % 4 = 2",
        [],
    )?;
    // The newest version current with the same digest: nothing to record.
    const RECORDED: &str = "coalesce(newest % 4, 0) != 3";
    // Only the newest version is ever open: a recorded entry's newest one of another digest
    // is closed if it is (one of the same digest is closed already, flag 2).
    execute(
        transaction,
        "UPDATE history_versions SET last_seen = ?1
         WHERE id IN (SELECT newest / 4 FROM temp.history_pending WHERE newest % 4 = 0)
           AND last_seen IS NULL",
        [now],
    )?;
    // New bodies get ids above the highest, in the list's order (what appending them one by
    // one gives, gaps aside): the list's own numbers above it. The texts are read from the
    // listed rows here, in the same state of the swap as the listing digested them (before it
    // for a seed, after it for the others), their sizes added to the total once. The list
    // holds no text: its rows are rewritten by the updates above, and with each text in them
    // those rewrote (and journalled) every text once more.
    let base: i64 = query_one(
        transaction,
        "SELECT coalesce(max(id), 0) FROM history_bodies",
        [],
    )?;
    let added_bytes: i64 = {
        let mut insert = transaction.prepare_cached(&format!(
            "INSERT INTO history_bodies (id, digest, body, bytes)
             SELECT ?1 + p.seq, p.digest, r.raw, length(CAST(r.raw AS BLOB))
             FROM temp.history_pending p CROSS JOIN resources r ON r.id = p.resource_id
             WHERE p.body_id IS NULL AND {RECORDED} ORDER BY p.seq
             RETURNING bytes"
        ))?;
        let mut rows = insert.query([base])?;
        let mut sum = 0i64;
        while let Some(row) = rows.next()? {
            sum += row.get::<_, i64>(0)?;
        }
        sum
    };
    add_bytes(transaction, added_bytes)?;
    let recorded = execute(
        transaction,
        &format!(
            "INSERT INTO history_versions (server_id, kind, key, digest, body_id, first_seen)
             SELECT ?1, ?2, key, digest, coalesce(body_id, ?4 + seq), ?3
             FROM temp.history_pending WHERE {RECORDED} ORDER BY seq"
        ),
        params![server_id, Kind::Resource, now, base],
    )? as u64;
    // `record_version` prunes an entry that had as many versions as the bound or more (and
    // reads the bound only of an entry with versions: none has none).
    let bound: i64 = query_one(
        transaction,
        "SELECT versions_per_key FROM history_settings WHERE id = 1",
        [],
    )?;
    if bound >= 0 {
        // Read one at a time, never held together (a large swap at the bound lists most of
        // its entries here).
        let mut full = transaction.prepare_cached(&format!(
            "SELECT key FROM temp.history_pending
             WHERE kept > 0 AND kept >= ?1 AND {RECORDED} ORDER BY seq"
        ))?;
        let mut keys = full.query([bound])?;
        while let Some(row) = keys.next()? {
            let key: String = row.get(0)?;
            prune_key(transaction, VersionKey::resource(server_id, &key))?;
        }
    }
    execute(transaction, "DELETE FROM temp.history_pending", [])?;
    Ok(recorded)
}

/// Keeps the newest `versions_per_key` versions of one entry (and any older protected one).
fn prune_key(transaction: &Transaction<'_>, entry: VersionKey<'_>) -> Result<(), StoreError> {
    transaction
        .prepare_cached(&format!(
            "DELETE FROM history_versions WHERE id IN (
                 SELECT v.id FROM (SELECT * FROM history_versions
                                   WHERE server_id = ?1 AND kind = ?2 AND key = ?3
                                   ORDER BY id DESC LIMIT -1
                                   OFFSET (SELECT versions_per_key FROM history_settings WHERE id = 1)) v
                 WHERE {DELETABLE} LIMIT ?4)"
        ))?
        .execute(params![entry.server_id, entry.kind, entry.key, PRUNE_BATCH])?;
    Ok(())
}

/// One bounded batch of pruning by age and by the bodies' total size, oldest first; called
/// once per swap, in its transaction, with `recorded`, the versions the swap may have added.
/// Each bound deletes at most `PRUNE_BATCH` more than that: a swap's share of pruning follows
/// its own size, and a swap adding more versions than `PRUNE_BATCH` still removes as many as
/// it added while over the bytes bound, so the bound holds. Returns how many versions went.
pub(super) fn prune_batch(
    transaction: &Transaction<'_>,
    now: i64,
    recorded: u64,
) -> Result<u64, StoreError> {
    let batch = PRUNE_BATCH.saturating_add(i64::try_from(recorded).unwrap_or(i64::MAX));
    let by_age = transaction
        .prepare_cached(&format!(
            "DELETE FROM history_versions WHERE id IN (
                 SELECT v.id FROM history_versions v INDEXED BY history_by_last_seen
                 WHERE v.last_seen IS NOT NULL
                   AND v.last_seen < ?1 - (SELECT max_age_ms FROM history_settings WHERE id = 1)
                   AND {DELETABLE}
                 LIMIT ?2)"
        ))?
        .execute(params![now, batch])? as u64;
    let over: bool = transaction
        .prepare_cached("SELECT total_bytes > max_bytes FROM history_settings WHERE id = 1")?
        .query_row([], |row| row.get(0))?;
    let by_size = if over {
        transaction
            .prepare_cached(&format!(
                "DELETE FROM history_versions WHERE id IN (
                     SELECT v.id FROM history_versions v INDEXED BY history_by_last_seen
                     WHERE v.last_seen IS NOT NULL AND {DELETABLE}
                     ORDER BY v.last_seen LIMIT ?1)"
            ))?
            .execute([batch])? as u64
    } else {
        0
    };
    Ok(by_age + by_size)
}

/// Writes the configured bounds (a configuration sync), so every swap prunes by them.
pub(super) fn write_bounds(
    transaction: &Transaction<'_>,
    bounds: &HistoryBounds,
) -> Result<(), StoreError> {
    transaction.execute(
        "UPDATE history_settings SET versions_per_key = ?1, max_age_ms = ?2, max_bytes = ?3
         WHERE id = 1",
        params![
            bounds.versions_per_key.min(i64::MAX as u64) as i64,
            bounds.max_age.as_millis().min(i64::MAX as u128) as i64,
            bounds.max_bytes.min(i64::MAX as u64) as i64
        ],
    )?;
    Ok(())
}
