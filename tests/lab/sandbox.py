"""The sandbox of deploy/quinn.service, rebuilt without systemd, to run ``quinn`` under it in a test.

systemd is not PID 1 in the lab, so the unit cannot be started. What can be reproduced is what would break
Quinn: the syscall filter (``SystemCallFilter=@system-service`` minus ``@privileged @resources``, failing with
EPERM), ``MemoryDenyWriteExecute=yes`` (the kernel's ``PR_SET_MDWE``, Linux ≥ 6.3) and ``NoNewPrivileges=yes``.
The syscall groups come from ``systemd-analyze syscall-filter`` itself, so they are systemd's own lists. The
launcher runs under Debian's ``/usr/bin/python3`` with its ``python3-seccomp`` bindings, installs the filter,
then execs the test's Python (filters survive execve). Namespaces (ProtectSystem=, PrivateTmp=, ...) are not
reproduced: they need the service manager.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

SYSTEM_PYTHON = Path("/usr/bin/python3")
INSTALL_HINT = "apt-get install --no-install-recommends python3-seccomp systemd"

LAUNCHER = r"""
import ctypes, errno, os, subprocess, sys
import seccomp

def expand(group, seen):
    out = subprocess.run(["systemd-analyze", "syscall-filter", group], capture_output=True, text=True,
                         check=True).stdout
    names = set()
    for line in out.splitlines()[1:]:
        item = line.strip()
        if not item or item.startswith("#"):
            continue
        if item.startswith("@"):
            if item not in seen:
                seen.add(item)
                names |= expand(item, seen)
        else:
            names.add(item)
    return names

allowed = expand("@system-service", set()) - expand("@privileged", set()) - expand("@resources", set())
rules = seccomp.SyscallFilter(defaction=seccomp.ERRNO(errno.EPERM))  # SystemCallErrorNumber=EPERM
for name in sorted(allowed):
    try:
        rules.add_rule(seccomp.ALLOW, name)
    except Exception:
        pass  # a name that is no syscall on this architecture
if ctypes.CDLL(None, use_errno=True).prctl(65, 1, 0, 0, 0) != 0:  # PR_SET_MDWE, PR_MDWE_REFUSE_EXEC_GAIN
    sys.exit(97)
rules.load()  # sets no_new_privs first
python, *args = sys.argv[1:]
os.execv(python, [python, *args])
"""


def sandbox_missing() -> str | None:
    """Why the sandbox cannot be built here, or None when it can."""
    if shutil.which("systemd-analyze") is None or not SYSTEM_PYTHON.exists():
        return f"systemd-analyze or {SYSTEM_PYTHON} is missing: {INSTALL_HINT}"
    probe = subprocess.run([str(SYSTEM_PYTHON), "-c", "import seccomp"], capture_output=True, timeout=30)
    if probe.returncode != 0:
        return f"python3-seccomp is missing: {INSTALL_HINT}"
    return None


def sandboxed(python: str, *args: str) -> list[str]:
    """The command line that runs ``python *args`` inside the sandbox (exit 97: the kernel lacks PR_SET_MDWE)."""
    return [str(SYSTEM_PYTHON), "-c", LAUNCHER, python, *args]
