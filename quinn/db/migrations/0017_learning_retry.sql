-- Quinn schema, version 17: a try at learning that failed for a reason that passes is tried again (issue 21).
--
-- A model that writes no valid extraction twice, or that cannot be reached, used to cost the mail's memories:
-- the row left the queue as if learnt. Now it stays with `retry_at` (backoff, as for mail) and `last_error`, and
-- the user's later mails wait behind it, so facts are learnt in the order they were written (an old fact learnt
-- after its update would supersede it). After as many tries as a mail gets, the row is dropped with a warning.
-- Owned by quinn/agent/learning.py.
ALTER TABLE learning_queue ADD COLUMN retry_at TEXT;
ALTER TABLE learning_queue ADD COLUMN last_error TEXT;
