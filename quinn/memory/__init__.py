"""Long-term memory: the libSQL store, versioned memories and hybrid retrieval, and conversation recall.

This is memory's face: what other packages may use (tests/test_layers.py); the modules behind it are memory's
own. Loaded whole: every command that opens the store needs most of it anyway.
"""

from quinn.memory import expiry, people
from quinn.memory.clusters import current_with_vectors, similar_groups
from quinn.memory.conversations import stem
from quinn.memory.earlier import earlier_versions, retire_earlier
from quinn.memory.embed import Embedder, embedder_for
from quinn.memory.filters import AGE_ANCHOR, CURRENT, NOT_CURRENT, memory_filter, normalise_user
from quinn.memory.graph import Relation, forget_in_graph, graph_of, linked_hits, save_graph
from quinn.memory.history import whole_history
from quinn.memory.models import Change, Memory, NewMemory, SearchHit
from quinn.memory.passages import (
    KNOWLEDGE_OWNER,
    Passage,
    PassageHit,
    StoredMessage,
    backfill,
    document_passage_counts,
    drop_document_passages,
    embedded_text,
    index_message,
    insert_passages,
    passages_by_id,
    reembed,
    rewrite_passages,
    search_passages,
    split_passages,
    stored_message,
    user_passages,
    write_passages,
)
from quinn.memory.people import list_users, passage_counts
from quinn.memory.query import looks_back
from quinn.memory.records import dump_document, export_document
from quinn.memory.retrievals import apply_spacing, record_retrievals
from quinn.memory.scopes import current_by_scope, profile_changes_by_day
from quinn.memory.search import LINES, content_words, find_similar, hybrid_search, query_chunks, relevant
from quinn.memory.sensitive import asked_to_keep, mask
from quinn.memory.store import NOT_WIPED, MemoryStore, PurgeUser, rewrite_sources, versions_of

__all__ = [
    "AGE_ANCHOR",
    "CURRENT",
    "KNOWLEDGE_OWNER",
    "LINES",
    "NOT_CURRENT",
    "NOT_WIPED",
    "Change",
    "Embedder",
    "Memory",
    "MemoryStore",
    "NewMemory",
    "Passage",
    "PassageHit",
    "PurgeUser",
    "Relation",
    "SearchHit",
    "StoredMessage",
    "apply_spacing",
    "asked_to_keep",
    "backfill",
    "content_words",
    "current_by_scope",
    "current_with_vectors",
    "document_passage_counts",
    "drop_document_passages",
    "dump_document",
    "earlier_versions",
    "embedded_text",
    "embedder_for",
    "expiry",
    "export_document",
    "find_similar",
    "forget_in_graph",
    "graph_of",
    "hybrid_search",
    "index_message",
    "insert_passages",
    "linked_hits",
    "list_users",
    "looks_back",
    "mask",
    "memory_filter",
    "normalise_user",
    "passage_counts",
    "passages_by_id",
    "people",
    "profile_changes_by_day",
    "query_chunks",
    "record_retrievals",
    "reembed",
    "relevant",
    "retire_earlier",
    "rewrite_passages",
    "rewrite_sources",
    "save_graph",
    "search_passages",
    "similar_groups",
    "split_passages",
    "stem",
    "stored_message",
    "user_passages",
    "versions_of",
    "whole_history",
    "write_passages",
]
