-- Quinn schema, version 20: drafts awaiting review (issue 20, the console's Mail page).
--
-- In draft mode (`[smtp] reply_mode = "draft"`) a reply is APPENDed to the drafts folder and its outbox row is
-- `drafted`: it awaits review. An admin approves it (`approved`, its text perhaps edited first: `raw` replaced)
-- or discards it (`discarded`); the daemon sends an approved one over SMTP like any reply (`sending` → `sent`)
-- and then removes the draft from the drafts folder, as it does for a discarded one. Who decided and when is
-- kept here (the audit log keeps it too); `draft_removed_at` says the IMAP draft is gone (or was not found), so
-- a crash between the send and the removal is finished at the next pass. Owned by quinn/mailbox/outbox.py.
ALTER TABLE outbox ADD COLUMN reviewed_by TEXT;
ALTER TABLE outbox ADD COLUMN reviewed_at TEXT;
ALTER TABLE outbox ADD COLUMN draft_removed_at TEXT;
