"""Template trials (issue 30): untrusted template text rendered in a confined child, under the limits even inside
deploy/quinn.service's sandbox (its system call filter rebuilt by tests/lab/sandbox.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from quinn.agent.trials import TRIAL_LIMITS, TemplateTrials, TrialsBusy
from tests.lab.require import unavailable

# 5 GB of "x" (17 characters of the sample address times 300 million), and a loop of hours.
MEMORY = (
    '{% block system %}{{ "x" * (user.address | length * 300000000) }}{% endblock %}{% block user %}y{% endblock %}'
)
FINE = "{% block system %}Be brief.{% endblock %}{% block user %}{{ email.text }}{% endblock %}"
SLOW_WITH_BIG_DATA = (
    "{% block system %}{% for m in thread %}{% for c in email.text %}{% for d in email.text %}{% endfor %}"
    "{% endfor %}{% endfor %}x{% endblock %}{% block user %}y{% endblock %}"
)  # 4,000 steps on the sample's one short message; 50 x 10,000 x 10,000 with the heavy samples

PROBE = f"""
import resource, sys
from quinn.agent.trials import TemplateTrials

if __name__ == "__main__":
    print(TemplateTrials().problem("reply", {MEMORY!r}))
    print("child peak MB", resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024)
"""


@pytest.mark.lab  # child processes
def test_a_template_is_checked_in_a_child_with_big_data_too() -> None:
    trials = TemplateTrials()
    assert trials.problem("reply", FINE) is None
    slow = trials.problem("reply", SLOW_WITH_BIG_DATA)
    assert slow is not None and f"took longer than the {TRIAL_LIMITS.timeout_s:g} s limit" in slow
    memory = trials.problem("reply", MEMORY)
    assert memory is not None and "needed more than the 512 MB memory limit" in memory


def test_a_trial_beyond_the_slots_is_refused_at_once() -> None:
    trials = TemplateTrials(slots=1)
    trials._slot()  # one running
    with pytest.raises(TrialsBusy, match="running already"):
        trials.problem("reply", FINE)


@pytest.mark.lab  # the sandbox launcher and child processes
def test_the_memory_cap_holds_inside_the_units_sandbox(tmp_path: Path) -> None:
    from tests.lab.sandbox import sandbox_missing, sandboxed

    lacking = sandbox_missing()
    if lacking:
        unavailable(lacking)
    probe = tmp_path / "probe.py"
    probe.write_text(PROBE, encoding="utf-8")
    root = str(Path(__file__).resolve().parents[2])
    done = subprocess.run(sandboxed(sys.executable, str(probe)), capture_output=True, text=True, timeout=120,
                          env={"PYTHONPATH": root, "PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1"})  # fmt: skip
    if done.returncode == 97:
        pytest.skip("this kernel has no PR_SET_MDWE (Linux < 6.3)")
    assert done.returncode == 0, done.stderr[-2000:]
    answer, peak = done.stdout.splitlines()[-2:]
    assert "needed more than the 512 MB memory limit" in answer, done.stdout
    assert int(peak.split()[-1]) < 512  # the child never held the 5 GB
