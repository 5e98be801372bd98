-- First loads in flight. A server's first load inserts its resources page by page straight
-- into `resources`, under `server_id` = -id of its row here, an id no `servers` row has: every
-- reader joins `servers`, so none sees them. The swap gives the server's row that id, in one
-- small transaction, which is what makes the whole load visible at once. A failed or
-- superseded load, or one a crash interrupted, has its rows deleted in batches and its row
-- here last. AUTOINCREMENT: an id is never reused.
CREATE TABLE pending_loads (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    server TEXT NOT NULL
) STRICT;
