"""Nuclio function: MXNet parameter-server scheduler: the rendezvous point of one epoch's servers and workers.

One invocation = one epoch of this role, run in a child forked from the warm host (see coach_functions/children.py).
"""

from coach_functions.handler import entry_points

init_context, handler = entry_points("scheduler")
