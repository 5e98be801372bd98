-- Resources the full-text index (`resources_fts`) does not hold yet, as ranges of ids, both
-- ends included. A swap that adds many rows lists them here instead of indexing them inside
-- its transaction; the writer indexes them in small batches between other work, and resumes
-- at start after a crash. A row in a range is not in the index: it is never 'delete'd from it,
-- and its batch indexes the text it has then.
CREATE TABLE full_text_backlog (
    first_id INTEGER PRIMARY KEY,
    last_id INTEGER NOT NULL
) STRICT;
