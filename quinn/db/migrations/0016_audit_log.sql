-- Quinn schema, version 16: an audit log of the changes admins make (issue 20, the console).
--
-- One row per change: who (the admin's name), what (the action), which object ("memory 12", "template reply",
-- a mail key), when, and a short detail (the admin's reason, a version). `user_id` is the person the change
-- concerns, when there is one: a purge of that person blanks the row's user_id and detail and keeps the rest
-- (that an admin changed something, and when, outlives the person's data; what it said does not).
-- Owned by quinn/agent/audit_log.py. Rows are only added, never changed (but by a purge).
CREATE TABLE IF NOT EXISTS audit_log (
    id      INTEGER PRIMARY KEY AUTOINCREMENT,
    at      TEXT NOT NULL,
    actor   TEXT NOT NULL,
    action  TEXT NOT NULL,
    object  TEXT NOT NULL DEFAULT '',
    user_id TEXT,
    detail  TEXT NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS audit_log_user ON audit_log (user_id);
