"""amso as type checkers see it: mypy and pyright, with amso installed, over what users write.

- Correct code (the held-out scripts in tests/typing/users, the Python blocks of the READMEs
  and the guide, examples/python) type-checks with no error from either checker.
- tests/typing/mistakes.py has one deliberate mistake per marked line: each checker reports
  an error on every marked line and on no other.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from test_docs import ROOT, blocks_of

TYPING = ROOT / "tests" / "typing"
GUIDE = [ROOT / "README.md", ROOT / "amso-python" / "README.md", ROOT / "docs" / "python.md"]
MARK = "# mistake:"


def correct_sources(folder: Path) -> list[Path]:
    """The held-out scripts, the examples, and each Python block of the pages as a file."""
    sources = sorted((TYPING / "users").glob("*.py")) + sorted((ROOT / "examples" / "python").rglob("*.py"))
    for where, code in blocks_of(GUIDE, "python"):
        name = re.sub(r"\W", "_", where) + ".py"
        (folder / name).write_text(code)
        sources.append(folder / name)
    return sources


def mypy(files: list[Path], cwd: Path) -> dict[str, set[int]]:
    """{file name: lines with an error}, from mypy."""
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--no-incremental", "--cache-dir", str(cwd / ".mypy"), "--python-executable",
         sys.executable, "--no-error-summary", "--show-error-codes", "--ignore-missing-imports", *map(str, files)],
        cwd=cwd, capture_output=True, text=True, timeout=600,
    )
    errors: dict[str, set[int]] = {}
    for line in result.stdout.splitlines():
        match = re.match(r"(.+?):(\d+): error: ", line)
        if match:
            errors.setdefault(Path(match.group(1)).name, set()).add(int(match.group(2)))
            MESSAGES.append(line)
    assert result.returncode in (0, 1) and (result.returncode == 0) == (not errors), result.stdout + result.stderr
    return errors


def pyright(files: list[Path], cwd: Path) -> dict[str, set[int]]:
    """{file name: lines with an error}, from pyright (lines counted from 1)."""
    # A package this machine lacks (torch in a GPU example) is not amso's to type; amso itself
    # is installed, and the mistakes test fails if a checker cannot see it.
    (cwd / "pyrightconfig.json").write_text(json.dumps({"reportMissingImports": "none", "reportMissingModuleSource": "none"}))
    result = subprocess.run(
        [sys.executable, "-m", "pyright", "--outputjson", "--pythonpath", sys.executable, *map(str, files)],
        cwd=cwd, capture_output=True, text=True, timeout=600,
    )
    report = json.loads(result.stdout)
    errors: dict[str, set[int]] = {}
    for diagnostic in report["generalDiagnostics"]:
        if diagnostic["severity"] == "error":
            line = diagnostic["range"]["start"]["line"] + 1
            errors.setdefault(Path(diagnostic["file"]).name, set()).add(line)
            MESSAGES.append(f"{Path(diagnostic['file']).name}:{line}: {diagnostic['message']}")
    return errors


MESSAGES: list[str] = []  # the last run's errors, for the failure's message


def shown(errors: dict[str, set[int]], folder: Path) -> str:
    return "\n".join(MESSAGES[-40:])


CHECKERS = {"mypy": mypy, "pyright": pyright}


@pytest.mark.parametrize("checker", CHECKERS)
def test_correct_code_type_checks_clean(checker, tmp_path):
    files = correct_sources(tmp_path)
    assert len(files) >= 8, files
    errors = CHECKERS[checker](files, tmp_path)
    assert errors == {}, f"{checker} reports errors in correct code:\n{shown(errors, tmp_path)}"


@pytest.mark.parametrize("checker", CHECKERS)
def test_every_deliberate_mistake_is_caught(checker, tmp_path):
    source = TYPING / "mistakes.py"
    marked = {number for number, line in enumerate(source.read_text().splitlines(), 1) if MARK in line}
    assert len(marked) >= 10
    errors = CHECKERS[checker]([source], tmp_path).get(source.name, set())
    assert not marked - errors, f"{checker} misses the mistakes on lines {sorted(marked - errors)}"
    assert not errors - marked, f"{checker} reports errors on correct lines {sorted(errors - marked)}"


def test_the_stubs_themselves_check_clean(tmp_path):
    """The generated stubs pass mypy with every `type: ignore` in them needed (stubtest, in the
    test command, checks them against the built module)."""
    package = ROOT / "amso-python" / "python" / "amso"
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--no-incremental", "--cache-dir", str(tmp_path), "--warn-unused-ignores",
         str(package / "_amso.pyi"), str(package / "_memarray.pyi")],
        cwd=tmp_path, capture_output=True, text=True, timeout=600,
    )
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("script", sorted((TYPING / "users").glob("*.py")), ids=lambda p: p.name)
def test_the_held_out_scripts_are_correct_code(script):
    """What the checkers must pass also runs: the scripts are correct, not merely typed."""
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr


WRONG_KEYWORDS = 'import amso\n\namso.MemArray((2, 2), "float32", device=0)\namso.empty((2,), "float32", pinnned=True)\n'


@pytest.mark.parametrize("checker", CHECKERS)
def test_a_wrong_keyword_is_one_short_error_naming_it(checker, tmp_path):
    """Not every one of the 220 overloads listed (mypy did, after its "did you mean"): one error per
    call, naming the keyword, in a few lines."""
    source = tmp_path / "wrong_keywords.py"
    source.write_text(WRONG_KEYWORDS)
    MESSAGES.clear()
    errors = CHECKERS[checker]([source], tmp_path)
    assert errors == {source.name: {3, 4}}, shown(errors, tmp_path)
    assert len(MESSAGES) == 2, MESSAGES
    for message, keyword in zip(MESSAGES, ["device", "pinnned"]):
        assert f'"{keyword}"' in message and "NotAKeyword" in message, message
        assert len(message.splitlines()) <= 6, message
    if checker == "mypy":  # docs/python.md's wording, and the whole output: the two errors, no notes
        assert 'Argument "device" to "MemArray" has incompatible type "int"; expected "NotAKeyword[Never]"' in MESSAGES[0]
        result = subprocess.run(
            [sys.executable, "-m", "mypy", "--no-incremental", "--cache-dir", str(tmp_path / ".mypy"), "--no-error-summary",
             str(source)], cwd=tmp_path, capture_output=True, text=True, timeout=600,
        )
        assert len(result.stdout.splitlines()) == 2, result.stdout


LIMITS = ('from typing import Any\n\nimport amso\n\nvalue: Any = 0\n'
          'amso.MemArray((2, 2), "float32", devce=value)\n'  # line 6: fits (Any fits any parameter)
          'amso.MemArray((2, 2), "float32", devce=None)\n')  # line 7: mypy lists the overloads


@pytest.mark.parametrize("checker", CHECKERS)
def test_the_wrong_keyword_limits_docs_python_states(checker, tmp_path):
    """docs/python.md's limits, as they are: a keyword whose value is typed `Any` is not caught by
    either checker; with `None`, mypy still lists the overloads (one error, many notes)."""
    source = tmp_path / "limits.py"
    source.write_text(LIMITS)
    MESSAGES.clear()
    errors = CHECKERS[checker]([source], tmp_path)
    assert errors == {source.name: {7}}, shown(errors, tmp_path)
    if checker == "mypy":
        result = subprocess.run(
            [sys.executable, "-m", "mypy", "--no-incremental", "--cache-dir", str(tmp_path / ".mypy"), "--no-error-summary",
             str(source)], cwd=tmp_path, capture_output=True, text=True, timeout=600,
        )
        assert "Possible overload variants" in result.stdout and len(result.stdout.splitlines()) > 100, result.stdout[:2000]
