"""Quinn's agent: the reply and what it learns (the model, the prompts, extraction, the learning queue) and the
tables that are the agent's own (consent, confirmations, digests, usage, the audit log, prompt versions).

This is the agent's face: what other packages may use (tests/test_layers.py). It loads each module on first use
(``quinn.faces``): the agent's modules import the model SDKs, which ``sdks.skip_unused`` must see first.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from quinn.faces import lazy_face

# name -> the module it lives in ("": a module used as a namespace).
HOMES = {
    "audit_log": "",
    "digest": "",
    "forgetting": "",
    "known": "",
    "learning": "",
    "proposals": "",
    "purge": "",
    "reply_trace": "",
    "state": "",
    "usage": "",
    "opted_out": "consent",
    "opted_out_among": "consent",
    "ThreadMessage": "context",
    "estimate_tokens": "context",
    "others_on_thread": "context",
    "evaluate_extraction": "evaluation",
    "load_cases": "evaluation",
    "Extraction": "extract",
    "ExtractionOutcome": "extract",
    "apply_extraction": "extract",
    "Grounding": "grounding",
    "grounded": "grounding",
    "LLM": "llm",
    "PromptTooLong": "llm",
    "Usage": "llm",
    "NO_LEARNING_TEMPLATES": "memory_mail",
    "forgets_in": "memory_mail",
    "kept_reply": "memory_mail",
    "kept_subject": "memory_mail",
    "TOO_SMALL": "model_check",
    "ModelVerdict": "model_check",
    "check_model": "model_check",
    "PURGE_DONE_TEMPLATE": "memory_mail",
    "SUFFIX": "prompts",
    "TEMPLATE_NAMES": "prompts",
    "PromptStore": "prompts",
    "RenderedPrompt": "prompts",
    "packaged_dir": "prompts",
    "TemplateRewrite": "proposals",
    "CheckedTemplate": "trials",
    "TemplateTrials": "trials",
    "TrialsBusy": "trials",
    "Agent": "respond",
    "Answer": "respond",
    "recallable": "respond",
    "recallable_text": "respond",
    "preview_variables": "samples",
    "sample_variables": "samples",
    "ALL_STATE_FIELDS": "state",
    "STATE_FIELDS": "state",
    "user_state": "state",
    "record_usage": "usage",
    "DayFigures": "reply_trace",
    "ShownMemory": "reply_trace",
    "ShownPassage": "reply_trace",
    "Traced": "reply_trace",
    "daily_figures": "reply_trace",
}
__all__ = [*HOMES]
__getattr__ = lazy_face(__name__, HOMES)

if TYPE_CHECKING:
    from quinn.agent import audit_log as audit_log
    from quinn.agent import digest as digest
    from quinn.agent import forgetting as forgetting
    from quinn.agent import known as known
    from quinn.agent import learning as learning
    from quinn.agent import proposals as proposals
    from quinn.agent import purge as purge
    from quinn.agent import reply_trace as reply_trace
    from quinn.agent import state as state
    from quinn.agent import usage as usage
    from quinn.agent.consent import opted_out as opted_out
    from quinn.agent.consent import opted_out_among as opted_out_among
    from quinn.agent.context import ThreadMessage as ThreadMessage
    from quinn.agent.context import estimate_tokens as estimate_tokens
    from quinn.agent.context import others_on_thread as others_on_thread
    from quinn.agent.evaluation import evaluate_extraction as evaluate_extraction
    from quinn.agent.evaluation import load_cases as load_cases
    from quinn.agent.extract import Extraction as Extraction
    from quinn.agent.extract import ExtractionOutcome as ExtractionOutcome
    from quinn.agent.extract import apply_extraction as apply_extraction
    from quinn.agent.grounding import Grounding as Grounding
    from quinn.agent.grounding import grounded as grounded
    from quinn.agent.llm import LLM as LLM
    from quinn.agent.llm import PromptTooLong as PromptTooLong
    from quinn.agent.llm import Usage as Usage
    from quinn.agent.memory_mail import NO_LEARNING_TEMPLATES as NO_LEARNING_TEMPLATES
    from quinn.agent.memory_mail import PURGE_DONE_TEMPLATE as PURGE_DONE_TEMPLATE
    from quinn.agent.memory_mail import forgets_in as forgets_in
    from quinn.agent.memory_mail import kept_reply as kept_reply
    from quinn.agent.memory_mail import kept_subject as kept_subject
    from quinn.agent.model_check import TOO_SMALL as TOO_SMALL
    from quinn.agent.model_check import ModelVerdict as ModelVerdict
    from quinn.agent.model_check import check_model as check_model
    from quinn.agent.prompts import SUFFIX as SUFFIX
    from quinn.agent.prompts import TEMPLATE_NAMES as TEMPLATE_NAMES
    from quinn.agent.prompts import PromptStore as PromptStore
    from quinn.agent.prompts import RenderedPrompt as RenderedPrompt
    from quinn.agent.prompts import packaged_dir as packaged_dir
    from quinn.agent.proposals import TemplateRewrite as TemplateRewrite
    from quinn.agent.reply_trace import DayFigures as DayFigures
    from quinn.agent.reply_trace import ShownMemory as ShownMemory
    from quinn.agent.reply_trace import ShownPassage as ShownPassage
    from quinn.agent.reply_trace import Traced as Traced
    from quinn.agent.reply_trace import daily_figures as daily_figures
    from quinn.agent.respond import Agent as Agent
    from quinn.agent.respond import Answer as Answer
    from quinn.agent.respond import recallable as recallable
    from quinn.agent.respond import recallable_text as recallable_text
    from quinn.agent.samples import preview_variables as preview_variables
    from quinn.agent.samples import sample_variables as sample_variables
    from quinn.agent.state import ALL_STATE_FIELDS as ALL_STATE_FIELDS
    from quinn.agent.state import STATE_FIELDS as STATE_FIELDS
    from quinn.agent.state import user_state as user_state
    from quinn.agent.trials import CheckedTemplate as CheckedTemplate
    from quinn.agent.trials import TemplateTrials as TemplateTrials
    from quinn.agent.trials import TrialsBusy as TrialsBusy
    from quinn.agent.usage import record_usage as record_usage
