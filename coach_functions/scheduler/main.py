"""Nuclio function: MXNet parameter-server scheduler: the rendezvous point of one epoch's servers and workers.

One invocation = one epoch of this role, run in a child forked from the warm host (see coach_functions/children.py).
"""

from coach_functions import auth
from coach_functions.handler import handle_event, init_host


def init_context(context):
    auth.init_context(context)
    init_host(context)


def handler(context, event):
    refused = auth.refusal(context, event)  # before anything else: only the run's controller may invoke it
    if refused is not None:
        return refused
    return handle_event(context, event, "scheduler")
