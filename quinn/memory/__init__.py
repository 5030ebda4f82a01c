"""Long-term memory: the libSQL store, versioned memories and hybrid retrieval."""

from quinn.memory.filters import memory_filter
from quinn.memory.models import Change, Memory, NewMemory, SearchHit
from quinn.memory.search import find_similar, hybrid_search
from quinn.memory.store import MemoryStore

__all__ = [
    "Change",
    "Memory",
    "MemoryStore",
    "NewMemory",
    "SearchHit",
    "find_similar",
    "hybrid_search",
    "memory_filter",
]
