-- A re-walk with history costs at most 1.1x one without (issue 34). Two per-version costs of
-- a resource swap go:
-- - `last_seen` leaves `history_by_key`: closing a replaced version rewrote its entry in that
--   index (a delete and an insert on a page chosen by the key); now it updates the version's
--   row alone. Only an entry's newest version is ever open, so what asks whether an entry is
--   current reads its newest version's row by id.
-- - The bodies' total size is added by the writer, once per swap, not by a trigger per body
--   (removals keep theirs: pruning deletes a few, and the bytes bound reads the total).
DROP TRIGGER history_body_added;
DROP INDEX history_by_key;
CREATE INDEX history_by_key ON history_versions(server_id, kind, key, id, digest, body_id);
