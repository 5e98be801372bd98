-- Tools and prompts are compared by content hash, as resources are (0003): a walk stages a
-- page at a time and an unchanged entry is staged as its name and hash only. 0 means "not
-- hashed yet" (rows from before this migration are compared by their text once).
ALTER TABLE entries ADD COLUMN hash INTEGER NOT NULL DEFAULT 0;
-- The entry was over `max_entry_bytes` and is stored without some of its fields.
ALTER TABLE entries ADD COLUMN oversized INTEGER NOT NULL DEFAULT 0;
