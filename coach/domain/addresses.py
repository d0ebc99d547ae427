"""One answer to "is this host this machine?", for every place that treats loopback specially: `coach serve` asks
for a token on any other address, and the Nuclio platform gives a pod's ps-lite scheduler its pod IP when the
dashboard reports a loopback one. Pure: a name is never resolved.
"""

from __future__ import annotations

import ipaddress


def is_loopback(host: str) -> bool:
    """True for 127.0.0.0/8, ::1 (bracketed or not) and `localhost`; any other name or address is not."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False
