-- Every definition's history (issue 34): each distinct version of a tool, prompt, template
-- (always) or resource (when its server's `history` is on), written by the swap that changed
-- the snapshot, in its transaction. Bodies are stored once per digest (XXH3-128 of the text);
-- a version row points at one. `last_seen` is NULL while the version is the entry's current
-- one, else when it stopped being listed. Pruned by the writer in bounded batches, never the
-- current version nor an accepted one.
CREATE TABLE history_bodies (
    digest TEXT PRIMARY KEY,
    body TEXT NOT NULL,
    bytes INTEGER NOT NULL
) STRICT;
CREATE TABLE history_versions (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    server_id INTEGER NOT NULL REFERENCES servers(id) ON DELETE CASCADE,
    kind TEXT NOT NULL,
    key TEXT NOT NULL,
    digest TEXT NOT NULL REFERENCES history_bodies(digest),
    first_seen INTEGER NOT NULL,
    last_seen INTEGER
) STRICT;
CREATE INDEX history_by_key ON history_versions(server_id, kind, key, id);
CREATE INDEX history_by_digest ON history_versions(digest);
CREATE INDEX history_by_last_seen ON history_versions(last_seen) WHERE last_seen IS NOT NULL;
-- The bounds as configured (`[daemon] history_*`, written at every configuration sync) and the
-- bodies' total size, kept by the triggers below so pruning by bytes never sums the table.
CREATE TABLE history_settings (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    versions_per_key INTEGER NOT NULL,
    max_age_ms INTEGER NOT NULL,
    max_bytes INTEGER NOT NULL,
    total_bytes INTEGER NOT NULL
) STRICT;
INSERT INTO history_settings VALUES (1, 100, 31536000000, 268435456, 0);
CREATE TRIGGER history_body_added AFTER INSERT ON history_bodies BEGIN
    UPDATE history_settings SET total_bytes = total_bytes + new.bytes WHERE id = 1;
END;
CREATE TRIGGER history_body_gone AFTER DELETE ON history_bodies BEGIN
    UPDATE history_settings SET total_bytes = total_bytes - old.bytes WHERE id = 1;
END;
-- A body no version points at any more goes with its last version (a prune, or a server's
-- rows cascading away).
CREATE TRIGGER history_version_gone AFTER DELETE ON history_versions BEGIN
    DELETE FROM history_bodies WHERE digest = old.digest
        AND NOT EXISTS (SELECT 1 FROM history_versions WHERE digest = old.digest);
END;
-- Whether a server's resources keep a history (`history = true`, or `[daemon] history`).
ALTER TABLE servers ADD COLUMN history_resources INTEGER NOT NULL DEFAULT 0;
