-- Quinn schema, version 11: template versions kept, and improvement proposals an admin decides on (issue 15).

-- prompt_versions: the text of every template version that wrote a reply, by its version ("reply@<sha256 12>"),
-- so a proposal can be diffed against it and a version's reward read beside its text.
CREATE TABLE IF NOT EXISTS prompt_versions (
    version       TEXT PRIMARY KEY,
    name          TEXT NOT NULL,
    source        TEXT NOT NULL,
    first_used_at TEXT NOT NULL
);

-- prompt_proposals: a rewritten template the improvement job drafted from conversation reviews. Never applied by
-- Quinn: an admin accepts (the file is written) or rejects it (`quinn prompts proposals`).
CREATE TABLE IF NOT EXISTS prompt_proposals (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    name         TEXT NOT NULL,
    base_version TEXT NOT NULL,
    source       TEXT NOT NULL,
    rationale    TEXT NOT NULL DEFAULT '',
    evidence     TEXT NOT NULL DEFAULT '{}',   -- JSON: conversations, mean reward, the suggestions it answers
    status       TEXT NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'accepted', 'rejected')),
    created_at   TEXT NOT NULL,
    decided_at   TEXT
);
CREATE INDEX IF NOT EXISTS prompt_proposals_base ON prompt_proposals (base_version);
