"""README's (the repository's and the Python package's) and the guide's Python and C code blocks, run (the Rust ones are doctests of the
`docs` crate). Each ```python block runs in a fresh interpreter; a block whose first line is
`# needs a GPU` runs where CUDA is. Each ```c block compiles against the installed amso.h
(amso.get_include()), and the functions the pages define (`sum_float64`, `describe`) are called
on amso arrays and on what they must refuse. A ```sh block that starts with `cc ` builds its
page's C block, as written."""

from __future__ import annotations

import ctypes
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import amso
from test_capi import build

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", ROOT / "amso-python" / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
GPU_MARK = "# needs a GPU"
# A block whose first line is `# needs: jax, amso_user_example` runs where those import (the
# test command's environment has them; the lowest-NumPy environment has amso alone).
MODULES_MARK = re.compile(r"# needs: ([\w, ]+)\n")


def blocks(language: str) -> list[tuple[str, str]]:
    """(page:line, code) of every fenced block in `language` on every page."""
    return blocks_of(PAGES, language)


def blocks_of(pages: list[Path], language: str) -> list[tuple[str, str]]:
    """(page:line, code) of every fenced block in `language` on `pages`."""
    found = []
    for page in pages:
        text = page.read_text()
        for match in re.finditer(rf"^```{language}\n(.*?)^```$", text, flags=re.S | re.M):
            line = text.count("\n", 0, match.start()) + 1
            found.append((f"{page.relative_to(ROOT)}:{line}", match.group(1)))
    return found


PYTHON = blocks("python")
C = blocks("c")
BUILD_LINES = [(where, code.strip()) for where, code in blocks("sh") if code.startswith("cc ")]


def test_the_pages_have_blocks_to_run():
    assert len(PYTHON) >= 3 and len(C) >= 1, (PYTHON, C)


@pytest.mark.parametrize("where,code", PYTHON, ids=[where for where, _ in PYTHON])
def test_python_block_runs(where, code):
    if code.startswith(GPU_MARK) and not amso.cuda.is_available():
        pytest.skip("no CUDA driver here; the GPU suite runs on the GPU machine (scripts/gpu_suite.sh)")
    needs = MODULES_MARK.match(code)
    missing = [m.strip() for m in needs.group(1).split(",") if importlib.util.find_spec(m.strip()) is None] if needs else []
    if missing:
        pytest.skip(f"{where} needs {', '.join(missing)}, which this environment lacks")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, f"{where} failed:\n{result.stderr}"


@pytest.mark.parametrize("where,code", C, ids=[where for where, _ in C])
def test_c_block_compiles_and_sums(where, code, tmp_path):
    source = tmp_path / "block.c"
    source.write_text(code)
    library = ctypes.PyDLL(str(build(source, tmp_path / "block.so")))
    assert "sum_float64" in code or "describe" in code, f"{where}: a block defines a function the test calls"
    if "describe" in code:
        library.describe.argtypes, library.describe.restype = [ctypes.py_object], ctypes.c_int
        assert library.describe(amso.MemArray((2, 3), np.int32)) == 0
        assert library.describe(np.zeros(3)) == -1
    if "sum_float64" not in code:
        return
    function = library.sum_float64
    function.argtypes, function.restype = [ctypes.py_object, ctypes.POINTER(ctypes.c_double)], ctypes.c_int
    values = np.random.default_rng(3).normal(size=(5, 7))
    array = amso.MemArray(values.shape, np.float64)
    array.read_numpy_array(values)
    total = ctypes.c_double()
    assert function(array, ctypes.byref(total)) == 0
    assert total.value == pytest.approx(values.sum(), rel=1e-12)
    assert function(np.zeros(3), ctypes.byref(total)) == -1, "a NumPy array is not an amso array"
    assert function(amso.MemArray((3,), np.float32), ctypes.byref(total)) == -2, "float32 is not float64"


@pytest.mark.parametrize("where,line", BUILD_LINES, ids=[where for where, _ in BUILD_LINES])
def test_build_line_builds_its_pages_c_block(where, line, tmp_path):
    if shutil.which("cc") is None:
        pytest.skip("no C compiler")
    page, line_number = where.split(":")
    # The page's C block the line builds: the last one above it.
    code = [code for place, code in C if place.split(":")[0] == page and int(place.split(":")[1]) < int(line_number)][-1]
    (tmp_path / re.search(r"(\S+\.c)\b", line).group(1)).write_text(code)
    library = re.search(r"-o (\S+)$", line).group(1)
    assert library.split(".")[0] not in sys.stdlib_module_names, f"{where}: {library} shadows a standard module"
    # `python3` in the line is this interpreter (a virtual environment's bin folder comes first).
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    subprocess.run(["bash", "-c", line], cwd=tmp_path, env=env, check=True)
    built = ctypes.PyDLL(str(tmp_path / library))
    if "describe" in code:
        built.describe.argtypes, built.describe.restype = [ctypes.py_object], ctypes.c_int
        assert built.describe(amso.MemArray((2, 3), np.int32)) == 0


def test_the_extension_module_of_the_c_guide_builds_with_setuptools_and_the_include_path_only(tmp_path):
    """docs/c-abi.md's extension module and its setup.py, as written: setuptools builds it with
    amso.get_include() only (no link against amso's module), and its typed exports reach the
    bundled classes through the table amso_import() loads."""
    if shutil.which("cc") is None:
        pytest.skip("no C compiler")
    page = ROOT / "docs" / "c-abi.md"
    (module,) = [code for _, code in blocks_of([page], "c") if "PyInit_amso_demo" in code]
    (setup,) = [code for _, code in blocks_of([page], "python setup.py")]
    (tmp_path / "amso_demo.c").write_text(module)
    (tmp_path / "setup.py").write_text(setup)
    built = subprocess.run([sys.executable, "setup.py", "build_ext", "--inplace"], cwd=tmp_path, capture_output=True,
                           text=True, timeout=300)
    assert built.returncode == 0, built.stdout + built.stderr
    (library,) = tmp_path.glob("amso_demo*.so")
    linked = subprocess.run(["ldd", str(library)], capture_output=True, text=True).stdout if shutil.which("ldd") else ""
    assert "_amso" not in linked, linked
    check = """
import numpy as np, amso, amso_demo
values = np.random.default_rng(5).normal(size=(4, 6))
assert abs(amso_demo.total(amso.asarray(values)) - values.sum()) < 1e-9
assert amso_demo.total(amso.asarray([[1.0, 2.0], [3.0, 4.0]])) == 10.0
for wrong, message in [(amso.MemArray((2, 3), "float32"), "expected a 2-D float64 amso array"),
                       (np.zeros((2, 3)), "not an amso array")]:
    try:
        amso_demo.total(wrong)
    except TypeError as error:
        assert message in str(error), error
    else:
        raise AssertionError(f"{type(wrong)} was summed")
"""
    result = subprocess.run([sys.executable, "-c", check], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr


def test_the_declared_licenses_ship_their_texts():
    """Cargo.toml and pyproject.toml say MIT OR Apache-2.0: both texts are in the repository."""
    for manifest in (ROOT / "Cargo.toml", ROOT / "amso-python" / "pyproject.toml"):
        assert re.search(r'^license = "MIT OR Apache-2.0"$', manifest.read_text(), flags=re.M), manifest
    apache, mit = (ROOT / "LICENSE-APACHE").read_text(), (ROOT / "LICENSE-MIT").read_text()
    assert "Apache License" in apache and "Version 2.0, January 2004" in apache and "END OF TERMS AND CONDITIONS" in apache
    assert "Permission is hereby granted, free of charge" in mit and "The amso developers" in mit


def test_the_guide_states_the_number_of_compiled_classes():
    text = (ROOT / "docs" / "python.md").read_text()
    stated = re.search(r"every ndim from 1 to 8, and the record\s+`particle` and the vector `float32x4` at ndim 1: (\d+) classes", text)
    assert stated and int(stated.group(1)) == len(amso.supported()), stated
    ranks: dict[str, set[int]] = {}
    for name, ndim in amso.supported():
        ranks.setdefault(name, set()).add(ndim)
    assert ranks.pop("particle") == {1} and ranks.pop("float32x4") == {1}
    assert all(found == set(range(1, 9)) for found in ranks.values()), ranks


def test_the_performance_sections_state_the_classes_this_build_compiles():
    """README's and docs/performance.md's class count (from the scale report, which builds the
    spec as shipped) is the number of classes this build has. The wheel's size is checked against
    the built wheel by the test command's wheel check (`scripts/amso.py`)."""
    scale = json.loads((ROOT / "benchmarks" / "results" / "scale.json").read_text())
    assert scale["results"][-1]["instantiations"] == len(amso.supported())
    for doc in (ROOT / "README.md", ROOT / "docs" / "performance.md"):
        stated = re.search(r"The wheel's matrix \(.*?, (\d+) classes\) against the goals", doc.read_text())
        assert stated and int(stated.group(1)) == len(amso.supported()), (doc.name, stated)


def test_the_header_excerpts_are_the_generated_headers():
    """A ```text block of the guide that starts with a `generated/amso.h` or `amso.cuh` comment is
    an excerpt of that file, verbatim; one that starts with the spec's `records:` or a dtype's
    line, of specs/types.yaml."""
    excerpts = 0
    for where, code in blocks("text"):
        first, _, rest = code.partition("\n")
        if first == "records:" or first.startswith("  - {name: "):
            assert code in (ROOT / "specs" / "types.yaml").read_text(), f"{where}: not the spec's {first.strip()}"
            excerpts += 1
            continue
        named = re.fullmatch(r"(?:/\*|//) (generated/amso\.(?:h|cuh)) ?(?:\*/)?", first.strip())
        if named is None:
            continue
        assert rest in (ROOT / named.group(1)).read_text(), f"{where}: not in {named.group(1)}"
        excerpts += 1
    assert excerpts >= 4


def test_the_rust_guide_states_the_reports_range_against_rust_numpy():
    """docs/rust.md's cost range is the committed H200 report's: the lowest and highest
    amso / rust-numpy ratio of its table."""
    stated = re.search(r"costs\s+(\d\.\d\d)x to (\d\.\d\d)x rust-numpy's", (ROOT / "docs" / "rust.md").read_text())
    assert stated, "docs/rust.md no longer states the range"
    report = (ROOT / "benchmarks" / "results" / "h200" / "report.md").read_text()
    table = report.split("### Rust functions over NumPy arrays")[1].split("\n\n")[2]
    ratios = [float(row.split("|")[4]) for row in table.splitlines()[2:] if row.startswith("|")]
    assert len(ratios) >= 9
    assert (float(stated.group(1)), float(stated.group(2))) == (min(ratios), max(ratios))
    # The rows it names at the top are the report's two costliest.
    names = {"`from_vec2`": "from_vec2: 8 rows of 8 float64",
             "misaligned sum": "misaligned sum: 1000 float64 at an odd byte offset",
             "getter view": "getter view of a frozen class's 8x8 float64"}
    top = re.search(r"\(at the top: (.*?)\)", " ".join((ROOT / "docs" / "rust.md").read_text().split()))
    assert top, "docs/rust.md no longer names the costliest rows"
    rows = {row.split("|")[1].strip(): float(row.split("|")[4]) for row in table.splitlines()[2:] if row.startswith("|")}
    named = {row for phrase, row in names.items() if phrase in top.group(1)}
    assert set(sorted(rows, key=rows.get)[-2:]) == named, f"docs/rust.md names {named} at the top"
    # The no-op's ratio of executed instructions is the report's callgrind counts.
    instructions = json.loads((ROOT / "benchmarks" / "results" / "h200" / "instructions.json").read_text())
    noop = instructions["no-op, 1 argument"]
    text = " ".join((ROOT / "docs" / "rust.md").read_text().split())
    caveat = re.search(r"no-op over one argument at (\d\.\d\d)x rust-numpy's in executed instructions", text)
    assert caveat and float(caveat.group(1)) == round(noop["amso"] / noop["rust-numpy"], 2)


def test_the_guide_states_the_lowest_numpy_the_wheel_declares():
    """docs/python.md names the lowest NumPy of amso-python/pyproject.toml (the test command's
    lowest-NumPy environment runs the blocks there)."""
    declared = re.search(r'"numpy>=([0-9.]+)"', (ROOT / "amso-python" / "pyproject.toml").read_text())
    assert declared, "amso-python/pyproject.toml declares no lowest NumPy"
    assert f"NumPy {declared.group(1)} or newer" in (ROOT / "docs" / "python.md").read_text()
