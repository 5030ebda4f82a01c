"""Quinn's mailbox."""
