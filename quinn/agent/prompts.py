"""Prompt templates: Jinja2 files that admins edit, rendered in a sandbox with StrictUndefined.

The admin directory (``[prompts] dir``) is searched first, the packaged defaults second; an admin template can
``{% extends "default/reply.j2" %}`` and override one block. A template has a ``system`` block and a ``user``
block, rendered separately. Email text only ever enters as a variable, never as template source. Edits are
picked up on the next render; a broken edit is rejected with a log line and the last good version stays in use.
"""

from __future__ import annotations

import hashlib
import logging
import tempfile
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment

from quinn.errors import TemplateError

log = logging.getLogger(__name__)

TEMPLATE_NAMES = ("reply", "extract", "summarize", "consolidate", "reflect", "digest", "session_close", "entities")
SUFFIX = ".j2"


def packaged_dir() -> Path:
    """The default templates: inside the wheel (``quinn/_prompts``), or ``prompts/`` of a source checkout."""
    inside = Path(str(resources.files("quinn"))) / "_prompts"
    if inside.is_dir():
        return inside
    return Path(__file__).resolve().parents[2] / "prompts"


@dataclass(frozen=True)
class RenderedPrompt:
    """The two messages of a prompt and which template version produced them."""

    name: str
    system: str
    user: str
    version: str  # "<name>@<sha256 of the sources, 12 hex>"


@dataclass
class _Loaded:
    template: jinja2.Template
    version: str
    sources: tuple[Path, ...]
    mtimes: tuple[float, ...]
    text: str = ""  # the file it was read from (the admin's copy, else the default), as it was then


def template_location(exc: BaseException) -> str | None:
    """``file:line`` of the innermost template frame of a render error (Jinja maps its frames to .j2 lines)."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename.endswith(SUFFIX)]
    return f"{frames[-1].filename}:{frames[-1].lineno}" if frames else None


def _blocks(template: jinja2.Template, variables: dict[str, Any]) -> tuple[str, str]:
    """The rendered system and user blocks, through the whole inheritance chain."""
    context = template.new_context(dict(variables))
    try:
        # Rendering the root runs {% extends %}, which puts the whole inheritance chain into context.blocks:
        # an admin template that overrides only "system" still has the default's "user" block.
        for _chunk in template.root_render_func(context):
            pass
        missing = {"system", "user"} - set(context.blocks)
        if missing:
            raise TemplateError(f"{template.filename}: template must define the blocks {', '.join(sorted(missing))}")
        system = "".join(context.blocks["system"][0](context)).strip()
        user = "".join(context.blocks["user"][0](context)).strip()
    except TemplateError:
        raise
    except Exception:
        # Called outside Template.render, so map the compiled frames back to template lines as render() does.
        template.environment.handle_exception()
    return system, user


class PromptStore:
    """Finds, compiles, caches and renders the prompt templates."""

    def __init__(self, admin_dir: Path | None = None, samples: Callable[[], dict[str, dict[str, Any]]] | None = None):
        """``samples`` gives sample variables per template: an edit is trial-rendered with them before use."""
        self.admin_dir = admin_dir
        self.samples = samples
        self.default_dir = packaged_dir()
        if admin_dir is not None and not admin_dir.is_dir():
            raise TemplateError(f"prompts.dir {admin_dir} is not a directory", "create it or remove prompts.dir")
        main = [str(admin_dir)] if admin_dir else []
        loader = jinja2.PrefixLoader({"default": jinja2.FileSystemLoader(str(self.default_dir))}, delimiter="/")
        self.env = ImmutableSandboxedEnvironment(
            loader=jinja2.ChoiceLoader([jinja2.FileSystemLoader([*main, str(self.default_dir)]), loader]),
            undefined=jinja2.StrictUndefined,
            autoescape=False,
            keep_trailing_newline=True,
            auto_reload=False,
        )
        self._good: dict[str, _Loaded] = {}

    def _paths(self, name: str) -> tuple[Path, ...]:
        paths = [d / f"{name}{SUFFIX}" for d in (self.admin_dir, self.default_dir) if d is not None]
        return tuple(p for p in paths if p.exists())

    def load(self, name: str) -> _Loaded:
        """Compile ``name`` (or return the cached compile); a broken edit keeps the last good version."""
        paths = self._paths(name)
        if not paths:
            raise TemplateError(f"prompt template {name}{SUFFIX} not found in {self.admin_dir or self.default_dir}")
        mtimes = tuple(p.stat().st_mtime_ns for p in paths)
        cached = self._good.get(name)
        if cached is not None and cached.sources == paths and cached.mtimes == mtimes:
            return cached
        try:
            self.env.cache.clear() if self.env.cache is not None else None
            template = self.env.get_template(f"{name}{SUFFIX}")
            sample = self.samples().get(name) if self.samples is not None else None
            if sample is not None:
                self._render_blocks(template, sample, f"{name}@new")
        except jinja2.TemplateSyntaxError as exc:
            error = TemplateError(f"{exc.filename or paths[0]}:{exc.lineno}: {exc.message}")
            if cached is None:
                raise error from None
            log.error("prompt %s rejected, keeping the last good version: %s", name, error)
            return cached
        except TemplateError as exc:
            if cached is None:
                raise
            log.error("prompt %s rejected, keeping the last good version: %s", name, exc)
            return cached
        digest = hashlib.sha256(b"".join(p.read_bytes() for p in paths)).hexdigest()[:12]
        loaded = _Loaded(template, f"{name}@{digest}", paths, mtimes, paths[0].read_text(encoding="utf-8"))
        if cached is not None and cached.version != loaded.version:
            log.info("prompt %s reloaded: %s", name, loaded.version)
        self._good[name] = loaded
        return loaded

    def render(self, name: str, variables: dict[str, Any]) -> RenderedPrompt:
        """Render ``name``'s system and user blocks with ``variables`` (email text goes in as data only)."""
        loaded = self.load(name)
        system, user = self._render_blocks(loaded.template, variables, loaded.version)
        return RenderedPrompt(name, system, user, loaded.version)

    @staticmethod
    def _render_blocks(template: jinja2.Template, variables: dict[str, Any], version: str) -> tuple[str, str]:
        try:
            system, user = _blocks(template, variables)
        except TemplateError:
            raise
        except jinja2.UndefinedError as exc:
            where = template_location(exc) or version
            raise TemplateError(f"{where}: {exc.message}", "see prompts/README.md for the variables") from None
        except (jinja2.TemplateError, TypeError, ValueError, AttributeError) as exc:
            # Sandbox violations are jinja2.SecurityError; filters on wrong types raise TypeError/ValueError.
            raise TemplateError(f"{template_location(exc) or version}: {exc}") from None
        return system, user

    def text_of(self, name: str) -> tuple[str, str]:
        """(version, text) of the template in use: what a reply rendered with it was written by."""
        loaded = self.load(name)
        return loaded.version, loaded.text

    def source_of(self, name: str) -> Path:
        """The file ``name`` is read from: the admin's copy when there is one, else the packaged default."""
        paths = self._paths(name)
        if not paths:
            raise TemplateError(f"prompt template {name}{SUFFIX} not found in {self.admin_dir or self.default_dir}")
        return paths[0]

    def reload(self) -> None:
        """Forget compiled templates (SIGHUP); the next render reads the files again."""
        for name in list(self._good):
            try:
                self._good[name].mtimes = ()
            except KeyError:
                continue


def render_source(name: str, source: str, variables: dict[str, Any],
                  samples: dict[str, dict[str, Any]] | None = None) -> RenderedPrompt:  # fmt: skip
    """``source`` as ``name``'s template, compiled in the sandbox (``default/…`` reachable) and rendered with
    ``variables``, without touching any template directory; a ``TemplateError`` says what is wrong and where.
    ``samples``: it must also render them (the trial render every edit gets). Text nobody vouches for yet (an edit,
    a model's rewrite) is rendered so only in a child process with limits (``agent/trials.py``)."""
    with tempfile.TemporaryDirectory(prefix="quinn-template-") as tmp:
        (Path(tmp) / f"{name}{SUFFIX}").write_text(source, encoding="utf-8")
        store = PromptStore(Path(tmp), samples=None if samples is None else lambda: samples)
        return store.render(name, variables)


def checked(name: str, source: str, samples: dict[str, dict[str, Any]],
            heavy: dict[str, dict[str, Any]] | None = None) -> str | None:  # fmt: skip
    """Why ``source`` cannot be ``name``'s template (compiled in the sandbox, rendered with the samples, both
    blocks present; and rendered with ``heavy``, the samples grown to the sizes real mail and memory reach, so a
    template quick on two memories but slow on two hundred meets the trial's deadline), or None when it can."""
    try:
        rendered = render_source(name, source, samples[name], samples)
        if heavy is not None:
            render_source(name, source, heavy[name])
    except TemplateError as exc:
        return exc.message
    if not rendered.system.strip() or not rendered.user.strip():
        return "the template must fill both the system and the user block"
    return None


def rendered_or_problem(name: str, source: str, variables: dict[str, Any], samples: dict[str, dict[str, Any]],
                        heavy: dict[str, dict[str, Any]] | None = None) -> RenderedPrompt | str:  # fmt: skip
    """A preview's work in its child: why ``source`` fails the checks or ``variables`` (a string), else the
    render with ``variables``."""
    problem = checked(name, source, samples, heavy)
    if problem is not None:
        return problem
    try:
        return render_source(name, source, variables)
    except TemplateError as exc:  # passes the samples, fails on this person's data: worth knowing
        return str(exc)
