"""The trust boundary between amso's runtime and `sys.modules`, which any Python code may edit,
restore or patch (`unittest.mock.patch.dict(sys.modules)`, stand-in modules in tests):

- the borrow registry every extension module's copy of the runtime shares (`process.rs`) stays
  one table however `sys.modules` is edited between imports, so two extensions still cannot
  both hold one array mutably, and a second table is refused by name.

Each test runs in a fresh interpreter: the registry is joined once per process."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("amso_rust_ext")
pytest.importorskip("amso_peers")
pytest.importorskip("amso_user_example")


def run_python(*parts: str) -> subprocess.CompletedProcess[str]:
    """Run the script the parts make, each dedented on its own, in a fresh interpreter."""
    script = "\n".join(textwrap.dedent(part) for part in parts)
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)


def assert_printed(done: subprocess.CompletedProcess[str], *lines: str) -> None:
    """The script exited normally (not by a signal: a crash is a failure too) and printed `lines`."""
    assert done.returncode == 0, f"exit status {done.returncode}\nstdout:\n{done.stdout}\nstderr:\n{done.stderr}"
    assert done.stdout.splitlines() == list(lines), done.stderr


# --- one borrow registry per process ---

# `ue` holds x for writing while `ext` and `peers` (two more crates, each with its own copy of
# the runtime) are asked for it: every request refused, nothing written.
ALIASING_REFUSED = """
    def refused(call):
        try:
            call()
        except BufferError as error:
            assert "borrowed for writing" in str(error), error
            return
        raise SystemExit("aliased: two extension modules held x at once, one of them mutably")

    x = np.arange(8.0)
    refused(lambda: ue.while_writing(x, lambda: ext.mult(2.0, x)))
    refused(lambda: ue.while_writing(x[2:5], lambda: ext.axpy(1.0, x, np.ones(8))))
    refused(lambda: ue.while_writing(x[::-1], lambda: peers.amso_noop1(x.view(np.float32).reshape(4, 4))))
    assert (x == np.arange(8.0)).all(), x
    print("refused")
"""

# The first extension to join the registry does so inside the patch: amso_user_example joins
# when it registers its classes at import, amso_rust_ext at its first typed argument.
JOINED_INSIDE = {
    "user crate": "import amso_user_example as ue",
    "numpy-readme crate": "import amso_rust_ext as ext; ext.mult(1.0, np.ones(2))",
}


@pytest.mark.parametrize("inside", JOINED_INSIDE)
def test_an_extension_joined_inside_patched_sys_modules_shares_borrows_with_later_ones(inside):
    """`mock.patch.dict(sys.modules)` removes, on exit, the entries made inside it: the
    registry the first extension published there must outlive it."""
    done = run_python(f"""
        import sys, unittest.mock
        import numpy as np
        with unittest.mock.patch.dict(sys.modules):
            {JOINED_INSIDE[inside]}
        import amso_user_example as ue, amso_rust_ext as ext, amso_peers as peers
    """, ALIASING_REFUSED)
    assert_printed(done, "refused")


def test_deleting_the_amso_entries_of_sys_modules_between_imports_keeps_one_registry():
    done = run_python("""
        import sys
        import numpy as np
        import amso_user_example as ue
        removed = [name for name in sys.modules if name.startswith("_amso")]
        assert removed, sorted(sys.modules)
        for name in removed:
            del sys.modules[name]
        import amso_rust_ext as ext, amso_peers as peers
    """, ALIASING_REFUSED)
    assert_printed(done, "refused")


def test_a_second_table_in_sys_modules_is_refused_by_name():
    """What an older amso, which looks only in `sys.modules`, publishes when it loads after the
    entry was deleted: a second table. A copy that then joins refuses to pick one (it would be
    split from the other's users), naming both; the first table's users go on working."""
    done = run_python("""
        import ctypes, sys, types
        import numpy as np
        import amso_user_example as ue
        del sys.modules["_amso_process_v3"]
        # Never called: a table of NULL functions (an old runtime that joined it would crash).
        functions = (ctypes.c_void_p * 8)()
        name = ctypes.create_string_buffer(b"_amso_process_v3.table")
        capsule_new = ctypes.pythonapi.PyCapsule_New
        capsule_new.restype = ctypes.py_object
        capsule_new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
        home = types.ModuleType("_amso_process_v3")
        home.table = capsule_new(ctypes.addressof(functions), name, None)
        sys.modules["_amso_process_v3"] = home
        import amso_rust_ext as ext
        x = np.arange(4.0)
        try:
            ext.mult(2.0, x)
        except ImportError as error:
            text = str(error)
            assert "two tables" in text and "sys.modules['_amso_process_v3']" in text, text
            assert "interpreter" in text, text
        else:
            raise SystemExit("joined one of two tables")
        assert (x == np.arange(4.0)).all(), x
        ue.while_writing(x, lambda: None)  # the first table's users are unaffected
        print("refused")
    """)
    assert_printed(done, "refused")
