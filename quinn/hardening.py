"""Living with the service's sandbox: W^X memory (``MemoryDenyWriteExecute=yes``, or ``PR_SET_MDWE``).

torch's oneDNN backend compiles CPU kernels at run time into memory that is writable and then executable, which
W^X forbids: the embedder fails with "could not create a primitive". torch's own kernels need no such memory and
give the same vectors (measured: max difference 2e-7 on all-MiniLM-L6-v2, similar speed on 2 cores), so when
the process cannot map W+X memory, oneDNN is switched off before the model is loaded. This concerns the
opt-in ``sentence-transformers`` backend only: the default one (numpy's precompiled BLAS) needs no W+X memory.
"""

from __future__ import annotations

import errno
import logging
import mmap

log = logging.getLogger(__name__)


def write_execute_denied() -> bool:
    """True when this process may not map memory both writable and executable."""
    try:
        probe = mmap.mmap(-1, mmap.PAGESIZE, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
    except OSError as exc:
        # systemd's seccomp filter answers EPERM; the kernel's PR_SET_MDWE answers EACCES.
        return exc.errno in (errno.EPERM, errno.EACCES)
    probe.close()
    return False


def fit_torch_to_sandbox() -> bool:
    """Switch torch's oneDNN off under W^X; returns True when it did. A no-op without torch."""
    if not write_execute_denied():
        return False
    try:
        import torch
    except ImportError:
        return False
    torch.backends.mkldnn.enabled = False
    log.info("W^X memory is enforced (MemoryDenyWriteExecute): torch runs without oneDNN")
    return True
