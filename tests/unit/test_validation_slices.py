"""The workers' validation slices (coach_functions/validation.py): every sample in exactly one, sizes within one."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from coach_functions.validation import slice_bounds


@given(st.integers(0, 10_000), st.integers(1, 64))
def test_the_slices_cover_the_set_once_in_order_with_sizes_within_one(samples, workers):
    bounds = [slice_bounds(samples, rank, workers) for rank in range(workers)]
    assert bounds[0][0] == 0 and bounds[-1][1] == samples
    assert all(end == next_start for (_, end), (next_start, _) in zip(bounds, bounds[1:]))
    sizes = [end - start for start, end in bounds]
    assert max(sizes) - min(sizes) <= 1 and sum(sizes) == samples
