-- Quinn schema, version 8: the conversation itself is searchable memory (issue 14, "conversation recall").
--
-- Every stored message of a user (inbound and our replies, quoted history already stripped) is cut into
-- overlapping passages, each with a vector of the embedding model and a full-text entry, searched per user like
-- memories (memory/passages.py). A passage belongs to its message: deleting the message deletes its passages
-- (trigger below), so no retention rule, purge or merge can leave a passage behind its message.
-- `audience` is everyone who saw the message (its sender and recipients): a passage reaches a prompt with other
-- people on the thread only when every one of them saw it, the rule the thread buffer follows. `in_reply_to`
-- ties a reply to the mail it answers: what memory retracted from a mail (a superseded, forgotten or expired
-- memory learnt from it) is not recalled from that mail or from the reply to it either.
CREATE TABLE IF NOT EXISTS passages (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    user_id         TEXT NOT NULL,
    message_row     INTEGER NOT NULL,           -- messages.id
    message_id      TEXT NOT NULL,              -- the message's Message-ID (the thread buffer is known by these)
    in_reply_to     TEXT,                       -- for our reply: the mail it answers
    direction       TEXT NOT NULL CHECK (direction IN ('in', 'out')),
    sent_at         TEXT NOT NULL,
    subject         TEXT NOT NULL DEFAULT '',
    position        INTEGER NOT NULL,           -- 0, 1, ... within the message
    content         TEXT NOT NULL,
    audience        TEXT NOT NULL DEFAULT '[]', -- JSON array of addresses: the message's sender and recipients
    embedding       F32_BLOB,
    embedding_model TEXT,
    created_at      TEXT NOT NULL,
    owner_key       TEXT GENERATED ALWAYS AS ('o' || lower(hex(user_id)) || 'z') VIRTUAL,
    UNIQUE (message_row, position)
);
CREATE INDEX IF NOT EXISTS passages_user ON passages (user_id, embedding_model);
CREATE INDEX IF NOT EXISTS passages_message ON passages (message_id);
CREATE INDEX IF NOT EXISTS passages_reply ON passages (in_reply_to);

-- What memory retracted (passages.retracted_messages) is read on every reply: the user's memories that are no
-- longer current, or may expire, found without reading every row of the user (each row holds its vector).
CREATE INDEX IF NOT EXISTS memories_retracted ON memories (user_id)
    WHERE active = 0 OR superseded_by IS NOT NULL OR valid_to IS NOT NULL OR expires_at IS NOT NULL;

-- The owner token as in memories_fts (migration 0006): a MATCH reads one user's postings only.
CREATE VIRTUAL TABLE IF NOT EXISTS passages_fts USING fts5 (
    content, owner_key, content = 'passages', content_rowid = 'id', tokenize = 'porter unicode61'
);
CREATE TRIGGER IF NOT EXISTS passages_ai AFTER INSERT ON passages BEGIN
    INSERT INTO passages_fts (rowid, content, owner_key) VALUES (new.id, new.content, new.owner_key);
END;
CREATE TRIGGER IF NOT EXISTS passages_ad AFTER DELETE ON passages BEGIN
    INSERT INTO passages_fts (passages_fts, rowid, content, owner_key)
        VALUES ('delete', old.id, old.content, old.owner_key);
END;

-- The change stamp of cached passage vectors (as memory_vector_stamp, migration 0003). Passages are never
-- updated in place: an insert appends to a cached matrix, a delete reloads it.
CREATE TABLE IF NOT EXISTS passage_vector_stamp (
    id      INTEGER PRIMARY KEY CHECK (id = 1),
    inserts INTEGER NOT NULL DEFAULT 0,
    changes INTEGER NOT NULL DEFAULT 0
);
INSERT OR IGNORE INTO passage_vector_stamp (id, inserts, changes) VALUES (1, 0, 0);
CREATE TRIGGER IF NOT EXISTS passages_stamp_ai AFTER INSERT ON passages BEGIN
    UPDATE passage_vector_stamp SET inserts = inserts + 1 WHERE id = 1;
END;
CREATE TRIGGER IF NOT EXISTS passages_stamp_ad AFTER DELETE ON passages BEGIN
    UPDATE passage_vector_stamp SET changes = changes + 1 WHERE id = 1;
END;

-- A passage never outlives its message.
CREATE TRIGGER IF NOT EXISTS messages_passages_ad AFTER DELETE ON messages BEGIN
    DELETE FROM passages WHERE message_row = old.id;
END;
