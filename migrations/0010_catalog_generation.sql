-- The catalog's generation: one number moved in the very transaction of every commit that
-- changes what a list answer holds (a swap or delta of any kind, a first load's promotion, a
-- snapshot's scope, the configured servers and their priorities). An answer reads it in the
-- read transaction that reads its rows, so an HTTP validator (ETag) made from it names exactly
-- the state the answer came from.
CREATE TABLE catalog_generation (
    only INTEGER PRIMARY KEY CHECK (only = 1),
    generation INTEGER NOT NULL
) STRICT;
INSERT INTO catalog_generation (only, generation) VALUES (1, 0);
