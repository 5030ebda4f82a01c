-- Quinn schema, version 14: learning leaves the reply path through a durable queue (issue 16).
--
-- A mail answered for a user is put here (its raw bytes, as fetched) before its ledger row turns final; the
-- mail's own task learns from it right after, and deletes the row. A crash in between loses no learning: each
-- folder pass first learns from what is still queued. `state` = 'learning' once a try began: a row found so after
-- a crash is learnt again only if no memory carries the mail as its source, so learning is never applied twice.
-- Owned by quinn/agent/learning.py (purge included); rows live seconds.
CREATE TABLE IF NOT EXISTS learning_queue (
    message_id    TEXT PRIMARY KEY,
    user_id       TEXT NOT NULL,
    raw           BLOB NOT NULL,
    internal_date TEXT,
    state         TEXT NOT NULL DEFAULT 'waiting',   -- waiting | learning
    attempts      INTEGER NOT NULL DEFAULT 0,
    created_at    TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS learning_queue_user ON learning_queue (user_id);
