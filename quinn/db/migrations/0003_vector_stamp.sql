-- Quinn schema, version 3: a change stamp that lets a process keep users' vectors in memory, coherently.

-- One row. Triggers bump `inserts` on every new memory row (a cached matrix then fetches the rows it lacks) and
-- `changes` when a row's vector changes or a row is deleted (a cached matrix is then reloaded). They fire for
-- every writer, so a second process or a second daemon on the same remote database is seen too. The row
-- holds no user data, so a purge leaves nothing of the user here.
CREATE TABLE IF NOT EXISTS memory_vector_stamp (
    id      INTEGER PRIMARY KEY CHECK (id = 1),
    inserts INTEGER NOT NULL DEFAULT 0,
    changes INTEGER NOT NULL DEFAULT 0
);
INSERT OR IGNORE INTO memory_vector_stamp (id, inserts, changes) VALUES (1, 0, 0);

CREATE TRIGGER IF NOT EXISTS memories_stamp_ai AFTER INSERT ON memories BEGIN
    UPDATE memory_vector_stamp SET inserts = inserts + 1 WHERE id = 1;
END;
CREATE TRIGGER IF NOT EXISTS memories_stamp_au AFTER UPDATE OF embedding, embedding_model, user_id ON memories BEGIN
    UPDATE memory_vector_stamp SET changes = changes + 1 WHERE id = 1;
END;
CREATE TRIGGER IF NOT EXISTS memories_stamp_ad AFTER DELETE ON memories BEGIN
    UPDATE memory_vector_stamp SET changes = changes + 1 WHERE id = 1;
END;
