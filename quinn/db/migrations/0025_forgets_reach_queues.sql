-- Quinn schema, version 25 (issue 32/35): a forget reaches what still waits in a queue.
--
-- learning_queue.forgets: a mail whose learning failed for a reason that passes (a small model timed out) waits
-- on the queue, and with several mails in flight one may be mid-extraction. A "forget that ..." asked meanwhile
-- found no memory yet, and the retry stored the fact after the person was told it was forgotten. `forgets` (a
-- JSON list of {"request", "names", "words"}: quinn/agent/forgetting.py) is what the person asked to forget
-- since the row was queued; learning takes it out of the mail's text before extraction and out of what
-- extraction stored after. The row, and with it the list, goes once the mail is learnt. Owned by
-- quinn/agent/learning.py.
ALTER TABLE learning_queue ADD COLUMN forgets TEXT NOT NULL DEFAULT '[]';

-- outbox.blank_when_sent: the raw copy of a delivered reply is kept until [retention] outbox_days. The reply to a
-- forget lists what was forgotten, so its copy is blanked (as retention blanks it) once it is sent; a forget also
-- blanks the sent copies that mention the fact at once. Owned by quinn/mailbox/outbox.py.
ALTER TABLE outbox ADD COLUMN blank_when_sent INTEGER NOT NULL DEFAULT 0;
