"""drgpu: give each container of a training stack exactly its GPUs, and prove it."""

__version__ = "0.1.0"
