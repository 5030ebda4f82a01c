-- Quinn schema, version 1. Times are ISO 8601 UTC text ("2026-11-22T10:00:00+00:00"), so they sort as text.

-- Long-term memory: one row per version of a memory. The current version has valid_to NULL and
-- superseded_by NULL; an update writes a new row (version + 1) and closes the old one.
CREATE TABLE IF NOT EXISTS memories (
    id               INTEGER PRIMARY KEY AUTOINCREMENT,
    user_id          TEXT,                      -- NULL: global (persona, shared knowledge)
    scope            TEXT NOT NULL CHECK (scope IN ('profile', 'domain', 'episodic', 'global')),
    domain           TEXT,
    type             TEXT NOT NULL,
    content          TEXT NOT NULL,             -- a sentence, or JSON text
    tags             TEXT NOT NULL DEFAULT '[]',-- JSON array of strings
    metadata         TEXT NOT NULL DEFAULT '{}',-- JSON object: source, importance, confidence, relations, pii, ...
    importance       REAL NOT NULL DEFAULT 0.5,
    created_at       TEXT NOT NULL,
    updated_at       TEXT NOT NULL,
    version          INTEGER NOT NULL DEFAULT 1,
    root_id          INTEGER,                   -- id of version 1 of this memory (the memory's identity)
    valid_from       TEXT NOT NULL,
    valid_to         TEXT,
    superseded_by    INTEGER,
    expires_at       TEXT,
    active           INTEGER NOT NULL DEFAULT 1,-- 0: forgotten or archived (kept in history, out of retrieval)
    immutable        INTEGER NOT NULL DEFAULT 0,
    access_count     INTEGER NOT NULL DEFAULT 0,
    last_accessed_at TEXT,
    stability        REAL NOT NULL DEFAULT 24.0,-- hours; grows with each retrieval (decay)
    embedding        F32_BLOB,
    embedding_model  TEXT,
    schema_version   INTEGER NOT NULL DEFAULT 1
);
CREATE INDEX IF NOT EXISTS memories_user ON memories (user_id, active, embedding_model);
CREATE INDEX IF NOT EXISTS memories_root ON memories (root_id);

CREATE VIRTUAL TABLE IF NOT EXISTS memories_fts USING fts5 (
    content, tags, content = 'memories', content_rowid = 'id', tokenize = 'porter unicode61'
);
CREATE TRIGGER IF NOT EXISTS memories_ai AFTER INSERT ON memories BEGIN
    INSERT INTO memories_fts (rowid, content, tags) VALUES (new.id, new.content, new.tags);
END;
CREATE TRIGGER IF NOT EXISTS memories_ad AFTER DELETE ON memories BEGIN
    INSERT INTO memories_fts (memories_fts, rowid, content, tags) VALUES ('delete', old.id, old.content, old.tags);
END;
CREATE TRIGGER IF NOT EXISTS memories_au AFTER UPDATE OF content, tags ON memories BEGIN
    INSERT INTO memories_fts (memories_fts, rowid, content, tags) VALUES ('delete', old.id, old.content, old.tags);
    INSERT INTO memories_fts (rowid, content, tags) VALUES (new.id, new.content, new.tags);
END;

-- Every change to a memory, for history and audit.
CREATE TABLE IF NOT EXISTS memory_versions (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    memory_id  INTEGER NOT NULL,
    root_id    INTEGER NOT NULL,
    user_id    TEXT,
    version    INTEGER NOT NULL,
    change     TEXT NOT NULL,                   -- created | updated | superseded | forgotten | archived | restored
    content    TEXT NOT NULL,
    metadata   TEXT NOT NULL DEFAULT '{}',
    reason     TEXT,
    changed_at TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS memory_versions_root ON memory_versions (root_id);
CREATE INDEX IF NOT EXISTS memory_versions_user ON memory_versions (user_id);

-- Conversation store: sessions (threads) and their messages; messages are searchable episodic memory.
CREATE TABLE IF NOT EXISTS sessions (
    id              TEXT PRIMARY KEY,
    user_id         TEXT NOT NULL,
    subject         TEXT NOT NULL DEFAULT '',
    subject_key     TEXT NOT NULL DEFAULT '',   -- normalised subject for the guarded fallback
    created_at      TEXT NOT NULL,
    last_message_at TEXT NOT NULL,
    merged_into     TEXT,                       -- set when a later message linked two sessions
    status          TEXT NOT NULL DEFAULT 'open',
    summary         TEXT,
    summarized_upto INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS sessions_user ON sessions (user_id, subject_key, last_message_at);

CREATE TABLE IF NOT EXISTS session_ids (
    message_id TEXT PRIMARY KEY,                -- every Message-ID known to belong to a session, ours included
    session_id TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS session_ids_session ON session_ids (session_id);

CREATE TABLE IF NOT EXISTS messages (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    session_id  TEXT NOT NULL,
    user_id     TEXT NOT NULL,
    direction   TEXT NOT NULL CHECK (direction IN ('in', 'out')),
    message_id  TEXT NOT NULL,
    in_reply_to TEXT,
    subject     TEXT NOT NULL DEFAULT '',
    from_addr   TEXT NOT NULL DEFAULT '',
    to_addrs    TEXT NOT NULL DEFAULT '[]',
    sent_at     TEXT NOT NULL,
    body        TEXT NOT NULL DEFAULT '',       -- clean text: quotes and signature stripped
    full_text   TEXT NOT NULL DEFAULT '',
    created_at  TEXT NOT NULL,
    UNIQUE (message_id, direction)
);
CREATE INDEX IF NOT EXISTS messages_session ON messages (session_id, sent_at);
CREATE INDEX IF NOT EXISTS messages_user ON messages (user_id, sent_at);
CREATE VIRTUAL TABLE IF NOT EXISTS messages_fts USING fts5 (
    subject, body, content = 'messages', content_rowid = 'id', tokenize = 'porter unicode61'
);
CREATE TRIGGER IF NOT EXISTS messages_ai AFTER INSERT ON messages BEGIN
    INSERT INTO messages_fts (rowid, subject, body) VALUES (new.id, new.subject, new.body);
END;
CREATE TRIGGER IF NOT EXISTS messages_ad AFTER DELETE ON messages BEGIN
    INSERT INTO messages_fts (messages_fts, rowid, subject, body) VALUES ('delete', old.id, old.subject, old.body);
END;

-- Short-term state per user.
CREATE TABLE IF NOT EXISTS user_state (
    user_id                   TEXT PRIMARY KEY,
    user_info                 TEXT NOT NULL DEFAULT '',
    last_conversation_summary TEXT NOT NULL DEFAULT '',
    recent_goal_and_status    TEXT NOT NULL DEFAULT '',
    important_context         TEXT NOT NULL DEFAULT '',
    agent_beliefs             TEXT NOT NULL DEFAULT '',
    agent_info                TEXT NOT NULL DEFAULT '',
    updated_at                TEXT NOT NULL
);

-- Entity graph.
CREATE TABLE IF NOT EXISTS entities (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    user_id         TEXT,
    name            TEXT NOT NULL,
    kind            TEXT NOT NULL DEFAULT '',
    embedding       F32_BLOB,
    embedding_model TEXT,
    created_at      TEXT NOT NULL,
    UNIQUE (user_id, name)
);
CREATE TABLE IF NOT EXISTS relationships (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    user_id         TEXT,
    source_id       INTEGER NOT NULL,
    relation        TEXT NOT NULL,
    target_id       INTEGER NOT NULL,
    memory_id       INTEGER,
    embedding       F32_BLOB,
    embedding_model TEXT,
    created_at      TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS relationships_user ON relationships (user_id);

CREATE TABLE IF NOT EXISTS conversation_summaries (
    id                     INTEGER PRIMARY KEY AUTOINCREMENT,
    session_id             TEXT NOT NULL,
    user_id                TEXT NOT NULL,
    summary                TEXT NOT NULL,
    feedback_text          TEXT NOT NULL DEFAULT '',
    reward_score           REAL,
    improvement_suggestion TEXT NOT NULL DEFAULT '',
    prompt_version         TEXT NOT NULL DEFAULT '',
    created_at             TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS conversation_summaries_user ON conversation_summaries (user_id);

-- Mail processing state: one row per message seen, keyed by where it was seen.
CREATE TABLE IF NOT EXISTS mail_state (
    folder          TEXT NOT NULL,
    uidvalidity     INTEGER NOT NULL,
    uid             INTEGER NOT NULL,
    message_id      TEXT NOT NULL DEFAULT '',
    state           TEXT NOT NULL,              -- received | handling | replied | drafted | ignored | rejected
                                                -- | quarantined | deferred | failed
    reason          TEXT NOT NULL DEFAULT '',
    user_id         TEXT,
    session_id      TEXT,
    attempts        INTEGER NOT NULL DEFAULT 0,
    next_attempt_at TEXT,
    received_at     TEXT NOT NULL,
    updated_at      TEXT NOT NULL,
    moved           INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (folder, uidvalidity, uid)
);
CREATE INDEX IF NOT EXISTS mail_state_message ON mail_state (message_id);
CREATE INDEX IF NOT EXISTS mail_state_state ON mail_state (state);

-- Replies written before they are sent: exactly-once delivery across crashes.
CREATE TABLE IF NOT EXISTS outbox (
    message_id    TEXT PRIMARY KEY,             -- our deterministic Message-ID
    in_reply_to   TEXT NOT NULL,
    user_id       TEXT,
    session_id    TEXT,
    recipients    TEXT NOT NULL,                -- JSON array
    raw           BLOB NOT NULL,
    state         TEXT NOT NULL,                -- pending | sent | drafted | failed
    attempts      INTEGER NOT NULL DEFAULT 0,
    last_error    TEXT NOT NULL DEFAULT '',
    template      TEXT NOT NULL DEFAULT '',
    prompt_version TEXT NOT NULL DEFAULT '',
    created_at    TEXT NOT NULL,
    sent_at       TEXT
);
CREATE INDEX IF NOT EXISTS outbox_state ON outbox (state);

CREATE TABLE IF NOT EXISTS llm_usage (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    at            TEXT NOT NULL,
    model         TEXT NOT NULL,
    purpose       TEXT NOT NULL,                -- reply | extract | job:<name> | check
    user_id       TEXT,
    message_id    TEXT,
    input_tokens  INTEGER NOT NULL DEFAULT 0,
    output_tokens INTEGER NOT NULL DEFAULT 0,
    calls         INTEGER NOT NULL DEFAULT 1
);
CREATE INDEX IF NOT EXISTS llm_usage_user ON llm_usage (user_id);

CREATE TABLE IF NOT EXISTS job_runs (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    job         TEXT NOT NULL,
    started_at  TEXT NOT NULL,
    finished_at TEXT,
    status      TEXT NOT NULL,                  -- running | ok | failed
    counts      TEXT NOT NULL DEFAULT '{}',
    error       TEXT NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS job_runs_job ON job_runs (job, started_at);

CREATE TABLE IF NOT EXISTS leases (
    name       TEXT PRIMARY KEY,
    holder     TEXT NOT NULL,
    expires_at TEXT NOT NULL
);
