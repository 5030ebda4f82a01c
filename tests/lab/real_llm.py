"""A real language model on 127.0.0.1: llama-cpp-python's OpenAI-compatible server over the lab's GGUF file.

The runtime is ``llama-cpp-python[server]==0.3.36`` (an sdist, compiled once; ``.ci/run`` builds it), the model
is `tests.lab.real_model.QWEN_05B` (see there for its provenance). Measured on 2 cores: load < 1 s, ~150 tokens/s
prompt, ~55 tokens/s decode, 0.6 GiB RSS. What this server does that the scripted one must imitate:

* it serves ``/v1/chat/completions`` (not ``/v1/responses``) and ignores the request's model name;
* ``response_format: {"type": "json_schema"}`` is answered with a 500; ``{"type": "json_object", "schema": …}``
  constrains the output to the schema;
* tool calls come back as plain text in the message content (no ``tool_calls``).

Usage::

    with RealLLM(model_path) as server, ModelRecorder(server) as recorder:
        base_url = recorder.openai_base_url  # Quinn talks to the recorder, which passes everything on
        ...
        assert "Ana lives in Porto" in recorder.texts()[-1]   # what Quinn sent, not what the model said
"""

from __future__ import annotations

import http.client
import importlib.util
import json
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from tests.lab.llm_server import purpose_of
from tests.lab.ports import free_port
from tests.lab.process import LabServer, remove_at_exit

RUNTIME = "llama-cpp-python[server]==0.3.36"
RUNTIME_HINT = (
    f"CMAKE_ARGS='-DLLAVA_BUILD=OFF -DGGML_NATIVE=OFF' .venv/bin/pip install '{RUNTIME}' "
    "(compiles ~6 min on 2 cores; .ci/run does it)"
)
MODEL_NAME = "qwen2.5-coder-0.5b-instruct"


class RealLLMError(RuntimeError):
    """The runtime is missing or the server did not start."""


def runtime_available() -> bool:
    """Whether llama_cpp and its server extra (uvicorn, fastapi) import in this interpreter."""
    return all(importlib.util.find_spec(name) is not None for name in ("llama_cpp", "uvicorn", "fastapi"))


class RealLLM(LabServer):
    """``python -m llama_cpp.server`` on a free port with its log in a temp dir.

    ``n_ctx`` bounds prompt + answer in tokens (memory grows with it). ``n_threads`` serves both the prompt and
    the answer (the server's own default reads the prompt on every core). Two threads suit a box the server has
    to itself (the benchmarks); beside other busy processes llama.cpp's threads wait on each other whenever one is
    descheduled, so the test suite's server runs one (tests/conftest.py). No
    ``--cache``: in 0.3.36 its RAM cache grows the server by ~200 MB a request whatever ``--cache_size`` says
    (measured: 1.5 GB -> 6.2 GB in 24 short requests; a memory-QA run was OOM-killed at 23 GB).
    """

    restart_timeout_s = 60.0

    def __init__(self, model_path: Path, *, n_ctx: int = 4096, n_threads: int = 2, port: int | None = None,
                 alias: str = MODEL_NAME) -> None:  # fmt: skip
        """Prepare; nothing runs until `start()`. ``alias``: the model's name in ``/v1/models``."""
        self.model_path = model_path
        self.alias = alias
        self.n_ctx = n_ctx
        self.n_threads = n_threads
        self.port = port or free_port()
        self.host = "127.0.0.1"
        self.dir = Path(tempfile.mkdtemp(prefix="quinn-real-llm-"))
        remove_at_exit(self.dir)
        self.log_path = self.dir / "llama-server.log"

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:PORT``."""
        return f"http://{self.host}:{self.port}"

    @property
    def openai_base_url(self) -> str:
        """``http://127.0.0.1:PORT/v1``: what ``[llm] base_url`` takes."""
        return f"{self.base_url}/v1"

    def start(self, timeout_s: float = 60.0) -> None:
        """Start the server and return once ``GET /v1/models`` answers 200; raise `RealLLMError` with the log
        tail when it exits or does not answer within `timeout_s`."""
        if self.running:
            return
        if not runtime_available():
            raise RealLLMError(f"llama-cpp-python's server is not installed: {RUNTIME_HINT}")
        cmd = [sys.executable, "-m", "llama_cpp.server", "--model", str(self.model_path), "--model_alias",
               self.alias, "--host", self.host, "--port", str(self.port), "--n_threads", str(self.n_threads),
               "--n_threads_batch", str(self.n_threads), "--n_ctx", str(self.n_ctx)]  # fmt: skip
        self._spawn(cmd, self.log_path, lambda: self._status("/v1/models") == 200, timeout_s, RealLLMError)

    def _status(self, path: str) -> int:
        conn = http.client.HTTPConnection(self.host, self.port, timeout=2.0)
        try:
            conn.request("GET", path)
            response = conn.getresponse()
            response.read()
            return response.status
        finally:
            conn.close()


class ModelRecorder:
    """A pass-through in front of a `RealLLM` that keeps every request body: tests assert on what Quinn sent to
    the model (llama.cpp's server records nothing), never on the model's wording."""

    def __init__(self, target: RealLLM) -> None:
        self.target = target
        self.requests: list[tuple[str, Any]] = []  # (path, JSON body)
        self.purposes: list[str] = []  # what each request is for (llm_server.purpose_of), by index
        self._lock = threading.Lock()
        self.responses: list[tuple[int, Any]] = []  # (index of the request answered, JSON body or None)
        self.seconds: dict[int, float] = {}  # index of a request -> seconds until its answer (benchmarks' cost)
        self._httpd: ThreadingHTTPServer | None = None

    @property
    def openai_base_url(self) -> str:
        assert self._httpd is not None, "start() the recorder first"
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"

    def texts(self, path_suffix: str = "/chat/completions", purpose: str | None = None) -> list[str]:
        """The messages of each recorded chat request (for ``purpose`` when given), one string per request."""
        return ["\n".join(str(m.get("content")) for m in body.get("messages", []))
                for path, body in self.bodies(purpose, path_suffix)]  # fmt: skip

    def bodies(self, purpose: str | None = None, path_suffix: str = "", start: int = 0) -> list[tuple[str, Any]]:
        """(path, JSON body) of the requests recorded from index ``start`` on for ``purpose`` ("Extraction",
        "reply"…), or all of them. Safe while requests arrive (a job's call after the reply)."""
        with self._lock:
            recorded = list(zip(self.requests[start:], self.purposes[start:], strict=True))
        return [(path, body) for (path, body), why in recorded
                if purpose in (None, why) and path.endswith(path_suffix)]  # fmt: skip

    def start(self) -> ModelRecorder:
        recorder = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _forward(self, method: str) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else None
                index = -1
                if raw is not None:
                    body = json.loads(raw)
                    with recorder._lock:  # one index for the request and its purpose
                        recorder.purposes.append("embeddings" if self.path.endswith("/embeddings")
                                                 else purpose_of(body, dict(self.headers.items())))  # fmt: skip
                        recorder.requests.append((self.path, body))
                        index = len(recorder.requests) - 1
                conn = http.client.HTTPConnection(recorder.target.host, recorder.target.port, timeout=600)
                started = time.perf_counter()
                try:
                    conn.request(method, self.path, body=raw, headers={"Content-Type": "application/json"})
                    response = conn.getresponse()
                    payload = response.read()
                finally:
                    conn.close()
                if index >= 0:  # token counts and seconds for benchmarks (bench/memory_qa.py, bench/long_memory)
                    recorder.seconds[index] = time.perf_counter() - started
                    try:
                        recorder.responses.append((index, json.loads(payload)))
                    except ValueError:
                        recorder.responses.append((index, None))
                self.send_response(response.status)
                self.send_header("Content-Type", response.getheader("Content-Type") or "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def do_GET(self) -> None:
                self._forward("GET")

            def do_POST(self) -> None:
                self._forward("POST")

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        threading.Thread(target=self._httpd.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        httpd, self._httpd = self._httpd, None
        if httpd is not None:
            httpd.shutdown()
            httpd.server_close()

    def __enter__(self) -> ModelRecorder:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
