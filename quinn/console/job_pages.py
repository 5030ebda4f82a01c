"""The console's Jobs and health page: each scheduled job's last runs and outcome, "run now" (admin role,
audited), and the memory-health figures (``scheduler/health.py``) with a small bar chart per figure.

The jobs' state is read as ``quinn jobs list`` reads it (``runner.job_statuses``, ``RunLog.runs``). "Run now" is
the runner's ``run_job(force=True)``, the path of ``quinn jobs run``: it takes the job's lease first, so a job a
daemon is running is not run twice. The run goes on in the background on the console's loop (a job may take
minutes with a model); the page shows it running by its lease and its outcome once it has finished. The charts
are inline SVG drawn here: no script, no image from elsewhere.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from quinn.agent import audit_log
from quinn.clock import utcnow
from quinn.console.app import SECURITY_HEADERS, Console, Endpoint, FormError, audit, form_of
from quinn.scheduler import JOBS, Figure, RunLog, job_statuses, memory_health

log = logging.getLogger(__name__)
RUNS_SHOWN = 5  # the last runs listed per job
CHART_W, CHART_H = 280, 56


@dataclass(frozen=True)
class Bar:
    """One day's bar of a chart: geometry in the SVG's units and its tooltip."""

    x: float
    y: float
    width: float
    height: float
    title: str


def bars(figure: Figure) -> list[Bar]:
    """The figure's days as bars, scaled to the chart (rates to 100%, a yield to its largest day). Pure."""
    values = [v for _day, v in figure.days if v is not None]
    top = 1.0 if figure.unit == "%" else max([*values, 1e-9])
    step = CHART_W / max(len(figure.days), 1)
    out = []
    for i, (day, value) in enumerate(figure.days):
        height = 0.0 if value is None else max(1.0, CHART_H * min(value / top, 1.0))
        shown = "no data" if value is None else (f"{value:.0%}" if figure.unit == "%" else f"{value:.2f}")
        out.append(Bar(round(i * step + 1, 1), round(CHART_H - height, 1), round(step - 2, 1), round(height, 1),
                       f"{day}: {shown}"))  # fmt: skip
    return out


def _jobs_page(console: Console) -> dict[str, Any]:
    """Everything the page shows (runs on the DB thread)."""
    db = console.store.db
    now = utcnow()
    statuses = job_statuses(db, console.job_settings, now)
    runs = RunLog(db)
    recent = {s.name: runs.runs(s.name, limit=RUNS_SHOWN) for s in statuses}
    figures = memory_health(db, now)
    return {"statuses": statuses, "recent": recent, "figures": [(f, bars(f)) for f in figures],
            "chart": {"w": CHART_W, "h": CHART_H}}  # fmt: skip


def jobs(console: Console) -> Endpoint:
    """GET /jobs: the jobs, their last runs, run now, and the memory-health figures."""

    async def show_jobs(request: Request) -> Response:
        values = await console.store.db.run(_jobs_page, console)
        started = request.query_params.get("started") or None
        running = sorted(name for name, task in console.job_tasks.items() if not task.done())
        return console.render(request, "jobs.html", started=started, running=running, can_run=console.run_job
                              is not None, **values)  # fmt: skip

    return show_jobs


def run_now(console: Console) -> Endpoint:
    """POST /jobs/{name}/run: run the job now in the background (admin role), audited."""

    async def start_job(request: Request) -> Response:
        name = request.path_params["name"]
        if name not in {spec.name for spec in JOBS}:
            raise FormError(f"there is no job {name!r}", f"jobs are {', '.join(spec.name for spec in JOBS)}")
        if console.run_job is None:
            raise FormError("this console cannot run jobs", "serve it with `quinn console` or `quinn run`")
        task = console.job_tasks.get(name)
        if task is not None and not task.done():
            raise FormError(f"job {name} is already running from this console", "wait for it to finish")
        admin = console.admin_of(request)
        db = console.store.db
        await db.run(audit_log.record, db, admin.name, "run job", f"job {name}",
                     detail=_why(form_of(request)) or "run now from the console")  # fmt: skip
        audit.info("console: %s runs job %s now", admin.name, name)
        console.job_tasks[name] = asyncio.create_task(_run(console, name), name=f"console-job-{name}")
        return RedirectResponse(f"/jobs?started={name}", status_code=303, headers=SECURITY_HEADERS)

    return start_job


async def _run(console: Console, name: str) -> None:
    """Run one job to its end and log the outcome (the page reads it from the run log)."""
    assert console.run_job is not None
    try:
        outcome = await console.run_job(name)
        log.info("console: job %s %s%s", name, outcome.status, f" ({outcome.reason})" if outcome.reason else "")
    except Exception:  # a bug or an unreachable model: logged; the run log has the run as failed if it began
        log.exception("console: job %s could not run", name)


def _why(form: dict[str, str]) -> str:
    return " ".join(form.get("reason", "").split())[:500]
