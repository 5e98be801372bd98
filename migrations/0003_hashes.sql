-- Content hashes and the size bound. A swap compares a server's entries with a walk's by hash,
-- through an index that holds (server_id, uri, hash), so it never reads a row to compare it;
-- 0 means "not hashed yet" (rows from before this migration get their hash at their server's
-- next swap, compared by text that once).
ALTER TABLE resources ADD COLUMN hash INTEGER NOT NULL DEFAULT 0;
-- The entry was over `max_entry_bytes` and is stored without some of its fields.
ALTER TABLE resources ADD COLUMN oversized INTEGER NOT NULL DEFAULT 0;
ALTER TABLE resource_templates ADD COLUMN oversized INTEGER NOT NULL DEFAULT 0;
CREATE INDEX resources_by_server_uri_hash ON resources(server_id, uri, hash);
-- Both stay tiny: most snapshots have no oversized entry, and every row is hashed after one swap.
CREATE INDEX resources_oversized ON resources(server_id) WHERE oversized != 0;
CREATE INDEX resources_unhashed ON resources(server_id) WHERE hash = 0;
-- Oversized entries in the server's snapshot, for status.
ALTER TABLE servers ADD COLUMN oversized_entries INTEGER NOT NULL DEFAULT 0;
