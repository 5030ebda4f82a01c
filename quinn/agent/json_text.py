"""JSON as real models write it: inside code fences or prose, cut off by max_tokens, or as a tool call in text.

Pure functions, used by the LLM seam (agent/llm.py) for structured answers and to keep JSON out of replies.
Small local models and OpenAI-compatible servers do all of these: llama-cpp-python's server returns tool calls
as text in the message content (Quinn once mailed such a call to a user), and a model cut off by max_tokens
leaves an unclosed object.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

_FENCE = re.compile(r"```[a-zA-Z0-9_-]*\s*\n?(.*?)(?:```|$)", re.DOTALL)
# Tags chat templates put around tool calls in text (Qwen/Hermes <tool_call>, Llama 3 <|python_tag|>, Mistral).
_TOOL_TAGS = re.compile(r"</?tool_call>|<\|python_tag\|>|\[TOOL_CALLS\]|<\|eom_id\|>|<\|eot_id\|>")


def _unwrapped(text: str) -> str:
    """The text without tool-call tags and, when it is one fenced block, without the fence."""
    text = _TOOL_TAGS.sub("", text).strip()
    fence = _FENCE.search(text)
    if fence and not text[: fence.start()].strip() and not text[fence.end() :].strip():
        return fence.group(1).strip()
    return text


def unfenced(text: str) -> str:
    """A reply without the code fence a small model wraps it in (seen: "```plaintext Hi Anna, ..." with or
    without the closing fence); text with anything outside one fence is returned as it is."""
    text = text.strip()
    if not text.startswith("```"):
        return text
    return _unwrapped(text)


def whole_json(text: str) -> Any | None:
    """The JSON object or array that is the entire text (tags and one code fence aside), else None."""
    body = _unwrapped(text)
    if not body.startswith(("{", "[")):
        return None
    try:
        value = json.loads(body)
    except ValueError:
        # Several objects on lines of their own (one tool call per line) are still nothing but JSON.
        try:
            value = [json.loads(line) for line in body.splitlines() if line.strip()]
        except ValueError:
            return None
    return value if isinstance(value, dict | list) else None


_OPENS_JSON = re.compile(r'\s*(\{\s*"[^"\n]{1,80}"\s*:|\[\s*\{)')


def opens_json(text: str) -> bool:
    """Whether the text (tags and a code fence aside) starts as a JSON object with a key, or an array of
    objects: no reply to a person does. Catches what `whole_json` cannot parse: an answer cut off by the output
    cap part way through a tool call (seen: a truncated ``{"name": "search_memory", "arguments": {…`` mailed)."""
    return _OPENS_JSON.match(_unwrapped(text)) is not None


@dataclass(frozen=True)
class TextToolCall:
    """A tool call a model wrote as text instead of a structured ``tool_calls`` entry."""

    name: str
    args: dict[str, Any]


def tool_calls_in_text(text: str) -> list[TextToolCall] | None:
    """The tool calls when the whole text is one or more calls (``{"name": …, "arguments": {…}}``, also the
    ``{"function": {…}}`` and ``parameters`` spellings), else None."""
    value = whole_json(text)
    items = value if isinstance(value, list) else [value]
    calls: list[TextToolCall] = []
    for item in items:
        if not isinstance(item, dict):
            return None
        item = item.get("function", item) if isinstance(item.get("function"), dict) else item
        name, args = item.get("name"), item.get("arguments", item.get("parameters", {}))
        if isinstance(args, str):
            try:
                args = json.loads(args)
            except ValueError:
                return None
        if not isinstance(name, str) or not isinstance(args, dict):
            return None
        calls.append(TextToolCall(name, args))
    return calls or None


def _closers(prefix: str) -> str | None:
    """What closes every bracket left open in `prefix`, or None when it ends inside a string."""
    stack: list[str] = []
    in_string = escaped = False
    for ch in prefix:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "{[":
            stack.append("}" if ch == "{" else "]")
        elif ch in "}]" and stack:
            stack.pop()
    return None if in_string else "".join(reversed(stack))


def repair_truncated(text: str) -> Any | None:
    """A JSON value cut off part way, repaired by dropping the unfinished tail and closing what is open.

    Only whole elements survive (a half-written sentence is not a memory): the text is cut after the last
    closing bracket that yields valid JSON. None when nothing valid is left.
    """
    start = min((i for i in (text.find("{"), text.find("[")) if i >= 0), default=-1)
    if start < 0:
        return None
    body = text[start:]
    for end in sorted((m.end() for m in re.finditer(r"[}\]]", body)), reverse=True):
        prefix = body[:end].rstrip()
        closers = _closers(prefix)
        if closers is None:
            continue
        try:
            return json.loads(re.sub(r",\s*$", "", prefix) + closers)
        except ValueError:
            continue
    return None


def find_json(text: str) -> tuple[Any, bool]:
    """The JSON value in a model's answer: the whole text, a fenced block, or the first balanced object in
    prose; failing those, a truncated one repaired. Returns ``(value, repaired)``; raises ValueError."""
    body = _unwrapped(text)
    candidates = [body] + [m.group(1) for m in _FENCE.finditer(text)]
    decoder = json.JSONDecoder()
    for candidate in candidates:
        candidate = candidate.strip()
        for i, ch in enumerate(candidate):
            if ch not in "{[":
                continue
            try:
                value, _ = decoder.raw_decode(candidate, i)
            except ValueError:
                if _closers(candidate[i:]) != "":
                    # It ran to the end of the text: cut off, not prose. An object nested in it would parse,
                    # but it is not the answer; repair the outer one.
                    repaired = repair_truncated(candidate[i:])
                    if repaired is not None:
                        return repaired, True
                    break
                continue
            return value, False
    raise ValueError(f"no JSON object in the answer ({len(text)} characters)")  # its text may be a user's memory


def is_schema_dump(value: Any) -> bool:
    """Whether a model echoed a JSON schema (``{"type": "object", "properties": …}``) instead of an answer."""
    return (
        isinstance(value, dict)
        and ("properties" in value or "$defs" in value or "$schema" in value)
        and (value.get("type") == "object" or "$schema" in value or "title" in value)
    )


ECHO_SHARE = 0.6  # a reply this much made of runs copied from what the model was sent is not a reply
ECHO_MIN = 60  # characters copied at the least: a short answer restating the question is still an answer
_ECHO_RUN = 24  # characters: shorter common runs are ordinary shared words ("Hi Ana", a name, a date)
_RESULT_MIN = 8  # a reply this short inside a tool result ("OK", "Thanks") may be a coincidence
_QUOTED = re.compile(r'^[ \t]*>.*$|"[^"\n]{24,}"|\u201c[^\u201d]{24,}\u201d', re.M)  # quoted lines and quotations
_CONTAINED_MIN = 16  # a reply this long that is nothing but a part of the email or of our own words is a copy


def echoed(reply: str, *sources: str, results: Sequence[str] = (), recalled: Sequence[str] = ()) -> bool:
    """Whether ``reply`` is a copy of what the model was sent rather than an answer.

    ``sources`` are what a reply must never merely send back: the new email, the template's words around it and
    the notes Quinn sent the model; ``results`` the results of its tool calls; ``recalled`` what memory put in
    the prompt (memories, passages of past mail), which a reply may restate but not copy wholesale. An echo:

    - the whole reply is a part of one source (16 characters or more: "Hi Quinn, what is Anouk's new job?"
      sent back) or of one tool result (8 or more: "remember: saved");
    - or runs of at least ``_ECHO_RUN`` characters found in any of them cover ``ECHO_SHARE`` of it and
      ``ECHO_MIN`` characters at least (the email and "Write the reply body only" sent back; a past mail of the
      person pasted as the answer). What is copied from ``recalled`` counts only when it is two sentences or
      more: one remembered sentence said again ("The car I bought to replace the old one is a dark green
      Mazda.", asked which car) is the answer, seen refused three times over in the memory QA run.

    Small models do all of these (seen with a 0.5B model). A reply quoting a line and answering it stays under the
    share, and a short answer restating the question or a fact is under the minimum. The thread and its summary
    are not among the texts: a reply may rightly repeat what Quinn said before. What the reply marks as a quote
    (lines starting with ">", text in quotation marks) is left out: "what exactly did I tell you about the
    landlord?" is rightly answered with the passage, quoted. Whitespace and case are folded.
    """
    text = " ".join(_QUOTED.sub(" ", reply).split()).lower()
    if not text:
        return False

    def folded(items: Sequence[str]) -> list[str]:
        return [flat for item in items if (flat := " ".join(item.split()).lower())]

    strict, tools, memory = folded(sources), folded(results), folded(recalled)
    if len(text) >= _CONTAINED_MIN and any(text in flat for flat in strict):
        return True
    if len(text) >= _RESULT_MIN and any(text in flat for flat in tools):
        return True
    sent = _copied(text, (*strict, *tools))
    kept = _copied(text, memory)
    if not _SENTENCE_BREAK.search("".join(c if hit else "\0" for c, hit in zip(text, kept, strict=True))):
        kept = [False] * len(text)  # one remembered sentence said again is an answer, not a paste
    copied = sum(a or b for a, b in zip(sent, kept, strict=True))
    return copied >= ECHO_MIN and copied >= ECHO_SHARE * len(text)


_SENTENCE_BREAK = re.compile(r"[.!?]\s+[^\s\0]")  # inside one copied run: the end of a sentence and the next


def _copied(text: str, sources: Sequence[str]) -> list[bool]:
    """Per character of ``text``: whether it lies in a run of at least ``_ECHO_RUN`` characters found in one of
    ``sources``."""
    covered = [False] * len(text)
    for flat in sources:
        start = 0
        while start <= len(text) - _ECHO_RUN:
            at = flat.find(text[start : start + _ECHO_RUN])
            if at < 0:
                start += 1
                continue
            end = start + _ECHO_RUN
            while end < len(text) and at + (end - start) < len(flat) and text[end] == flat[at + end - start]:
                end += 1
            for i in range(start, end):
                covered[i] = True
            start = end
    return covered
