-- FTS5 merges an index's segments inside the transaction that wrote the last one (automerge,
-- 4 segments a level by default): a small swap now and then paid a merge of the first load's
-- segments before it committed, and a fleet of followers all paid it on the same change. The
-- writer now merges when it has been idle a moment (`full_text::merge_step`); a level that
-- still reaches FTS5's crisis size (16 segments) is merged inline as before.
INSERT INTO resources_fts (resources_fts, rank) VALUES ('automerge', 0);
INSERT INTO entries_fts (entries_fts, rank) VALUES ('automerge', 0);
