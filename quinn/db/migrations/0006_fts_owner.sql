-- Quinn schema, version 6: the full-text index knows whose memory each row is.
--
-- FTS5's index is one for all users: a MATCH scored every user's matching rows before the user filter (with 1,000
-- users, ~99.9% of the work was thrown away). The owner column holds one token per user, so a search matches
-- `owner_key : "<token>" AND {content tags} : (...)` and reads the user's postings only. The token is the user id
-- in hex between "o" and "z": one token under unicode61, unchanged by the porter stemmer (no suffix it strips ends
-- in "z"), "oz" for global memories. bm25() is called with weight 0 for this column.
ALTER TABLE memories ADD COLUMN owner_key TEXT
    GENERATED ALWAYS AS ('o' || lower(hex(coalesce(user_id, ''))) || 'z') VIRTUAL;

DROP TRIGGER IF EXISTS memories_ai;
DROP TRIGGER IF EXISTS memories_ad;
DROP TRIGGER IF EXISTS memories_au;
DROP TABLE IF EXISTS memories_fts;
CREATE VIRTUAL TABLE memories_fts USING fts5 (
    content, tags, owner_key, content = 'memories', content_rowid = 'id', tokenize = 'porter unicode61'
);
CREATE TRIGGER memories_ai AFTER INSERT ON memories BEGIN
    INSERT INTO memories_fts (rowid, content, tags, owner_key) VALUES (new.id, new.content, new.tags, new.owner_key);
END;
CREATE TRIGGER memories_ad AFTER DELETE ON memories BEGIN
    INSERT INTO memories_fts (memories_fts, rowid, content, tags, owner_key)
        VALUES ('delete', old.id, old.content, old.tags, old.owner_key);
END;
CREATE TRIGGER memories_au AFTER UPDATE OF content, tags, user_id ON memories BEGIN
    INSERT INTO memories_fts (memories_fts, rowid, content, tags, owner_key)
        VALUES ('delete', old.id, old.content, old.tags, old.owner_key);
    INSERT INTO memories_fts (rowid, content, tags, owner_key) VALUES (new.id, new.content, new.tags, new.owner_key);
END;
INSERT INTO memories_fts (memories_fts) VALUES ('rebuild');
