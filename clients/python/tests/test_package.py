"""What `pip install` / PyPI would get: the sdist and the wheel built with `python -m build`.

Shipped: the package (with py.typed), README, LICENSE (identical to the repository's), the
BSD-3-Clause license expression. Not shipped: the tests (they need this repository: the
shared vectors, the module .so, redis-server) and the conformance elector (it drives a private
hook for its negative control)."""

from __future__ import annotations

import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

CLIENT_DIR = Path(__file__).resolve().parent.parent
REPO = CLIENT_DIR.parent.parent


def test_sdist_and_wheel_contents(tmp_path: Path) -> None:
    out = tmp_path / "dist"
    r = subprocess.run(
        [sys.executable, "-m", "build", "--outdir", str(out), str(CLIENT_DIR)],
        capture_output=True, text=True, timeout=600,
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    (wheel,) = out.glob("*.whl")
    (sdist,) = out.glob("*.tar.gz")
    package = sorted(p.name for p in (CLIENT_DIR / "redis_lease").iterdir() if p.suffix == ".py" or p.name == "py.typed")
    assert "py.typed" in package and "conformance.py" not in package

    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        info = next(n for n in names if n.endswith(".dist-info/METADATA"))
        meta = z.read(info).decode()
        lic = next(n for n in names if n.endswith(".dist-info/licenses/LICENSE"))
        assert z.read(lic) == (REPO / "LICENSE").read_bytes()
    assert sorted(n.split("/", 1)[1] for n in names if n.startswith("redis_lease/")) == package
    assert not [n for n in names if not n.startswith(("redis_lease/", "redis_lease-"))], names
    assert not [n for n in names if "conformance" in n], names  # the adapter stays in tests/
    assert "License-Expression: BSD-3-Clause" in meta
    assert "Description-Content-Type: text/markdown" in meta and "# redis-lease for Python" in meta

    with tarfile.open(sdist) as t:
        members = [m.split("/", 1)[1] for m in t.getnames() if "/" in m]
    top = {m.split("/", 1)[0] for m in members}
    assert {"README.md", "LICENSE", "pyproject.toml", "redis_lease"} <= top
    assert not {"tests", "build", ".venv", "test.sh", "conformance.sh", "requirements-dev.txt"} & top, sorted(top)
    assert not [m for m in members if "conformance" in m], members
    assert sorted(m.split("/", 1)[1] for m in members if m.startswith("redis_lease/")) == package
    # The copy setuptools can ship is the repository's license, byte for byte.
    assert (CLIENT_DIR / "LICENSE").read_bytes() == (REPO / "LICENSE").read_bytes()
