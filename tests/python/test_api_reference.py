"""docs/api.md is the installed package's own account of itself: regenerated, it is unchanged."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_api_reference_is_current():
    result = subprocess.run([sys.executable, str(ROOT / "scripts" / "api_reference.py"), "--check"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_api_reference_names_every_public_name():
    import amso

    page = (ROOT / "docs" / "api.md").read_text()
    for name in amso.__all__:
        assert f"amso.{name}" in page or name == "__version__", name
    for method in ("move_memory", "to_numpy", "read_numpy_array", "share", "get_dlpack", "copy"):
        assert f"### `MemArray.{method}(" in page, method
