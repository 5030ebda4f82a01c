"""A throwaway mail system on 127.0.0.1: a private Dovecot and an SMTP server that delivers into it, stamping
Authentication-Results as a receiving MX does. The tests' lab (tests/lab) and ``quinn demo`` run it; the SMTP
server needs aiosmtpd (the ``demo`` extra)."""
