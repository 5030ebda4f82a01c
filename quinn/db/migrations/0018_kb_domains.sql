-- Quinn schema, version 18: knowledge-base files scoped to mail domains (issue 18, `quinn kb add --domain`).
--
-- A knowledge-base file (a `documents` row of the owner "(knowledge base)") with rows here reaches only the users
-- whose address is at one of these domains (the part after the @ of the canonical address, exactly: a
-- subdomain is another domain); a file without rows reaches every user. Read by every passage search
-- (memory/passages.py `passage_filter`), written by documents/knowledge.py. A user's own files are never
-- scoped: they reach only their owner anyway.
CREATE TABLE IF NOT EXISTS document_domains (
    document_id  INTEGER NOT NULL,          -- documents.id
    domain       TEXT NOT NULL,             -- lower-case: "example.org"
    PRIMARY KEY (document_id, domain)
);
CREATE TRIGGER IF NOT EXISTS documents_domains_ad AFTER DELETE ON documents BEGIN
    DELETE FROM document_domains WHERE document_id = old.id;
END;
-- A scoped file's passages, found by the file: the searches of users outside its domains leave them out.
CREATE INDEX IF NOT EXISTS passages_document ON passages (document_id) WHERE document_id IS NOT NULL;
