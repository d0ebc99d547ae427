"""Nuclio function: MXNet worker: trains one epoch on its data shard, rank 0 validates and checkpoints.

One invocation = one epoch of this role, run in a child forked from the warm host (see coach_functions/children.py).
"""

from coach_functions.handler import entry_points

init_context, handler = entry_points("worker")
