"""tests/conftest.py's SLOW names tests that exist: a renamed or moved slow test would otherwise join the fast loop
(`-m "not slow"`, `make check`) without anyone noticing."""

from __future__ import annotations

import re

from tests.conftest import SLOW, TESTS


def test_every_test_the_slow_list_names_is_defined_where_it_says():
    missing = []
    for entry in sorted(SLOW):
        path, name = entry.split("::")
        file = TESTS / path
        if not file.is_file() or not re.search(rf"^def {re.escape(name)}\(", file.read_text(), re.MULTILINE):
            missing.append(entry)
    assert missing == []
