-- Quinn schema, version 13: the files people attach (issue 18, "documents and knowledge").
--
-- documents: each file once per owner, by the sha256 of its bytes, the bytes themselves in `document_parts`. In
-- the database rather than a directory under the state dir: with a remote libSQL server (sqld) the daemon's host may
-- keep no state of its own, and one store means one backup, one transaction tying a file to its message and its
-- passages, and one purge (rows deleted, full-text indexes merged, a local file vacuumed) that leaves no byte of
-- it. Per owner, not shared across users: the same file mailed by two people is stored twice, so one person's
-- purge never depends on, or reveals, another's copy. The per-file size limit ([documents] max_file_kb) bounds a
-- row. `error`: why the file could not be read (kept, so a later reader may try again).
CREATE TABLE IF NOT EXISTS documents (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    user_id      TEXT NOT NULL,
    sha256       TEXT NOT NULL,
    kind         TEXT NOT NULL,             -- what the bytes are: pdf, docx, csv, ... (documents/extract.py)
    size         INTEGER NOT NULL,
    error        TEXT,
    created_at   TEXT NOT NULL,
    UNIQUE (user_id, sha256)
);

-- Which message (and so which session) carried which file, under the name and type the sender gave it there.
CREATE TABLE IF NOT EXISTS message_documents (
    message_row  INTEGER NOT NULL,          -- messages.id
    position     INTEGER NOT NULL,          -- 1, 2, ... in the mail's order
    document_id  INTEGER NOT NULL,          -- documents.id
    user_id      TEXT NOT NULL,
    session_id   TEXT,
    name         TEXT NOT NULL,             -- documents/extract.display_name: safe to show and cite
    content_type TEXT NOT NULL,             -- as declared by the sender
    PRIMARY KEY (message_row, position)
);
CREATE INDEX IF NOT EXISTS message_documents_document ON message_documents (document_id);

-- The file's bytes in parts of 1 MiB (documents/library.py PART_BYTES): a libSQL server refuses a single
-- argument of about 5 MB ("string or blob too big", measured on sqld), well within the per-file limit.
CREATE TABLE IF NOT EXISTS document_parts (
    document_id  INTEGER NOT NULL,          -- documents.id
    part         INTEGER NOT NULL,          -- 0, 1, ...
    user_id      TEXT NOT NULL,
    bytes        BLOB NOT NULL,
    PRIMARY KEY (document_id, part)
);
CREATE TRIGGER IF NOT EXISTS documents_parts_ad AFTER DELETE ON documents BEGIN
    DELETE FROM document_parts WHERE document_id = old.id;
END;
CREATE INDEX IF NOT EXISTS documents_user ON documents (user_id);

-- A document's passages live with the conversation's (memory/passages.py): the same hybrid search, owner token,
-- audience rule and purge. `document` is the cited name ([doc:NAME p.3]) and `ref` the page, sheet or heading.
ALTER TABLE passages ADD COLUMN document_id INTEGER;
ALTER TABLE passages ADD COLUMN document TEXT;
ALTER TABLE passages ADD COLUMN ref TEXT;

-- A file never outlives the last message that carried it.
CREATE TRIGGER IF NOT EXISTS messages_documents_ad AFTER DELETE ON messages BEGIN
    DELETE FROM message_documents WHERE message_row = old.id;
END;
CREATE TRIGGER IF NOT EXISTS message_documents_ad AFTER DELETE ON message_documents BEGIN
    DELETE FROM documents WHERE id = old.document_id
        AND NOT EXISTS (SELECT 1 FROM message_documents WHERE document_id = old.document_id);
END;
