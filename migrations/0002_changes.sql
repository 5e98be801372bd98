-- The change feed: which URIs each swap added, removed or changed, oldest first. `seq` never
-- goes backwards (AUTOINCREMENT), so clients can resume after the oldest rows are pruned.
-- A swap records at most a fixed number of per-URI rows; beyond that one 'truncated' row
-- says how many changes it left out (`count`), so a huge first load stays cheap.
CREATE TABLE changes (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    at INTEGER NOT NULL,
    server TEXT NOT NULL,
    kind TEXT NOT NULL CHECK (kind IN ('added', 'removed', 'changed', 'truncated')),
    uri TEXT,
    count INTEGER NOT NULL DEFAULT 1
) STRICT;

-- The per-server content cache for `resources/read`; NULL means the cache is off.
ALTER TABLE servers ADD COLUMN read_cache_bytes INTEGER;

-- Contents a server returned for `resources/read`, kept so reads work while it is offline.
CREATE TABLE read_cache (
    server_id INTEGER NOT NULL REFERENCES servers(id) ON DELETE CASCADE,
    uri TEXT NOT NULL,
    contents TEXT NOT NULL,
    bytes INTEGER NOT NULL,
    stored_at INTEGER NOT NULL,
    PRIMARY KEY (server_id, uri)
) STRICT;
