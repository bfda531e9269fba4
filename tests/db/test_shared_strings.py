"""db.query.shared_strings: equal strings become one object, everything else passes unchanged."""
from __future__ import annotations

import random

from rooflab.db.query import shared_strings


def test_equal_strings_become_one_object_and_order_and_values_are_kept() -> None:
    words = ["".join(random.choices("abc", k=12)) for _ in range(5)]
    values: list[object] = [str(list(random.choice(words))) if i % 3 else None for i in range(300)]  # fresh objects
    values += [1.5, 7, float("nan")]
    seen: dict[str, str] = {}
    first = shared_strings(values[:150], seen)
    out = first + shared_strings(values[150:], seen)  # a second part meets the same strings
    assert len(out) == len(values) and all(a == b or (a != a and b != b) for a, b in zip(out, values, strict=True))
    strings = [v for v in out if isinstance(v, str)]
    assert len({id(v) for v in strings}) == len(set(strings)) < len(strings)
