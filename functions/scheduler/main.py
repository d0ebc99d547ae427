"""Nuclio function: MXNet parameter-server scheduler: the rendezvous point of one epoch's servers and workers.

One invocation = one epoch of this role, run in a child forked from the warm host (see functions/runtime.py).
"""

from functions import runtime


def init_context(context):
    runtime.init_host(context)


def handler(context, event):
    return runtime.handle_event(context, event, "scheduler")
