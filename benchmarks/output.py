"""Where a benchmark's results go: `STEM.json` (the figures) and `STEM.md` (the table)."""

from __future__ import annotations

import json
from pathlib import Path


def write(out: Path, stem: str, report: dict, text: str) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{stem}.json").write_text(json.dumps(report, indent=2) + "\n")
    (out / f"{stem}.md").write_text(text)
