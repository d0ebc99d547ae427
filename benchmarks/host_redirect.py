"""Start the embedded platform's function hosts through a benchmark script, so it can wrap the runtime.

Only the module path is swapped (`-m coach.platforms.host ARGS` -> `SCRIPT --host ARGS`), so whatever arguments
and environment LocalPlatform passes reach the real host unchanged. Used by the diagnostic benchmarks.
"""

from __future__ import annotations

import subprocess
from pathlib import Path


def redirect_hosts(script: Path) -> None:
    """From now on, coach.platforms.local starts every host as `python SCRIPT --host ARGS` in this process."""
    import coach.platforms.local as local_module

    class PopenShim:
        def __getattr__(self, name):
            return getattr(subprocess, name)

        @staticmethod
        def Popen(cmd, *args, **kwargs):  # noqa: N802  (mirrors subprocess.Popen)
            cmd = list(cmd)
            if cmd[1:3] == ["-m", "coach.platforms.host"]:
                cmd = [cmd[0], str(Path(script).resolve()), "--host", *cmd[3:]]
            return subprocess.Popen(cmd, *args, **kwargs)

    local_module.subprocess = PopenShim()
