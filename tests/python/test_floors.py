"""The house rules of amso-runtime (`amso-runtime/floors.txt`, checked by `scripts/floors.py`):
the real tree passes, and a copy with one planted violation of each rule fails, naming it."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "floors.py"
TABLE = ROOT / "amso-runtime" / "floors.txt"


def floors(src: Path = ROOT / "amso-runtime" / "src", table: Path = TABLE) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, SCRIPT, "--src", src, "--table", table], capture_output=True, text=True)


def test_every_import_of_the_runtime_points_down_or_within_a_declared_pair():
    done = floors()
    assert done.returncode == 0, done.stdout + done.stderr
    assert "every one pointing down" in done.stdout


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    copy = tmp_path / "src"
    shutil.copytree(ROOT / "amso-runtime" / "src", copy)
    return copy


def plant(tree: Path, file: str, line: str) -> None:
    path = tree / file
    path.write_text(path.read_text() + "\n" + line + "\n")


def test_an_import_that_points_up_fails(tree: Path):
    # error.rs is a leaf (floor 1); the Python wing is floor 11.
    plant(tree, "error.rs", "#[allow(unused_imports)]\nuse crate::python::base::array::MemArrayBase;")
    done = floors(tree)
    assert done.returncode == 1
    assert "error.rs (floor 1) imports python/base/array.rs (floor 8)" in done.stdout


def test_a_path_written_in_code_counts_as_an_import(tree: Path):
    plant(tree, "gil.rs", "fn planted() -> usize { crate::shape::MAX_NDIM }")
    done = floors(tree)
    assert done.returncode == 1
    assert "gil.rs (floor 1) imports shape.rs (floor 3)" in done.stdout


def test_a_circle_within_one_floor_fails_unless_it_is_a_declared_pair(tree: Path):
    # Two files of cuda/ (floor 4) that do not import each other today.
    plant(tree, "cuda/kernel.rs", "#[allow(unused_imports)]\nuse super::ipc;")
    plant(tree, "cuda/ipc.rs", "#[allow(unused_imports)]\nuse super::kernel;")
    done = floors(tree)
    assert done.returncode == 1
    assert "circle of 2 files: cuda/ipc.rs, cuda/kernel.rs" in done.stdout
    # Declared, the same pair passes.
    table = tree.parent / "floors.txt"
    table.write_text(TABLE.read_text() + "pair cuda/kernel.rs cuda/ipc.rs\n")
    assert floors(tree, table).returncode == 0


def test_a_test_module_may_import_anything(tree: Path):
    plant(tree, "error.rs", "#[cfg(test)]\nmod planted {\n    use crate::object::ArrayType;\n}")
    assert floors(tree).returncode == 0


def test_a_file_over_600_lines_fails(tree: Path):
    plant(tree, "lock.rs", "\n" * 600)
    done = floors(tree)
    assert done.returncode == 1
    assert "lock.rs:" in done.stdout and "over the limit of 600" in done.stdout


def test_a_file_the_table_does_not_place_fails(tree: Path):
    (tree / "unplaced.rs").write_text("//! A new file.\n")
    done = floors(tree)
    assert done.returncode == 1
    assert "unplaced.rs: not in the floors table" in done.stdout


def test_a_malformed_table_line_is_refused(tmp_path: Path):
    table = tmp_path / "floors.txt"
    table.write_text(TABLE.read_text() + "ground error.rs\n")
    done = floors(table=table)
    assert done.returncode != 0
    assert "expected 'FLOOR PATH...' or 'pair A B'" in done.stderr
