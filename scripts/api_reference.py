#!/usr/bin/env python3
"""Write docs/api.md, the Python API reference, from the installed package itself: every public
name of `amso` and its submodules with its signature and docstring, and every method and
property of `amso.MemArray`. tests/python/test_api_reference.py fails when the page is stale.

    .venv/bin/python scripts/api_reference.py          # rewrite docs/api.md
    .venv/bin/python scripts/api_reference.py --check  # exit 1 if it is stale
"""

from __future__ import annotations

import argparse
import inspect
import re
import sys
from pathlib import Path
from types import ModuleType

# This folder holds scripts/amso.py, which would shadow the package.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
import amso  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "api.md"
# Submodules and the names they export (their own public functions and classes).
MODULES = ["amso.cuda", "amso.allocators", "amso.dlpack", "amso.ops"]


def signature(obj: object, name: str) -> str:
    text = getattr(obj, "__text_signature__", None)
    if text:  # PyO3 functions: their declared signature, `$module`/`$self` dropped
        return name + text.replace("$module, ", "").replace("$self, ", "").replace("($module)", "()").replace("($self)", "()")
    if inspect.isclass(obj):
        return name  # a class without a declared signature is not called by users
    try:
        shown = str(inspect.signature(obj))  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return name + "(...)"
    # Annotations of `from __future__ import annotations` modules are strings: shown unquoted.
    return name + re.sub(r"(: |-> )'([^']*)'", r"\1\2", shown)


def doc(obj: object) -> str:
    text = inspect.getdoc(obj) or ""
    return text.strip()


def entry(title: str, obj: object) -> list[str]:
    lines = [f"### `{title}`", ""]
    text = doc(obj)
    if text:
        lines += [text, ""]
    return lines


def module_names(module: ModuleType) -> list[str]:
    exported = getattr(module, "__all__", None)
    if exported is not None:
        return list(exported)
    own = []
    for name, value in vars(module).items():
        if name.startswith("_") or isinstance(value, ModuleType):
            continue
        if getattr(value, "__module__", None) in (module.__name__, "amso._amso") or inspect.isclass(value):
            if inspect.isfunction(value) or inspect.isclass(value) or inspect.isbuiltin(value):
                own.append(name)
    return sorted(own)


def members(cls: type) -> list[str]:
    """Methods and properties of `cls` (its own and inherited from MemArrayBase), public ones
    and the protocol methods users call through Python's syntax."""
    protocol = {"__getitem__", "__setitem__", "__len__", "__iter__", "__array__", "__dlpack__", "__dlpack_device__",
                "__cuda_array_interface__", "__eq__", "__copy__", "__deepcopy__", "__reduce_ex__"}
    names = []
    for name in sorted(dir(cls)):
        if name.startswith("_") and name not in protocol:
            continue
        names.append(name)
    return names


def member_entry(cls: type, name: str) -> list[str]:
    value = inspect.getattr_static(cls, name, None)
    raw = getattr(cls, name)
    if isinstance(value, property) or type(value).__name__ == "getset_descriptor":
        return entry(f"MemArray.{name}", value) if doc(value) else [f"### `MemArray.{name}`", "", "(property)", ""]
    return entry(f"MemArray.{signature(raw, name)}", raw)


def render() -> str:
    out = [
        "# Python API reference",
        "",
        "Generated from the installed package by `scripts/api_reference.py` (the test command fails when",
        "this page is stale); the guide is [python.md](python.md). Types for checkers: `amso/_amso.pyi`",
        "and `amso/_memarray.pyi` (overloads that know the class `amso.MemArray(shape, dtype)` returns).",
        "",
        "## `amso`",
        "",
    ]
    for name in amso.__all__:
        value = getattr(amso, name)
        if isinstance(value, ModuleType) or name in ("MemArray", "MAX_NDIM", "__version__"):
            continue
        out += entry(signature(value, f"amso.{name}") if callable(value) else f"amso.{name}", value)
    out += ["### `amso.MAX_NDIM`", "", f"The most dimensions an amso array has: {amso.MAX_NDIM}.", ""]
    out += ["## `amso.MemArray`", ""]
    out += [doc(amso.MemArray), ""]
    out += [f"Every compiled class (`{amso.class_for((1, 1), 'float32').__name__}`, ...: "
            f"{len(amso.supported())} of them, `amso.supported()`) has these members:", ""]
    for name in members(amso.MemArrayBase):
        # The public attributes of NumPy's arrays the class lacks, one entry for all (which they
        # are depends on the NumPy installed).
        if type(inspect.getattr_static(amso.MemArrayBase, name, None)).__name__ != "_NumpyAttribute":
            out += member_entry(amso.MemArrayBase, name)
    out += ["### NumPy's other attributes", "",
            "Of the public attributes of NumPy's arrays that amso's classes lack, `fill` and NumPy's `sum`, `mean`, "
            "`T`, `reshape`, `astype`, `tolist` and the other reductions and views are answered over the host "
            "data as `np.asarray(a).<name>` answers them; the rest raise an `AttributeError` that names "
            "`np.asarray(a).<name>` (on device data, CuPy's and PyTorch's way).", ""]
    for module_name in MODULES:
        module = sys.modules[module_name] if module_name in sys.modules else __import__(module_name, fromlist=["_"])
        out += [f"## `{module_name}`", ""]
        if doc(module):
            out += [doc(module), ""]
        for name in module_names(module):
            if name not in vars(module):  # made on first use, for a library that may not be installed
                out += [f"### `{module_name}.{name}`", "", "Made on first use (the module's `__getattr__`; see above).", ""]
                continue
            value = getattr(module, name)
            out += entry(signature(value, f"{module_name}.{name}") if callable(value) else f"{module_name}.{name}", value)
    return "\n".join(line.rstrip() for line in out).rstrip() + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="exit 1 if docs/api.md is stale")
    args = parser.parse_args()
    text = render()
    if args.check:
        if not PAGE.exists() or PAGE.read_text() != text:
            sys.exit("docs/api.md is stale: run `.venv/bin/python scripts/api_reference.py`")
        return
    PAGE.write_text(text)


if __name__ == "__main__":
    main()
