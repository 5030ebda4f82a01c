-- Quinn schema, version 7: trust by default (issue 13).

-- sender_key: the rate caps' bucket. The user for a trusted sender; "unverified:<address>" for mail nobody
-- vouched for, so forged mail never spends a real user's caps. Earlier rows were all counted by user.
ALTER TABLE mail_state ADD COLUMN sender_key TEXT;
UPDATE mail_state SET sender_key = user_id;
CREATE INDEX IF NOT EXISTS mail_state_sender_replied ON mail_state (sender_key, replied_at);

-- confirmations: the single-use codes that destructive and exporting memory commands are confirmed with. Only a
-- hash of the code is kept; the code itself goes only to the user's own address.
CREATE TABLE IF NOT EXISTS confirmations (
    token_hash TEXT PRIMARY KEY,
    user_id TEXT NOT NULL,
    action TEXT NOT NULL,             -- purge | export
    request_message_id TEXT NOT NULL, -- the mail that asked
    created_at TEXT NOT NULL,
    expires_at TEXT NOT NULL,
    used_at TEXT,
    used_by TEXT                      -- the Message-ID of the mail that confirmed
);
CREATE INDEX IF NOT EXISTS confirmations_user ON confirmations (user_id);
