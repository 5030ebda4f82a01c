-- Quinn schema, version 2: a stable identity for every memory row, and JSON content marked as such.

-- uid: a random 32-hex id that survives export and import, so importing the same file twice adds nothing and a
-- file's id links (root_id, superseded_by) can be remapped to the ids of the target database.
-- ALTER TABLE cannot add a column with a non-constant default: the store sets uid on every insert, and
-- existing rows get one here.
ALTER TABLE memories ADD COLUMN uid TEXT;
UPDATE memories SET uid = lower(hex(randomblob(16))) WHERE uid IS NULL;
CREATE UNIQUE INDEX IF NOT EXISTS memories_uid ON memories (uid);

-- content_format: 'json' when the caller stored a JSON object or array (content then holds its JSON text).
ALTER TABLE memories ADD COLUMN content_format TEXT NOT NULL DEFAULT 'text'
    CHECK (content_format IN ('text', 'json'));
