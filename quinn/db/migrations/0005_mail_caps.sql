-- Quinn schema, version 5: what the mailbox's rate caps count.

-- thread_key: the root Message-ID of the mail's thread (first References id, else In-Reply-To, else its own id),
-- known for every mail, also those handled without memory; the per-thread rate cap counts replies by it.
ALTER TABLE mail_state ADD COLUMN thread_key TEXT;
-- replied_at: when the reply was sent or drafted (updated_at moves again when the mail is filed away).
ALTER TABLE mail_state ADD COLUMN replied_at TEXT;
UPDATE mail_state SET replied_at = updated_at WHERE state IN ('replied', 'drafted');
CREATE INDEX IF NOT EXISTS mail_state_user_replied ON mail_state (user_id, replied_at);
CREATE INDEX IF NOT EXISTS mail_state_thread_replied ON mail_state (thread_key, replied_at);
