-- The cacheScope of each (server, kind) snapshot: the most private of the pages of the walk
-- that made it ('public' for a server that declares none). A (server, kind) without a row has
-- an unknown scope, which the HTTP face treats as private. While a swap is under way the row
-- holds the more private of the old and new scopes, so a crash can only leave it stricter.
-- Keyed by the server's name: a first load gives the server's row a new id.
CREATE TABLE scopes (
    server TEXT NOT NULL,
    kind TEXT NOT NULL CHECK (kind IN ('resource', 'template', 'tool', 'prompt')),
    scope TEXT NOT NULL CHECK (scope IN ('public', 'private')),
    PRIMARY KEY (server, kind)
) STRICT;

