-- Quinn schema, version 10: "stop remembering me" (issue 15).

-- memory_consent: users who asked Quinn to stop remembering them. Quinn keeps answering them and stores nothing
-- new until they write "you may remember me again" (the row goes). A purge keeps the row: the wish outlives the
-- data it was about. Owned by quinn/agent/consent.py.
CREATE TABLE IF NOT EXISTS memory_consent (
    user_id TEXT PRIMARY KEY,
    opted_out_at TEXT NOT NULL,
    message_id TEXT             -- the mail that asked
);
