"""The headers installed with the package: `amso.get_include()` (and `python -m amso`) gives the
folder of amso.h and amso.cuh, the same text as generated/; the C example, built by the line its
comment gives (only those headers' -I flags), reads amso arrays. scripts/amso.py runs this file
against the installed wheel and sdist too."""

from __future__ import annotations

import ctypes
import os
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import numpy as np
import pytest

import amso

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "c" / "amso_inspect.c"


def amso_module(*arguments: str) -> str:
    return subprocess.run([sys.executable, "-m", "amso", *arguments], capture_output=True, text=True, check=True).stdout


def test_get_include_holds_the_generated_headers():
    folder = Path(amso.get_include())
    assert folder.is_absolute() and folder.is_dir(), folder
    for name in ("amso.h", "amso.cuh"):
        assert (folder / name).read_bytes() == (ROOT / "generated" / name).read_bytes(), f"{name} differs from generated/"


def test_python_m_amso_prints_the_folder_and_the_flags():
    assert amso_module("--include").strip() == amso.get_include()
    flags = amso_module("--includes").split()
    assert flags[0] == f"-I{amso.get_include()}" and f"-I{sysconfig.get_path('include')}" in flags
    assert "--include" in amso_module()  # no option: the help


def test_the_c_example_builds_by_its_own_line_and_reads_an_array(tmp_path, capfd):
    if shutil.which("cc") is None:
        pytest.skip("no C compiler")
    line = re.search(r"^ \*   (cc .*)$", EXAMPLE.read_text(), flags=re.M).group(1)
    library = re.search(r"-o (\S+)$", line).group(1)
    assert Path(library).stem.split(".")[0] not in sys.stdlib_module_names, f"{library} shadows a standard module"
    shutil.copy(EXAMPLE, tmp_path)
    # `python3` in the line is this interpreter (a virtual environment's bin folder comes first).
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    subprocess.run(["bash", "-c", f"{line} -Wall -Wextra -Werror"], cwd=tmp_path, env=env, check=True)
    example = ctypes.PyDLL(str(tmp_path / library))
    example.inspect.argtypes, example.inspect.restype = [ctypes.py_object], ctypes.c_int
    assert example.inspect(amso.MemArray((2, 5), np.int32)) == 0
    assert example.inspect(np.zeros(2)) == 1
    out, err = capfd.readouterr()
    assert "ndim 2, shape (2, 5), dtype code 0 bits 32, device type 1" in out
    assert "not an amso array" in err
    # The report behind the name: Python started beside the library still finds its own modules.
    beside = subprocess.run([sys.executable, "-c", "import inspect; print(inspect.__file__)"], cwd=tmp_path,
                            capture_output=True, text=True)
    assert beside.returncode == 0 and beside.stdout.strip().endswith("inspect.py"), beside.stderr


def test_the_cuda_header_compiles_as_host_cpp_from_the_include_folder(tmp_path):
    compiler = shutil.which("c++") or shutil.which("g++")
    if compiler is None:
        pytest.skip("no C++ compiler")
    source = tmp_path / "use.cpp"
    source.write_text('#include "amso.cuh"\nint main() { float d[6] = {0}; amso::Indexer<float, 2> a{d, {2, 3}};\n'
                      "             return a.size() == 6 && a.offset(1, 2) == 5 ? 0 : 1; }\n")
    # CUDA's qualifiers defined away: the header's syntax and layout asserts, on the host.
    subprocess.run([compiler, "-std=c++17", "-D__host__=", "-D__device__=", f"-I{amso.get_include()}", str(source),
                    "-o", str(tmp_path / "use")], check=True)
    assert subprocess.run([str(tmp_path / "use")]).returncode == 0
