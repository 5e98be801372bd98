-- Tools and prompts: the last complete snapshot of every (server, kind), one row per entry,
-- keyed by its name within the server. `raw` is the object as the server sent it; name, title
-- and description are extracted from it for listing and search. (Resources and templates keep
-- their own tables.) This migration depends only on 0001 and 0002.
-- AUTOINCREMENT: an id is never reused, so the full-text index can never confuse two entries.
CREATE TABLE entries (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    server_id INTEGER NOT NULL REFERENCES servers(id) ON DELETE CASCADE,
    kind TEXT NOT NULL CHECK (kind IN ('tool', 'prompt')),
    name TEXT NOT NULL,
    title TEXT,
    description TEXT,
    raw TEXT NOT NULL,
    UNIQUE (server_id, kind, name)
) STRICT;
CREATE INDEX entries_by_kind_name ON entries(kind, name);

-- One row per (server, kind) that has completed a walk: when, and how many entries.
CREATE TABLE entry_snapshots (
    server_id INTEGER NOT NULL REFERENCES servers(id) ON DELETE CASCADE,
    kind TEXT NOT NULL,
    snapshot_at INTEGER NOT NULL,
    count INTEGER NOT NULL,
    PRIMARY KEY (server_id, kind)
) STRICT;

-- The definitions a user accepted (`catalog/accept`); drift is the difference from these.
CREATE TABLE accepted_entries (
    server_id INTEGER NOT NULL REFERENCES servers(id) ON DELETE CASCADE,
    kind TEXT NOT NULL,
    name TEXT NOT NULL,
    raw TEXT NOT NULL,
    accepted_at INTEGER NOT NULL,
    PRIMARY KEY (server_id, kind, name)
) STRICT;
-- Servers whose definitions have been accepted at least once (an accepted empty list counts).
CREATE TABLE accepted_servers (
    server_id INTEGER PRIMARY KEY REFERENCES servers(id) ON DELETE CASCADE,
    accepted_at INTEGER NOT NULL
) STRICT;

-- Full-text index over tools and prompts: `rowid` is the entry's id; `inputs` holds the names
-- and descriptions of a tool's input properties or a prompt's arguments.
CREATE VIRTUAL TABLE entries_fts USING fts5(
    name, title, description, inputs,
    tokenize = 'unicode61 remove_diacritics 2'
);
INSERT INTO entries_fts(entries_fts, rank) VALUES ('rank', 'bm25(5.0, 4.0, 1.5, 1.0)');

-- The change feed learns which kind an entry is, its name (tools and prompts have no URI) and,
-- for `changed`, a JSON array of the top-level fields that changed.
ALTER TABLE changes ADD COLUMN entry_kind TEXT NOT NULL DEFAULT 'resource';
ALTER TABLE changes ADD COLUMN name TEXT;
ALTER TABLE changes ADD COLUMN fields TEXT;
