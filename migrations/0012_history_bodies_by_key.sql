-- A kept version costs the swap that records it one lookup of its entry's versions and two
-- appends (issue 34's budget: a re-walk with history costs at most 1.1x one without). Bodies
-- were keyed by digest and found through two more indexes (`history_bodies`' digest key and
-- `history_by_digest`), each insert a write to a random page: now a body has a row id, is
-- appended, and belongs to one entry; a flip-flop back to an old body of the same entry
-- reuses it (found through `history_by_key`, which holds each version's digest and body).
-- A body goes with the last version of its entry pointing at it.
CREATE TABLE history_bodies_by_key (
    id INTEGER PRIMARY KEY,
    digest TEXT NOT NULL,
    body TEXT NOT NULL,
    bytes INTEGER NOT NULL
) STRICT;
-- One body per (entry, digest), numbered by the entry's first version of it.
INSERT INTO history_bodies_by_key (id, digest, body, bytes)
    SELECT min(v.id), v.digest, b.body, b.bytes
    FROM history_versions v JOIN history_bodies b ON b.digest = v.digest
    GROUP BY v.server_id, v.kind, v.key, v.digest;
CREATE TABLE history_versions_by_key (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    server_id INTEGER NOT NULL REFERENCES servers(id) ON DELETE CASCADE,
    kind TEXT NOT NULL,
    key TEXT NOT NULL,
    digest TEXT NOT NULL,
    body_id INTEGER NOT NULL,
    first_seen INTEGER NOT NULL,
    last_seen INTEGER
) STRICT;
INSERT INTO history_versions_by_key
        (id, server_id, kind, key, digest, body_id, first_seen, last_seen)
    SELECT v.id, v.server_id, v.kind, v.key, v.digest,
           (SELECT min(w.id) FROM history_versions w
            WHERE w.server_id = v.server_id AND w.kind = v.kind AND w.key = v.key
              AND w.digest = v.digest),
           v.first_seen, v.last_seen
    FROM history_versions v;
-- Version numbers keep growing from where they were (AUTOINCREMENT's high-water mark).
INSERT INTO sqlite_sequence (name, seq)
    SELECT 'history_versions_by_key', seq FROM sqlite_sequence WHERE name = 'history_versions'
    AND NOT EXISTS (SELECT 1 FROM sqlite_sequence WHERE name = 'history_versions_by_key');
UPDATE sqlite_sequence
    SET seq = max(seq, (SELECT seq FROM sqlite_sequence WHERE name = 'history_versions'))
    WHERE name = 'history_versions_by_key';
DROP TABLE history_versions;
DROP TABLE history_bodies;
ALTER TABLE history_bodies_by_key RENAME TO history_bodies;
ALTER TABLE history_versions_by_key RENAME TO history_versions;
-- An entry's versions in order, with all a swap asks of them (whether the newest is current,
-- its digest, a version of the same digest and its body) in the index itself.
CREATE INDEX history_by_key
    ON history_versions(server_id, kind, key, id, digest, body_id, last_seen);
CREATE INDEX history_by_last_seen ON history_versions(last_seen) WHERE last_seen IS NOT NULL;
CREATE TRIGGER history_body_added AFTER INSERT ON history_bodies BEGIN
    UPDATE history_settings SET total_bytes = total_bytes + new.bytes WHERE id = 1;
END;
CREATE TRIGGER history_body_gone AFTER DELETE ON history_bodies BEGIN
    UPDATE history_settings SET total_bytes = total_bytes - old.bytes WHERE id = 1;
END;
CREATE TRIGGER history_version_gone AFTER DELETE ON history_versions BEGIN
    DELETE FROM history_bodies WHERE id = old.body_id
        AND NOT EXISTS (SELECT 1 FROM history_versions
                        WHERE server_id = old.server_id AND kind = old.kind AND key = old.key
                          AND body_id = old.body_id);
END;
UPDATE history_settings SET total_bytes = (SELECT coalesce(sum(bytes), 0) FROM history_bodies)
    WHERE id = 1;
