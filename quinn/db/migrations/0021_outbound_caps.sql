-- Quinn schema, version 21: what the outbound caps count (issue 30).
--
-- One row per domain a sent (or drafted) reply touched: the sender's domain and each domain it went to, once per
-- reply. `[policy] max_replies_per_domain_per_hour` counts them over the last hour; nothing older than a day is
-- kept. No address, no Message-ID: a count per domain names nobody. Owned by quinn/mailbox/ledger.py.
CREATE TABLE IF NOT EXISTS outbound_domains (
    domain  TEXT NOT NULL,
    sent_at TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS outbound_domains_domain_sent ON outbound_domains (domain, sent_at);
-- The global caps count replies in mail_state by replied_at (all of them, and those to unverified senders).
CREATE INDEX IF NOT EXISTS mail_state_replied ON mail_state (replied_at);
