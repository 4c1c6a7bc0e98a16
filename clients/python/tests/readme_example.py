"""Prints the first ```python block of clients/python/README.md (the complete example), for
test.sh's mypy --strict and tests/test_readme.py; with an argument N, the N-th block (0-based:
1 is the asyncio program, which test.sh type-checks as well)."""

from __future__ import annotations

import sys
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"


def example_source(n: int = 0) -> str:
    text = README.read_text(encoding="utf-8")
    start = -1
    for _ in range(n + 1):
        start = text.index("```python\n", start + 1)
    start += len("```python\n")
    return text[start : text.index("```\n", start)]


if __name__ == "__main__":
    sys.stdout.write(example_source(int(sys.argv[1]) if len(sys.argv) > 1 else 0))
