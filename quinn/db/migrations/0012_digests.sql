-- Quinn schema, version 12: the periodic digest (issue 15, "users control their memory").
--
-- digests: "here is what I learnt about you", one row per digest mail. The digest job writes the row (who, which
-- memories, in the order they are numbered in the mail); the daemon composes the mail from it, records its
-- Message-ID here, puts it in the outbox and sends it. A reply to that Message-ID can correct it by number ("forget 2",
-- "the third one is wrong"): item n is memory_ids[n - 1]. Owned by quinn/agent/digest.py; a purge deletes the
-- user's rows.
CREATE TABLE IF NOT EXISTS digests (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    message_id  TEXT UNIQUE,            -- the mail's Message-ID (outbox.message_id); NULL until composed
    user_id     TEXT NOT NULL,
    since       TEXT NOT NULL,          -- what it covers: memories learnt after this time
    created_at  TEXT NOT NULL,
    memory_ids  TEXT NOT NULL           -- JSON array of memory ids, in the mail's order
);
CREATE INDEX IF NOT EXISTS digests_user ON digests (user_id, created_at);
