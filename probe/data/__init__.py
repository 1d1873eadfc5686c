"""Ground-truth dataset stores, factor algebra, importers and procedural generators."""

from probe.data.state_space import StateSpace
from probe.data.store import Store, create_store, open_store, write_store

__all__ = ["StateSpace", "Store", "create_store", "open_store", "write_store"]
