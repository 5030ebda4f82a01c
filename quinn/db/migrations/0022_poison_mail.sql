-- Quinn schema, version 22: poison mail (issue 30).
--
-- mail_state.strikes: tries at reading a mail (fetch, parse in a child process, policy: every step before the
-- trust decision) that began and never ended, because the daemon was killed meanwhile (SIGKILL, the OOM killer,
-- systemd's watchdog) or the parse was killed at its deadline ([imap] parse_timeout_s). A try that ends, however
-- it ends, clears it. At MailLedger.POISON_STRIKES the mail is quarantined with its reason instead of being read
-- again: a mail that freezes or kills the daemon is never taken over forever. Owned by quinn/mailbox/ledger.py.
ALTER TABLE mail_state ADD COLUMN strikes INTEGER NOT NULL DEFAULT 0;
