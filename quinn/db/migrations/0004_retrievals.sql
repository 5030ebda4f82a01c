-- Quinn schema, version 2: which session retrieved which memory, for the decay job's spacing effect.
-- A memory retrieved again in another session (spaced use) grows more stable than one retrieved many times
-- within one thread (issue 4, job 4). One row per (memory, session): the first retrieval there. No text is
-- kept here; rows of memories that no longer exist (purged) are dropped by the decay job.
CREATE TABLE IF NOT EXISTS memory_retrievals (
    memory_id  INTEGER NOT NULL,
    session_id TEXT NOT NULL,
    at         TEXT NOT NULL,
    counted    INTEGER NOT NULL DEFAULT 0,      -- 1 once the decay job has applied it to the memory's stability
    PRIMARY KEY (memory_id, session_id)
);
CREATE INDEX IF NOT EXISTS memory_retrievals_pending ON memory_retrievals (counted, memory_id);
