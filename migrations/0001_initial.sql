-- The servers we mirror, with the state of their session and their last walk.
CREATE TABLE servers (
    id INTEGER PRIMARY KEY,
    name TEXT NOT NULL UNIQUE,
    priority INTEGER NOT NULL DEFAULT 100,
    transport TEXT NOT NULL DEFAULT '',
    state TEXT NOT NULL DEFAULT 'starting',
    protocol_version TEXT,
    server_info TEXT,
    capabilities TEXT,
    connected_at INTEGER,
    retry_at INTEGER,
    last_walk_at INTEGER,
    last_walk_ms INTEGER,
    last_walk_pages INTEGER,
    last_walk_added INTEGER,
    last_walk_removed INTEGER,
    last_walk_changed INTEGER,
    last_walk_duplicates INTEGER,
    last_walk_skipped INTEGER,
    snapshot_at INTEGER,
    resource_count INTEGER NOT NULL DEFAULT 0,
    template_count INTEGER NOT NULL DEFAULT 0,
    stale INTEGER NOT NULL DEFAULT 0,
    walks_ok INTEGER NOT NULL DEFAULT 0,
    walks_failed INTEGER NOT NULL DEFAULT 0,
    last_error TEXT,
    last_error_at INTEGER
) STRICT;

-- The last complete snapshot of every server's resources. `raw` is the object as the
-- server sent it; the other columns are extracted from it for queries.
CREATE TABLE resources (
    id INTEGER PRIMARY KEY,
    server_id INTEGER NOT NULL REFERENCES servers(id) ON DELETE CASCADE,
    uri TEXT NOT NULL,
    name TEXT NOT NULL,
    title TEXT,
    description TEXT,
    mime_type TEXT,
    size INTEGER,
    annotations TEXT,
    icons TEXT,
    meta TEXT,
    raw TEXT NOT NULL,
    UNIQUE (server_id, uri)
) STRICT;
CREATE INDEX resources_by_uri ON resources(uri);

CREATE TABLE resource_templates (
    id INTEGER PRIMARY KEY,
    server_id INTEGER NOT NULL REFERENCES servers(id) ON DELETE CASCADE,
    uri_template TEXT NOT NULL,
    name TEXT NOT NULL,
    title TEXT,
    description TEXT,
    mime_type TEXT,
    raw TEXT NOT NULL,
    UNIQUE (server_id, uri_template)
) STRICT;

-- Full-text index over the resources table, maintained by the store on each swap's diff.
CREATE VIRTUAL TABLE resources_fts USING fts5(
    uri, name, title, description,
    content = 'resources', content_rowid = 'id',
    tokenize = 'unicode61 remove_diacritics 2'
);
-- Name and title weigh more than URI and description.
INSERT INTO resources_fts(resources_fts, rank) VALUES ('rank', 'bm25(1.0, 5.0, 4.0, 1.5)');
