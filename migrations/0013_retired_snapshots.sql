-- Snapshots a reload replaced (src/store/writer/reload.rs). A re-walk that changes much of a
-- big snapshot copies its new snapshot under a pending id and gives the server that id in one
-- small transaction; the old rows keep the old `server_id`, which no `servers` row has any
-- more, so no reader sees them. They are deleted in batches between the writer's operations,
-- and their row here last, so a stop or a crash in between resumes the deletion at start.
CREATE TABLE retired_snapshots (
    server_id INTEGER PRIMARY KEY,
    server TEXT NOT NULL
) STRICT;
