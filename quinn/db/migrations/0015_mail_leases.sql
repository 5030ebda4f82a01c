-- Quinn schema, version 15: several daemons share one mailbox and one libSQL server (issue 16).
--
-- mail_state: the daemon handling a mail holds a lease on its row (who, until when). It is taken before the mail
-- is fetched and given back when the mail is finished, deferred or held; a daemon that was killed stops renewing
-- and its mails are taken over once `lease_until` has passed ([service] mail_lease_s). Owned by
-- quinn/mailbox/ledger.py (claim, release).
-- learning_queue: the same for a try at learning, so exactly one daemon learns from a mail (quinn/agent/learning.py).
ALTER TABLE mail_state ADD COLUMN lease_holder TEXT;
ALTER TABLE mail_state ADD COLUMN lease_until TEXT;
ALTER TABLE learning_queue ADD COLUMN holder TEXT;
ALTER TABLE learning_queue ADD COLUMN lease_until TEXT;
