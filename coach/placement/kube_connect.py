"""An ApiClient from a kubeconfig, and whether the apiserver answers: errors as one-line values, never raised.

The one way every Kubernetes part of Coach reaches an apiserver: `coach run --platform nuclio` (its placement
and its platform), `coach scheduler`, and the loopback stack. Side effects: reads the kubeconfig; `reachable`
sends one request.
"""

from __future__ import annotations

import re
from pathlib import Path

from kubernetes import client
from kubernetes import config as kube_config
from kubernetes.config.config_exception import ConfigException

#: HTTP connections kept to the apiserver: 3 watches, the binders, Events and the Lease at once.
CONNECTIONS = 32
#: A kubeconfig larger than this is refused before it is read (kubectl's own are a few KiB).
MAX_KUBECONFIG_BYTES = 1 << 20


def _not_a_kubeconfig_file(path: Path) -> str | None:
    """Why `path` cannot be read as a kubeconfig without reading it (missing, a folder, a FIFO or a device, too
    large), else None."""
    try:
        status = path.stat()
    except FileNotFoundError:
        return "no such file"
    except OSError as error:
        return f"cannot be read: {error.strerror or error}"
    if path.is_dir():
        return "is a folder, not a file"
    if not path.is_file():
        return "not a regular file (a FIFO, a socket or a device)"
    if status.st_size > MAX_KUBECONFIG_BYTES:
        return f"{status.st_size} bytes, more than a kubeconfig's {MAX_KUBECONFIG_BYTES} at most"
    return None


def connect(kubeconfig: str):
    """(ApiClient, the context's namespace) or (None, a one-line error)."""
    path = Path(kubeconfig)
    problem = _not_a_kubeconfig_file(path)
    if problem is not None:
        return None, f"--kubeconfig: {kubeconfig}: {problem}"
    configuration = client.Configuration()
    try:
        _, active = kube_config.list_kube_config_contexts(config_file=str(path))
        kube_config.load_kube_config(config_file=str(path), client_configuration=configuration)
    except (ConfigException, OSError, ValueError, TypeError, AttributeError, KeyError) as error:
        return None, f"--kubeconfig: {kubeconfig}: not a usable kubeconfig: {error}"
    except Exception as error:  # YAML errors and the like: still one line
        return None, f"--kubeconfig: {kubeconfig}: not a usable kubeconfig: {type(error).__name__}: {error}"
    namespace = ((active or {}).get("context") or {}).get("namespace") or "default"
    configuration.connection_pool_maxsize = CONNECTIONS
    return client.ApiClient(configuration), namespace


def reachable(api) -> str | None:
    """None when the apiserver answers, else why not (one line)."""
    try:
        client.VersionApi(api).get_code(_request_timeout=(5, 10))
        return None
    except client.ApiException as error:
        if error.status in (401, 403, 404):
            return None  # it answers; the watches will say what they may not do
        return f"cannot reach the apiserver at {api.configuration.host}: HTTP {error.status} {error.reason}"
    except Exception as error:
        return f"cannot reach the apiserver at {api.configuration.host}: {_why(error)}"


def _why(error: Exception) -> str:
    """The innermost cause in a few words: `[Errno 111] Connection refused`, `timed out`."""
    text = str(getattr(error, "reason", None) or error)
    found = re.search(r"\[Errno -?\d+\][^'\")]*", text)
    if found:
        return found.group(0).strip()
    return (text.splitlines()[0] if text else type(error).__name__)[:200]
