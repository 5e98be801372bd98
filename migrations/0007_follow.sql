-- Who this database is: a random id made once, when the database is created, so a follower of
-- the change feed can tell a new database (an upstream started over) from the one its cursor
-- came from.
CREATE TABLE mirror_identity (id TEXT NOT NULL) STRICT;
INSERT INTO mirror_identity (id) VALUES (lower(hex(randomblob(16))));

-- A server that is another mcp-mirror is followed through its change feed: the upstream's
-- database id and the feed seq its snapshot reflects, moved in the transaction that applies
-- each delta. `deltas_applied` counts those deltas (walks count in `walks_ok`).
ALTER TABLE servers ADD COLUMN follow_instance TEXT;
ALTER TABLE servers ADD COLUMN follow_seq INTEGER;
ALTER TABLE servers ADD COLUMN deltas_applied INTEGER NOT NULL DEFAULT 0;
