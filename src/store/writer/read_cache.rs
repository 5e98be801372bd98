//! The read cache's rows: one read result stored, the server's oldest beyond its limit evicted.

use super::*;

/// Stores one read result and evicts the server's oldest entries beyond `limit_bytes`.
pub(super) fn cache_contents(
    connection: &mut Connection,
    server: &str,
    uri: &str,
    contents: &str,
    limit_bytes: u64,
) -> Result<(), StoreError> {
    let bytes = contents.len() as u64;
    let transaction = connection.transaction()?;
    if bytes > limit_bytes {
        // Too big to keep: an older, smaller version would be stale, so drop it too.
        transaction.execute(
            "DELETE FROM read_cache WHERE uri = ?2
                 AND server_id = (SELECT id FROM servers WHERE name = ?1)",
            params![server, uri],
        )?;
    } else {
        // REPLACE gives the entry a new rowid, which keeps "newest" well defined for eviction.
        transaction.execute(
            "INSERT OR REPLACE INTO read_cache (server_id, uri, contents, bytes, stored_at)
             SELECT id, ?2, ?3, ?4, ?5 FROM servers WHERE name = ?1",
            params![server, uri, contents, bytes as i64, now_ms()],
        )?;
        transaction.execute(
            "DELETE FROM read_cache WHERE rowid IN (
                 SELECT entry FROM (
                     SELECT c.rowid AS entry,
                            sum(c.bytes) OVER (ORDER BY c.stored_at DESC, c.rowid DESC) AS kept
                     FROM read_cache c WHERE c.server_id = (SELECT id FROM servers WHERE name = ?1))
                 WHERE kept > ?2)",
            params![server, limit_bytes.min(i64::MAX as u64) as i64],
        )?;
    }
    transaction.commit()?;
    Ok(())
}
