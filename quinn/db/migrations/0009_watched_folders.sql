-- Quinn schema, version 9: a safe first start (issue 19).

-- watched_folders: when Quinn first watched a folder, and from which UID on it answers. Mail below first_uid was
-- there before (the backlog) and is left alone unless the operator asks (imap.backlog = "answer", or
-- `quinn run --backlog`, which sets first_uid to 1). skipped: how many such mails were still in the folder at the
-- last look, so a UIDVALIDITY change (which voids every UID) knows whether a backlog was waiting.
CREATE TABLE IF NOT EXISTS watched_folders (
    folder TEXT PRIMARY KEY,
    uidvalidity INTEGER NOT NULL,
    first_uid INTEGER NOT NULL,
    watched_at TEXT NOT NULL,
    skipped INTEGER NOT NULL DEFAULT 0
);
