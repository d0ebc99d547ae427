"""Which optional extra of Coach's distribution brings a module, so that a command run without it says what to
install in one line instead of a traceback (`coach scheduler`'s image has no `run` extra: no MXNet, numpy, scipy).

Read from the installed distribution's metadata, only when an import has already failed.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, packages_distributions, requires

from packaging.requirements import Requirement


def extra_providing(module: str | None, distribution: str = "coach") -> str | None:
    """The extra of `distribution` whose requirements install the top-level package of `module`, or None."""
    if not module:
        return None
    top = module.split(".")[0]
    providers = {name.lower().replace("_", "-") for name in packages_distributions().get(top, [])}
    try:
        texts = requires(distribution) or []
    except PackageNotFoundError:
        return None
    for text in texts:
        requirement = Requirement(text)
        if requirement.marker is None or requirement.name.lower().replace("_", "-") not in providers:
            continue
        for extra in ("run", "test"):
            if requirement.marker.evaluate({"extra": extra}):
                return extra
    return None
