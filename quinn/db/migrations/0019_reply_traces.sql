-- Quinn schema, version 19: why Quinn said that (issue 20, the console's "Why did Quinn say that?" page).
--
-- One row per model reply, written when the reply is composed: which mail it answers (`message_id`, the inbound
-- Message-ID, the key the ledger, the outbox and `llm_usage` already use), whose it is, the template version,
-- and `trace`, JSON of what reached the prompt: memories and passages by id with their scores, the mail's
-- attached files by kind and size, the tool calls by name with the memory ids they touched. No text of the
-- person's: the page reads memories and passages by id (a memory forgotten since shows as such, a purged one
-- is gone), tokens come from `llm_usage` by the same message id. A mail answered again after a crash replaces
-- its row: the last answer is the one sent. `retrieved` counts what search brought into the prompt (memories
-- found by search, passages), for the retrieval hit rate. After the reply the mail is learnt from: `gate` says what became of
-- it ('' not yet, passed, rejected: the sensory gate found nothing to learn, opted out, commands only) and
-- `learnt` how many memories its extraction created or changed (the console's memory-health figures). A purge
-- deletes the person's rows.
-- Owned by quinn/agent/reply_trace.py.
CREATE TABLE IF NOT EXISTS reply_traces (
    id             INTEGER PRIMARY KEY AUTOINCREMENT,
    at             TEXT NOT NULL,
    user_id        TEXT NOT NULL,
    message_id     TEXT NOT NULL UNIQUE,
    template       TEXT NOT NULL,
    prompt_version TEXT NOT NULL DEFAULT '',
    trace          TEXT NOT NULL DEFAULT '{}',
    retrieved      INTEGER NOT NULL DEFAULT 0,
    gate           TEXT NOT NULL DEFAULT '',
    learnt         INTEGER
);
CREATE INDEX IF NOT EXISTS reply_traces_at ON reply_traces (at);
CREATE INDEX IF NOT EXISTS reply_traces_user ON reply_traces (user_id, id);
-- The page reads a reply's tokens by message id (llm_usage had an index by user only).
CREATE INDEX IF NOT EXISTS llm_usage_message ON llm_usage (message_id);
-- Core stability counts the profile's ends (superseded, forgotten, archived) within a window.
CREATE INDEX IF NOT EXISTS memory_versions_change ON memory_versions (change, changed_at);
-- No index of current memories here: one on memories (user_id, active, superseded_by, valid_to), partial or
-- not, made sqld answer SQLITE_INTERRUPT to reads of tests/memory/test_memory_isolation.py (a libSQL file was
-- fine); the People and health pages are within their goal without it (bench/README.md, Console speed).
