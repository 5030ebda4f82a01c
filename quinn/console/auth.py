"""Who may use the console: password hashes or tokens, sessions with CSRF tokens, and the login rate limit. Pure:
no I/O.

Password hashes are scrypt (RFC 7914) from the standard library, written as ``scrypt$N$r$p$salt$hash`` (salt and
hash in URL-safe base64), so an operator makes one with ``quinn console hash-password`` and puts it in an
environment variable or a systemd credential; the password itself is never stored anywhere. An admin may have a
login token instead (``token_env``: a long random string, typed as the password), for one who keeps it in a
password manager rather than choosing a password; it is compared in constant time under the same rate limit.

A session is an opaque random id (256 bits) kept in this process's memory, not a signed cookie: a logout or an
expiry really ends it, and there is no signing key to configure, leak or rotate. The price: sessions end when the
console restarts, and one console process serves them (it is one process).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from quinn.config import ConsoleConfig
from quinn.errors import ConfigError

# scrypt cost: N=2**15, r=8 takes ~32 MiB and ~0.1 s on one core here; enough for a handful of admins.
SCRYPT_N, SCRYPT_R, SCRYPT_P = 2**15, 8, 1
SCRYPT_MAXMEM = 64 * 1024 * 1024
HASH_PREFIX = "scrypt"
MAX_ANONYMOUS = 1000  # sessions of login pages not (yet) logged in; past this the oldest goes
MAX_LIMITED_KEYS = 10_000  # names and addresses with failed logins kept before the stale ones are dropped
MIN_TOKEN_CHARS = 32  # token_urlsafe(32) gives 43: 256 bits, beyond guessing within any login rate limit
NAME_DELAY_S = 2.0  # a name past its failures: one attempt per this many seconds, doubling per `attempts` more
NAME_DELAY_MAX_S = 30.0  # ... up to this
NAME_WAIT_MAX_S = 120.0  # a slowed name's queue: an attempt that would wait longer is refused
MAKE_TOKEN = '`python -c "import secrets; print(secrets.token_urlsafe(32))"`'


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode("ascii").rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def hash_password(password: str, *, n: int = SCRYPT_N, r: int = SCRYPT_R, p: int = SCRYPT_P) -> str:
    """A new salted scrypt hash of ``password`` in the ``scrypt$N$r$p$salt$hash`` form the config expects."""
    if not password:
        raise ConfigError("the password is empty", "type a password")
    salt = secrets.token_bytes(16)
    digest = hashlib.scrypt(password.encode("utf-8"), salt=salt, n=n, r=r, p=p, maxmem=SCRYPT_MAXMEM, dklen=32)
    return f"{HASH_PREFIX}${n}${r}${p}${_b64(salt)}${_b64(digest)}"


@dataclass(frozen=True)
class PasswordHash:
    """A parsed ``scrypt$N$r$p$salt$hash``."""

    n: int
    r: int
    p: int
    salt: bytes
    digest: bytes

    @classmethod
    def parse(cls, text: str, *, owner: str) -> PasswordHash:
        """Parse a stored hash; ``owner`` names whose it is in the error (never the value itself)."""
        parts = text.strip().split("$")
        hint = "make one with `quinn console hash-password` and put the whole line in the variable"
        if len(parts) != 6 or parts[0] != HASH_PREFIX:
            raise ConfigError(f"{owner} is not a password hash of the form scrypt$N$r$p$salt$hash", hint)
        try:
            n, r, p = int(parts[1]), int(parts[2]), int(parts[3])
            salt, digest = _unb64(parts[4]), _unb64(parts[5])
        except ValueError:
            raise ConfigError(f"{owner} is a damaged password hash (a number or base64 part does not parse)",
                              hint) from None  # fmt: skip
        if n < 2**14 or n & (n - 1) or not 1 <= r <= 32 or not 1 <= p <= 16 or len(salt) < 16 or len(digest) < 32:
            raise ConfigError(f"{owner} is a password hash with parameters too weak or out of range", hint)
        return cls(n, r, p, salt, digest)

    def matches(self, password: str) -> bool:
        """True when ``password`` hashes to this digest (compared in constant time)."""
        candidate = hashlib.scrypt(password.encode("utf-8"), salt=self.salt, n=self.n, r=self.r, p=self.p,
                                   maxmem=SCRYPT_MAXMEM, dklen=len(self.digest))  # fmt: skip
        return hmac.compare_digest(candidate, self.digest)


# A hash to check unknown names against, so a wrong name costs as long as a wrong password (no name probing).
DECOY = PasswordHash(SCRYPT_N, SCRYPT_R, SCRYPT_P, b"\0" * 16, b"\0" * 32)


@dataclass(frozen=True, repr=False)
class Token:
    """A login token (``token_env``), typed on the login form in place of a password."""

    value: str

    @classmethod
    def parse(cls, text: str, *, owner: str) -> Token:
        """Check a configured token; ``owner`` names whose it is in the error (never the value itself)."""
        if len(text) < MIN_TOKEN_CHARS:
            raise ConfigError(f"{owner} holds a token of {len(text)} characters, fewer than {MIN_TOKEN_CHARS}",
                              f"make one with {MAKE_TOKEN} and put it in the variable")  # fmt: skip
        return cls(text)

    def matches(self, password: str) -> bool:
        """True when ``password`` is the token (compared in constant time)."""
        # The decoy's scrypt first: a token admin's name then answers as slowly as any other name (no probing
        # which names hold tokens). SHA-256 of both sides: the compare takes no time that depends on the length.
        DECOY.matches(password)
        typed, token = hashlib.sha256(password.encode("utf-8")), hashlib.sha256(self.value.encode("utf-8"))
        return hmac.compare_digest(typed.digest(), token.digest())

    def __repr__(self) -> str:
        return "Token(***)"


@dataclass(frozen=True)
class Admin:
    """Someone who may log in, with a password hash or a token."""

    name: str
    role: str
    credential: PasswordHash | Token

    @property
    def may_change(self) -> bool:
        """Whether this admin may edit and forget (the read-only role may only look)."""
        return self.role == "admin"


def admins_from(config: ConsoleConfig) -> dict[str, Admin]:
    """The configured admins with their parsed hashes or checked tokens; a missing, malformed or short one is a
    ``ConfigError``."""
    found = {}
    for i, entry in enumerate(config.admins):
        credential: PasswordHash | Token
        if entry.token_env is not None:
            where = f"console.admins[{i}].token_env ({entry.token_env}, admin {entry.name})"
            text = entry.secret("token")
            if not text:
                raise ConfigError(f"{where} is not set", f"export {entry.token_env}=... ({MAKE_TOKEN} makes one)")
            credential = Token.parse(text, owner=where)
        else:
            where = f"console.admins[{i}].password_hash_env ({entry.password_hash_env}, admin {entry.name})"
            text = entry.secret("password_hash")
            if not text:
                raise ConfigError(f"{where} is not set", f"export {entry.password_hash_env}=... (quinn console "
                                  "hash-password makes the value)")  # fmt: skip
            credential = PasswordHash.parse(text, owner=where)
        found[entry.name] = Admin(entry.name, entry.role, credential)
    return found


@dataclass
class Session:
    """One browser's session: anonymous (login page) until ``admin`` is set."""

    id: str
    csrf: str
    expires_at: float
    admin: str | None = None


@dataclass
class Sessions:
    """Sessions of this console process, by id; ``clock`` is seconds (time.monotonic by default)."""

    lifetime_s: float
    clock: Callable[[], float] = time.monotonic
    _by_id: OrderedDict[str, Session] = field(default_factory=OrderedDict)

    def new(self, admin: str | None = None) -> Session:
        """A fresh session with its own id and CSRF token."""
        if admin is None and sum(1 for s in self._by_id.values() if s.admin is None) >= MAX_ANONYMOUS:
            # Every view of the login page makes one: the oldest anonymous one goes, never an admin's session.
            oldest = next(sid for sid, s in self._by_id.items() if s.admin is None)
            del self._by_id[oldest]
        session = Session(secrets.token_urlsafe(32), secrets.token_urlsafe(32), self.clock() + self.lifetime_s, admin)
        self._by_id[session.id] = session
        return session

    def get(self, session_id: str | None) -> Session | None:
        """The live session of that id, or None (unknown or expired)."""
        session = self._by_id.get(session_id or "")
        if session is not None and session.expires_at <= self.clock():
            del self._by_id[session.id]
            return None
        return session

    def end(self, session_id: str) -> None:
        """Forget a session (logout; a login replaces the anonymous one, so its id cannot be fixed beforehand)."""
        self._by_id.pop(session_id, None)

    def end_for(self, names: Iterable[str]) -> None:
        """End every session of these admins."""
        gone = set(names)
        for sid in [sid for sid, s in self._by_id.items() if s.admin in gone]:
            del self._by_id[sid]


def csrf_ok(session: Session | None, form: Mapping[str, str]) -> bool:
    """Whether the form carries the session's CSRF token (constant-time compare)."""
    sent = form.get("csrf", "")
    return session is not None and bool(sent) and hmac.compare_digest(sent.encode(), session.csrf.encode())


@dataclass
class Attempt:
    """A login attempt let through ``LoginLimiter.take``: its slot under each key, and how long it must wait
    before its password is checked (its name had too many failures: a delay, not a lock)."""

    address: str
    name: str
    delay_s: float


@dataclass
class LoginLimiter:
    """Failed logins per client address and per login name within a sliding window.

    Counted before the password is hashed, not after: ``take`` reserves a slot under each key (under a lock, so
    40 attempts at once cannot all pass the check before one failure is recorded), ``done`` turns it into a
    failure or frees it. An address with ``attempts`` failures (and attempts in flight) is refused until its
    oldest failure leaves the window: it can check at most ``attempts`` passwords per window. A name is never
    locked, since anyone may type it: past ``attempts`` failures (and attempts in flight), each attempt for it
    gets a time slot of its own, ``NAME_DELAY_S`` after the one before (doubling with every ``attempts`` failures
    more, up to ``NAME_DELAY_MAX_S``), and waits for it before its password is checked. So a stranger's failures
    slow the admin down by seconds, never lock them out, and guessing one name from many addresses goes no faster
    than one password per slot. Only a queue longer than ``NAME_WAIT_MAX_S`` is refused.
    """

    attempts: int
    window_s: float
    clock: Callable[[], float] = time.monotonic
    _failures: dict[str, deque[float]] = field(default_factory=dict)
    _in_flight: dict[str, int] = field(default_factory=dict)
    _next_slot: dict[str, float] = field(default_factory=dict)  # a slowed name's last slot given out
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def take(self, address: str, name: str) -> Attempt | float:
        """A slot for one attempt from ``address`` as ``name``, or the seconds to wait before trying again."""
        with self._lock:
            now = self.clock()
            address_failures = self._recent(address, now)
            if len(address_failures) + self._in_flight.get(address, 0) >= self.attempts:
                # Refused, the password unread. Slots in flight may still end well: then a second suffices.
                return address_failures[0] + self.window_s - now if len(address_failures) >= self.attempts else 1.0
            name_failures = len(self._recent(name, now))
            delay_s = 0.0
            if name_failures + self._in_flight.get(name, 0) >= self.attempts:
                doublings = max(0, name_failures - self.attempts) // self.attempts
                gap_s = min(NAME_DELAY_MAX_S, NAME_DELAY_S * 2**doublings)
                slot = max(now, self._next_slot.get(name, now)) + gap_s
                if slot - now > NAME_WAIT_MAX_S:
                    return slot - now
                self._next_slot[name] = slot
                delay_s = slot - now
            for key in (address, name):
                self._in_flight[key] = self._in_flight.get(key, 0) + 1
            return Attempt(address, name, delay_s)

    def done(self, attempt: Attempt, *, failed: bool) -> None:
        """Free ``attempt``'s slots; ``failed``: its password was checked and wrong (counted under both keys)."""
        with self._lock:
            now = self.clock()
            if failed and len(self._failures) >= MAX_LIMITED_KEYS:  # many keys: forget those whose window passed
                self._failures = {k: t for k, t in self._failures.items() if t and t[-1] > now - self.window_s}
                self._next_slot = {k: t for k, t in self._next_slot.items() if t > now}
            for key in (attempt.address, attempt.name):
                left = self._in_flight.get(key, 0) - 1
                if left > 0:
                    self._in_flight[key] = left
                else:
                    self._in_flight.pop(key, None)
                if failed:
                    self._failures.setdefault(key, deque()).append(now)

    def _recent(self, key: str, now: float) -> deque[float]:
        """``key``'s failures within the window (older ones dropped)."""
        times = self._failures.get(key, deque())
        while times and times[0] <= now - self.window_s:
            times.popleft()
        return times
