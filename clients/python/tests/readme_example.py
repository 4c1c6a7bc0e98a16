"""Prints the first ```python block of clients/python/README.md (the complete example), for
test.sh's mypy --strict and tests/test_readme.py."""

from __future__ import annotations

import sys
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"


def example_source() -> str:
    text = README.read_text(encoding="utf-8")
    start = text.index("```python\n") + len("```python\n")
    return text[start : text.index("```\n", start)]


if __name__ == "__main__":
    sys.stdout.write(example_source())
