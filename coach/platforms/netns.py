"""A network namespace of its own for each job's ps-lite traffic on the embedded platform.

Why: ps-lite's van has no authentication, and a ps-lite node aborts its whole process on a message it cannot parse
(`Check failed: pb.ParseFromArray(meta_buf, buf_size): failed to parse string into protobuf`). On a shared
loopback any local process that connects to a job's ps-lite ports and sends a few dozen bytes (an HTTP request,
a port scan) kills every epoch of the job. So each job's ps-lite nodes listen and connect inside a network
namespace of the job's own, with only a loopback interface: nothing outside the job can reach those ports, and
the job's functions reach each other's there as they did on the machine's loopback.

How: the controller creates the namespace (an `unshare(CLONE_NEWNET)` in a short-lived thread, which leaves the
rest of the process where it was; its loopback brought up) and keeps a file descriptor of it; each host of the job
gets that descriptor from the template (SCM_RIGHTS) and its number in `COACH_PS_NETNS_FD`; every epoch child enters
the namespace in the thread that starts its ps-lite node only (`coach_functions/ps.py`), so the threads ps-lite and
ZeroMQ start inherit it, while the host's HTTP trigger and the child's checkpoint traffic (file or S3) stay on the
machine's network. Linux keeps the namespace while any process holds a descriptor of it or runs in it.

Needs CAP_SYS_ADMIN (root, as `make test` runs here). Without it `create()` says why and the job runs on the shared
loopback as before; an epoch a foreign peer breaks there is then retried without counting against the job (see
docs/failures.md).

Side effects: creates network namespaces; opens and closes their file descriptors.
"""

from __future__ import annotations

import ctypes
import fcntl
import os
import socket
import struct
import threading

CLONE_NEWNET = 0x40000000  # <linux/sched.h>
SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 0x1  # <linux/sockios.h>, <net/if.h>
IFREQ = "16sh22x"  # struct ifreq: the interface's name, then its flags (40 bytes on Linux)


class NamespaceError(Exception):
    """No network namespace could be made here; the message says why."""


def create() -> int:
    """A new network namespace with its loopback up; returns a file descriptor of it (close-on-exec, the caller's
    to close). Raises NamespaceError."""
    outcome: dict[str, int | str] = {}
    thread = threading.Thread(target=_create_in_thread, args=(outcome,), name="coach-netns", daemon=True)
    thread.start()
    thread.join()
    if "fd" not in outcome:
        raise NamespaceError(str(outcome.get("error", "the namespace thread did not finish")))
    return int(outcome["fd"])


def _create_in_thread(outcome: dict[str, int | str]) -> None:
    """unshare() moves the calling thread only: this thread ends in the new namespace, and the process stays."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(CLONE_NEWNET) != 0:
        outcome["error"] = f"unshare(CLONE_NEWNET): {os.strerror(ctypes.get_errno())}"
        return
    try:
        _loopback_up()
        outcome["fd"] = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    except OSError as error:
        outcome["error"] = f"loopback of the new namespace: {error}"


def _loopback_up() -> None:
    """`ip link set lo up` in the calling thread's namespace (a new one has its loopback down)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        flags = struct.unpack(IFREQ, fcntl.ioctl(sock, SIOCGIFFLAGS, struct.pack(IFREQ, b"lo", 0)))[1]
        fcntl.ioctl(sock, SIOCSIFFLAGS, struct.pack(IFREQ, b"lo", flags | IFF_UP))

