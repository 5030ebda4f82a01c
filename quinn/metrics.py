"""Prometheus metrics: what the daemon did in this process, and what the database holds, on one endpoint.

Two kinds of figures. Timings and errors happen in this process, so they are counted as they happen (stage
latency histogram, LLM errors by model, mails finished by state). Totals that must survive a restart (mails per
ledger state, replies per outbox state, LLM tokens by model, memories, job runs) are read from the database at
scrape time by a collector, so they are never wrong after a crash and cost nothing between scrapes.

Each ``Metrics`` has its own registry (no process-wide state). The endpoint is off unless ``[metrics] enabled``,
and binds to 127.0.0.1 by default: the figures name no user, but they are nobody else's business.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, NamedTuple

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from quinn.db import Database
from quinn.errors import ConfigError
from quinn.mailbox import MailLedger, Outbox
from quinn.memory import current_by_scope
from quinn.users import count_users

log = logging.getLogger(__name__)

# Stages of one mail run from milliseconds (parse) to minutes (a slow model): buckets in seconds.
STAGE_BUCKETS_S = (0.005, 0.025, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)


class StageSample(NamedTuple):
    """One timed stage: its name, when it began (Unix time) and how long it took."""

    stage: str
    started_at_s: float
    duration_s: float


class Metrics:
    """The daemon's metrics; ``serve`` exposes them over HTTP."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.stage_seconds = Histogram(
            "quinn_stage_seconds",
            "Time spent per stage of handling one mail.",
            ["stage"],
            buckets=STAGE_BUCKETS_S,
            registry=r,
        )
        self.finished = Counter(
            "quinn_mails_finished", "Mails that reached a final state in this process.", ["state"], registry=r
        )
        self.llm_errors = Counter(
            "quinn_llm_errors", "Failed model calls, by model and error.", ["model", "error"], registry=r
        )
        self.reloads = Counter("quinn_reloads", "Configuration reloads (SIGHUP), by outcome.", ["outcome"], registry=r)
        self.started = Gauge("quinn_start_time_seconds", "When this daemon started (Unix time).", registry=r)
        self.started.set(time.time())
        self._server: Any = None
        self._thread: threading.Thread | None = None
        self._db_collector: DatabaseCollector | None = None
        self.samples: list[StageSample] | None = None  # raw timings, only when keep_samples() asked for them

    def keep_samples(self) -> None:
        """Also keep every stage timing as a ``StageSample`` in ``samples`` (bench/pipeline.py: exact percentiles
        of sub-millisecond stages, which the histogram's buckets cannot give). In-process only, never exported;
        a benchmark's daemon turns it on, ``quinn run`` does not (the list would grow without bound)."""
        if self.samples is None:
            self.samples = []

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        """Time one stage (``with metrics.stage("fetch"): ...``), also when it fails."""
        start = time.perf_counter()
        try:
            yield
        finally:
            duration_s = time.perf_counter() - start
            self.stage_seconds.labels(name).observe(duration_s)
            if self.samples is not None:
                self.samples.append(StageSample(name, time.time() - duration_s, duration_s))

    @contextmanager
    def llm_call(self, model: str, stage: str) -> Iterator[None]:
        """Time a model call as ``stage`` and count its failure by model and error class."""
        with self.stage(stage):
            try:
                yield
            except Exception as exc:
                self.llm_errors.labels(model, exc.__class__.__name__).inc()
                raise

    def mail_finished(self, state: str) -> None:
        """One mail reached a final state."""
        self.finished.labels(state).inc()

    def finished_counts(self) -> dict[str, int]:
        """Mails finished in this process, per state (for the systemd STATUS line)."""
        counts: dict[str, int] = {}
        for metric in self.finished.collect():
            for sample in metric.samples:
                if sample.name.endswith("_total"):
                    counts[sample.labels["state"]] = int(sample.value)
        return counts

    def watch_database(self, db: Database) -> None:
        """Read the database's totals at every scrape."""
        if self._db_collector is None:
            self._db_collector = DatabaseCollector(db)
            self.registry.register(self._db_collector)
        else:
            self._db_collector.db = db

    def render(self) -> bytes:
        """The exposition text, as a scrape would get it."""
        return generate_latest(self.registry)

    def serve(self, host: str, port: int) -> int:
        """Start the HTTP endpoint on a daemon thread; returns the port (useful with port 0)."""
        try:
            self._server, self._thread = start_http_server(port, addr=host, registry=self.registry)
        except OSError as exc:
            raise ConfigError(
                f"metrics endpoint {host}:{port}: {exc.strerror or exc}",
                "choose another [metrics] port, or set enabled = false",
            ) from None
        bound = int(self._server.server_port)
        log.info("metrics on http://%s:%d/metrics", host, bound)
        return bound

    def close(self) -> None:
        """Stop the endpoint; safe to call twice."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None


class DatabaseCollector(Collector):
    """Totals read from the database at scrape time (one short query per family, under the DB lock)."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def collect(self) -> Iterator[Metric]:
        up = GaugeMetricFamily("quinn_database_up", "1 when the last scrape could read the database.")
        try:
            families = list(self._families())
        except Exception as exc:  # a closed or unreachable database: say so instead of failing the scrape
            log.debug("metrics: database not readable: %s", exc)
            up.add_metric([], 0)
            yield up
            return
        up.add_metric([], 1)
        yield up
        yield from families

    def _families(self) -> Iterator[Metric]:
        q = self.db.query
        mails = GaugeMetricFamily("quinn_mails", "Mails in the ledger, by processing state.", labels=["state"])
        for state, n in MailLedger(self.db).counts().items():
            mails.add_metric([state], n)
        yield mails
        replies = GaugeMetricFamily("quinn_replies", "Replies in the outbox, by delivery state.", labels=["state"])
        for state, n in Outbox(self.db).counts().items():
            replies.add_metric([state], n)
        yield replies
        tokens = CounterMetricFamily(
            "quinn_llm_tokens", "Model tokens used, by model and direction.", labels=["model", "direction"]
        )
        calls = CounterMetricFamily(
            "quinn_llm_calls", "Model calls, by model and purpose.", labels=["model", "purpose"]
        )
        for model, purpose, n_in, n_out, n_calls in q(
            "SELECT model, purpose, sum(input_tokens), sum(output_tokens), sum(calls) FROM llm_usage GROUP BY 1, 2"
        ):
            tokens.add_metric([model, "input"], n_in or 0)
            tokens.add_metric([model, "output"], n_out or 0)
            calls.add_metric([model, purpose], n_calls or 0)
        yield _merge_counter(tokens)
        yield calls
        memories = GaugeMetricFamily("quinn_memories", "Current memories, by scope.", labels=["scope"])
        for scope, n in current_by_scope(self.db).items():
            memories.add_metric([scope], n)
        yield memories
        users = GaugeMetricFamily("quinn_users", "Users Quinn knows, as `quinn users list` counts them.")
        users.add_metric([], count_users(self.db))
        yield users
        jobs = CounterMetricFamily(
            "quinn_job_runs", "Background job runs, by job and outcome.", labels=["job", "status"]
        )
        for job, status, n in q("SELECT job, status, count(*) FROM job_runs GROUP BY 1, 2"):
            jobs.add_metric([job, status], n)
        yield jobs


def _merge_counter(family: CounterMetricFamily) -> CounterMetricFamily:
    """Sum samples that share labels (one model used for several purposes gives several rows)."""
    sums: dict[tuple[tuple[str, str], ...], float] = {}
    for sample in family.samples:
        key = tuple(sorted(sample.labels.items()))
        sums[key] = sums.get(key, 0.0) + sample.value
    merged = CounterMetricFamily(family.name, family.documentation, labels=["model", "direction"])
    for key, value in sums.items():
        labels = dict(key)
        merged.add_metric([labels["model"], labels["direction"]], value)
    return merged
