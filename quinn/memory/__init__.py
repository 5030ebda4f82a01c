"""Long-term memory: the libSQL store, versioned memories and hybrid retrieval."""

from quinn.memory.models import Memory, NewMemory, SearchHit
from quinn.memory.store import MemoryStore

__all__ = ["Memory", "MemoryStore", "NewMemory", "SearchHit"]
