"""One way to report unreadable YAML: `FILE: (file): invalid YAML at line N[: problem]`.

Why this module exists: job, cluster and matrix files are all YAML written by a person, and all three report a
file PyYAML cannot parse with the same one line, so that the user learns where to look whichever file it was.

Side effects: none.
"""

from __future__ import annotations

import yaml

#: FIELD of problems with a file as a whole.
FILE_FIELD = "(file)"


def invalid_yaml(error: yaml.YAMLError, *, with_problem: bool = True) -> str:
    """`invalid YAML at line N: problem`, the message part of the line (without `FILE: (file): `).

    N is 1-based, from the error's problem mark (else its context mark); the line number is left out when the
    error has no mark (e.g. a reader error). `with_problem=False` leaves out PyYAML's description of the problem.
    """
    mark = getattr(error, "problem_mark", None) or getattr(error, "context_mark", None)
    where = f" at line {mark.line + 1}" if mark is not None else ""
    if not with_problem:
        return f"invalid YAML{where}"
    problem = getattr(error, "problem", None) or str(error).splitlines()[0]
    context = getattr(error, "context", None)
    if context and problem.startswith("but "):  # "expected a single document ..., but found ..."
        problem = f"{context}, {problem}"
    return f"invalid YAML{where}: {problem}"


def invalid_yaml_line(shown: str, error: yaml.YAMLError, *, with_problem: bool = True) -> str:
    """The whole line, `SHOWN: (file): invalid YAML at line N[: problem]`, for SHOWN as the user gave the path."""
    return f"{shown}: {FILE_FIELD}: {invalid_yaml(error, with_problem=with_problem)}"
