-- Quinn schema, version 24 (issue 31): a change stamp for the words of current memories, so a process can keep each
-- user's memories grouped by conversation in memory (quinn/memory/conversations.py), coherently.

-- One row, like memory_vector_stamp (migration 0003). Triggers bump `inserts` on every new memory (a cached index
-- appends the rows it lacks) and `changes` whenever a row's text, conversation, owner or currency moves, or a row
-- is deleted (a cached index is rebuilt). Retrieval counts (access_count, stability) move nothing here. The row
-- holds no user data.
CREATE TABLE IF NOT EXISTS memory_text_stamp (
    id      INTEGER PRIMARY KEY CHECK (id = 1),
    inserts INTEGER NOT NULL DEFAULT 0,
    changes INTEGER NOT NULL DEFAULT 0
);
INSERT OR IGNORE INTO memory_text_stamp (id, inserts, changes) VALUES (1, 0, 0);

CREATE TRIGGER IF NOT EXISTS memories_text_stamp_ai AFTER INSERT ON memories BEGIN
    UPDATE memory_text_stamp SET inserts = inserts + 1 WHERE id = 1;
END;
CREATE TRIGGER IF NOT EXISTS memories_text_stamp_au
AFTER UPDATE OF content, metadata, valid_from, valid_to, active, superseded_by, user_id ON memories BEGIN
    UPDATE memory_text_stamp SET changes = changes + 1 WHERE id = 1;
END;
CREATE TRIGGER IF NOT EXISTS memories_text_stamp_ad AFTER DELETE ON memories BEGIN
    UPDATE memory_text_stamp SET changes = changes + 1 WHERE id = 1;
END;
