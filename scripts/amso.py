#!/usr/bin/env python3
"""amso's two commands, for a fresh machine with only Rust and Python 3.

    python3 scripts/amso.py main   # build from the spec, install into .venv, run the quickstart
    python3 scripts/amso.py test   # every check and test: format, lint, staleness, Rust, UI, Python
    python3 scripts/amso.py wheels # release wheels in wheels/, for scripts/gpu_suite.sh on the GPU machine
    python3 scripts/amso.py bundled # after editing specs/types.yaml: regenerate, rebuild only `amso`

Both make (or reuse) a virtual environment in .venv with what they need.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VENV = ROOT / ".venv"
REQUIREMENTS = [
    "maturin>=1.9,<2", "numpy>=2.2.5", "pytest>=8", "ml_dtypes>=0.4", "apache-tvm-ffi>=0.1",
    "mpi4py>=4", "mpich", "dask[distributed]>=2024",  # the distributed examples' engines
    "twine>=6", "auditwheel>=6",  # the package checks
    "mypy>=1.18", "typing_extensions>=4.15",  # stubtest checks generated/_amso.pyi against the built module
    "pyright[nodejs]>=1.1.400",  # with mypy, type-checks users' code against the stubs (tests/typing)
    "setuptools>=65",  # builds docs/c-abi.md's extension module as its users build theirs
    "jax>=0.5",  # jax.jit over the example crate's ops through XLA's FFI (tests/python/test_ops.py; CPU wheels)
]
# The bundled module first (the others' tests import it), then the example crates and the
# benchmark crate that puts amso beside rust-numpy.
EXTENSIONS = [
    ROOT / "amso-python" / "Cargo.toml",
    ROOT / "examples" / "rust" / "user-crate" / "Cargo.toml",
    ROOT / "examples" / "rust" / "numpy-readme" / "Cargo.toml",
    ROOT / "benchmarks" / "peers" / "Cargo.toml",
]


def venv_bin(name: str) -> Path:
    return VENV / ("Scripts" if os.name == "nt" else "bin") / name


def run(*command: object, env: dict[str, str] | None = None, quiet: bool = False) -> None:
    shown = " ".join(str(part) for part in command)
    if len(shown) > 300:
        shown = shown[:300] + f" ... ({len(command)} arguments)"
    print(f"\n$ {shown}", flush=True)
    started = time.monotonic()
    output = subprocess.DEVNULL if quiet else None
    result = subprocess.run([str(part) for part in command], cwd=ROOT, env=env, stdout=output, stderr=output)
    if result.returncode != 0 and quiet:  # say what failed: run it again with its output
        subprocess.run([str(part) for part in command], cwd=ROOT, env=env)
    if result.returncode != 0:
        sys.exit(f"amso: `{shown}` failed with exit code {result.returncode}")
    print(f"  ({time.monotonic() - started:.1f} s)", flush=True)


def venv_env() -> dict[str, str]:
    env = dict(os.environ)
    env["VIRTUAL_ENV"] = str(VENV)
    env["PATH"] = f"{venv_bin('python').parent}{os.pathsep}{env.get('PATH', '')}"
    env.pop("PYTHONHOME", None)
    return env


def ensure_venv() -> None:
    """Create .venv with what the tests use (maturin, numpy, pytest, ml_dtypes, TVM-FFI, mpi4py
    with MPICH, Dask) unless it already has them."""
    marker = VENV / ".amso-requirements"
    wanted = "\n".join(REQUIREMENTS)
    if venv_bin("python").exists() and marker.exists() and marker.read_text() == wanted:
        return
    if not venv_bin("python").exists():
        run(sys.executable, "-m", "venv", VENV)
    run(venv_bin("python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", *REQUIREMENTS)
    marker.write_text(wanted)


def cargo(*args: str) -> None:
    if shutil.which("cargo") is None:
        sys.exit("amso: cargo not found; install Rust (https://rustup.rs) first")
    run("cargo", *args)


def generate(check: bool) -> None:
    """Write generated/ from specs/types.yaml (or, with check, fail if it is stale)."""
    cargo("run", "--quiet", "-p", "amso-codegen", "--bin", "amso-generate", "--", *(["--check"] if check else []))


def build_extensions() -> None:
    """Build and install the bundled module, the example crates and the benchmark crate into .venv."""
    for manifest in EXTENSIONS:
        run(venv_bin("python"), "-m", "maturin", "develop", "--release", "--quiet", "-m", manifest, env=venv_env())


def wheels() -> None:
    """Release wheels of amso, the example crates, the benchmark crate and the outside crate into
    wheels/ (for the GPU machine)."""
    ensure_venv()
    shutil.rmtree(ROOT / "wheels", ignore_errors=True)
    for manifest in EXTENSIONS:
        run(venv_bin("python"), "-m", "maturin", "build", "--release", "--quiet", "-m", manifest, "-o", ROOT / "wheels", env=venv_env())
    # The outside crate against the packaged crates (its GPU test: a kernel over its own dtype).
    run(venv_bin("python"), "-m", "maturin", "build", "--release", "--quiet", "-m", package_crates(), "-o",
        ROOT / "wheels", env=outside_env())
    # The runtime's Rust GPU test, as a binary the GPU machine runs without a Rust toolchain.
    built = subprocess.run(
        ["cargo", "test", "--release", "-p", "amso-runtime", "--features", "cuda", "--test", "cuda_design", "--no-run", "--message-format=json"],
        cwd=ROOT, capture_output=True, text=True, check=True,
    )
    for line in built.stdout.splitlines():
        message = json.loads(line)
        if message.get("reason") == "compiler-artifact" and message.get("executable") and message["target"]["name"] == "cuda_design":
            shutil.copy(message["executable"], ROOT / "wheels" / "cuda_design")


def quickstart(python: Path | None = None) -> None:
    run(python or venv_bin("python"), ROOT / "examples" / "python" / "quickstart.py", env=venv_env())


# The crates published to crates.io, and where the outside crate is built against them.
PUBLISHED = ["amso-codegen", "amso-macros", "amso-runtime"]
OUTSIDE = ROOT / "target" / "outside"


def package_crates() -> Path:
    """`cargo package` the published crates, each verified by building it, with every feature,
    from its own tarball; then unpack them and copy tests/outside-crate beside them with a
    `[patch.crates-io]` that points at the unpacked packages, as a registry would serve them.
    Returns the copy's manifest."""
    # Cargo verifies each package against the others through a local registry, and takes a
    # registry crate it built or unpacked before (same name and version) as current: start both
    # afresh, so that what is verified is what is packaged now.
    build = ROOT / "target" / "package-build"
    shutil.rmtree(build, ignore_errors=True)
    shutil.rmtree(ROOT / "target" / "package", ignore_errors=True)
    cargo_home = Path(os.environ.get("CARGO_HOME", Path.home() / ".cargo"))
    for stale in (cargo_home / "registry" / "src").glob("-*/amso-*"):  # local registries' unpacked crates
        shutil.rmtree(stale, ignore_errors=True)
    cargo("package", "--allow-dirty", "--all-features", "--target-dir", str(build),
          *(arg for name in PUBLISHED for arg in ("-p", name)))
    shutil.rmtree(OUTSIDE, ignore_errors=True)
    patches = []
    for name in PUBLISHED:
        archive = max((build / "package").glob(f"{name}-[0-9]*.crate"), key=lambda p: p.stat().st_mtime)
        with tarfile.open(archive) as tar:
            check_licenses_packed(archive.name, {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()})
            tar.extractall(OUTSIDE / "crates", **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
        unpacked = OUTSIDE / "crates" / archive.name.removesuffix(".crate")
        for file in unpacked.rglob("*"):  # packaged files carry old times; cargo must see them as new
            os.utime(file)
        patches.append(f'{name} = {{ path = "{unpacked.as_posix()}" }}')
    shutil.rmtree(build, ignore_errors=True)  # cargo's verifying builds, begun afresh on every run (1.2 GB)
    crate = OUTSIDE / "crate"
    shutil.copytree(ROOT / "tests" / "outside-crate", crate, ignore=shutil.ignore_patterns("target", "__pycache__"))
    manifest = crate / "Cargo.toml"
    manifest.write_text(manifest.read_text() + "\n[patch.crates-io]\n" + "\n".join(patches) + "\n")
    shutil.copy(ROOT / "Cargo.lock", crate / "Cargo.lock")  # the workspace's versions of shared dependencies
    return manifest


def outside_env() -> dict[str, str]:
    """The outside crate shares the workspace's build folder: its dependencies, built with the
    same profile, are not built twice (the amso crates are, from their packages)."""
    return dict(venv_env(), CARGO_TARGET_DIR=str(ROOT / "target"))


def outside_check() -> None:
    """A user crate outside the workspace, against the packaged crates by version: built and
    installed into .venv, then its tests."""
    manifest = package_crates()
    run(venv_bin("python"), "-m", "maturin", "develop", "--release", "--quiet", "-m", manifest, env=outside_env())
    run(venv_bin("python"), "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/outside-crate/tests",
        env=venv_env())


def sdist_check() -> None:
    """The Python package from source, as on a platform without a wheel: `maturin sdist` (with
    the C and CUDA headers), then `pip install` of it into a fresh virtual environment (pip
    builds it with Rust), the quickstart and the header tests there; `twine check` over the
    sdist and the wheel of `wheel_check`, and `auditwheel show` that the wheel's manylinux tag
    is the one its symbols allow."""
    out = ROOT / "target" / "sdist-check"
    shutil.rmtree(out, ignore_errors=True)
    run(venv_bin("python"), "-m", "maturin", "sdist", "-m", EXTENSIONS[0], "-o", out / "dist", env=venv_env())
    run(sys.executable, "-m", "venv", out / "venv")
    python = out / "venv" / ("Scripts" if os.name == "nt" else "bin") / "python"
    sdist = next((out / "dist").glob("amso-*.tar.gz"))
    check_headers_packed(sdist, "python/amso/include")
    # The shared build folder only spares rebuilding dependencies; every amso source comes from
    # the sdist (its crates sit at other paths, so cargo builds them anew).
    run(python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", sdist, env=outside_env())
    quickstart(python)
    run(python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "pytest>=8")
    run(python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/python/test_include.py")
    wheel = next((ROOT / "target" / "wheel-check" / "dist").glob("amso-*.whl"))
    run(venv_bin("python"), "-m", "twine", "check", "--strict", sdist, wheel)
    shown = subprocess.run([venv_bin("python"), "-m", "auditwheel", "show", wheel], capture_output=True, text=True)
    print(shown.stdout + shown.stderr, flush=True)
    claimed = wheel.name.removesuffix(".whl").split("-")[-1]
    if shown.returncode != 0 or f'platform tag: "{claimed}"' not in " ".join(shown.stdout.split()):
        sys.exit(f"amso: auditwheel does not find {wheel.name} consistent with its tag {claimed}")


# What `bundled` needs in .venv: the build tool and the package's own dependencies.
BUNDLED_REQUIREMENTS = ["maturin>=1.9,<2", "numpy>=2.2.5", "ml_dtypes>=0.4"]


def bundled_job() -> None:
    """After an edit of specs/types.yaml: regenerate generated/ and rebuild only the bundled
    module into .venv (editable), without the developer tools and example crates of `main`."""
    if not venv_bin("python").exists():
        run(sys.executable, "-m", "venv", VENV)
    missing = subprocess.run([venv_bin("python"), "-c", "import maturin, numpy, ml_dtypes"], capture_output=True).returncode
    if missing:
        run(venv_bin("python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", *BUNDLED_REQUIREMENTS)
    generate(check=False)
    run(venv_bin("python"), "-m", "maturin", "develop", "--release", "--quiet", "-m", EXTENSIONS[0], env=venv_env())
    run(venv_bin("python"), "-c", "import amso; print(f'amso: {len(amso.supported())} (dtype, ndim) pairs compiled')",
        env=venv_env())


def main_job() -> None:
    ensure_venv()
    generate(check=False)
    build_extensions()
    quickstart()


def test_job() -> None:
    # CI's disk may be small (a run once stopped with "No space left on device" in `cargo test`, at
    # 3 GB of debug build): there (`.ci/run` sets AMSO_LEAN=1; without it, a CI variable set true),
    # no incremental state or pip cache, debug builds with line tables only (backtraces keep their
    # files and lines), and each build folder goes once done.
    lean = os.environ.get("AMSO_LEAN", os.environ.get("CI", "")).lower() not in ("", "0", "false")
    if lean:
        os.environ.update(CARGO_INCREMENTAL="0", CARGO_PROFILE_DEV_DEBUG="line-tables-only", PIP_NO_CACHE_DIR="1")
    ensure_venv()
    cargo("fmt", "--all", "--", "--check")
    generate(check=True)
    cargo("clippy", "--workspace", "--all-targets", "--", "-D", "warnings")
    cargo("test", "--workspace")
    if lean:  # the later steps build with the release profile
        for done in ("debug", "tests"):  # the workspace's debug build, and trybuild's
            shutil.rmtree(ROOT / "target" / done, ignore_errors=True)
    build_extensions()
    quickstart()
    stubtest()
    run(venv_bin("python"), "-m", "pytest", "-q", "-rs", "tests/python", env=venv_env())  # -rs: say what was skipped (GPU tests here)
    outside_check()
    wheel_check()
    sdist_check()
    fuzz_smoke()


def stubtest() -> None:
    """The generated stubs against the built module, by mypy's stubtest: every name, signature
    and class the extension registers must match `generated/_amso.pyi`."""
    run(venv_bin("python"), "-m", "mypy.stubtest", "amso._amso", "--allowlist", ROOT / "tests" / "stubtest" / "allowlist.txt",
        env=venv_env())


# The wheel's size goal (issue 38): every dtype of the spec at ndim 1 to 8 in under 10 MB.
WHEEL_BYTES_GOAL = 10_000_000


def wheel_check() -> None:
    """The conventions and header tests against the built wheel (which must hold the C and CUDA
    headers), installed into a fresh virtual environment with nothing but its declared
    dependencies (and pytest): what `pip install amso` gives."""
    out = ROOT / "target" / "wheel-check"
    shutil.rmtree(out, ignore_errors=True)
    run(venv_bin("python"), "-m", "maturin", "build", "--release", "--quiet", "-m", EXTENSIONS[0], "-o", out / "dist",
        env=venv_env())
    run(sys.executable, "-m", "venv", out / "venv")
    python = out / "venv" / ("Scripts" if os.name == "nt" else "bin") / "python"
    wheel = next((out / "dist").glob("amso-*.whl"))
    check_headers_packed(wheel, "amso/include")
    if wheel.stat().st_size >= WHEEL_BYTES_GOAL:  # the full dtype x ndim matrix must stay this small
        sys.exit(f"amso: {wheel.name} is {wheel.stat().st_size} bytes, over the {WHEEL_BYTES_GOAL}-byte goal")
    print(f"  ({wheel.name}: {wheel.stat().st_size / 2**20:.2f} MiB, the spec as shipped)")
    check_stated_wheel_size(wheel)
    run(python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", wheel, "pytest>=8")
    run(python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/python/test_conventions.py", "tests/python/test_include.py")
    lowest_numpy_check(wheel, out)


def check_stated_wheel_size(wheel: Path) -> None:
    """README's and docs/performance.md's wheel size (from the scale report) is this build's, to
    the tenth of a MiB they state it in: a later change that grows the wheel makes the claim fail
    here until `scripts/scale.py` and `benchmarks/run.py --readme` restate it."""
    built = wheel.stat().st_size / 2**20
    for doc in (ROOT / "README.md", ROOT / "docs" / "performance.md"):
        stated = re.search(r"against the goals: wheel ([\d.]+) MiB", doc.read_text())
        if stated is None:
            sys.exit(f"amso: {doc.name} no longer states the wheel's size")
        if abs(float(stated.group(1)) - built) > 0.1:
            sys.exit(f"amso: {doc.name} states a {stated.group(1)} MiB wheel, and this build's is {built:.2f} MiB: "
                     "rerun scripts/scale.py --out benchmarks/results, then benchmarks/run.py --readme")


def lowest_numpy_check(wheel: Path, out: Path) -> None:
    """The README's and the guide's Python blocks against the lowest NumPy the wheel declares,
    in a second fresh environment: the declaration is a promise that they run there."""
    declared = re.search(r'"numpy>=([0-9.]+)"', (ROOT / "amso-python" / "pyproject.toml").read_text())
    if declared is None:
        sys.exit("amso: amso-python/pyproject.toml declares no lowest NumPy (numpy>=X)")
    lowest = declared.group(1)
    run(sys.executable, "-m", "venv", out / "lowest-numpy")
    python = out / "lowest-numpy" / ("Scripts" if os.name == "nt" else "bin") / "python"
    run(python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", wheel, f"numpy=={lowest}", "pytest>=8")
    run(python, "-c", f"import numpy; assert numpy.__version__ in ({lowest!r}, {lowest + '.0'!r}), numpy.__version__")
    run(python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/python/test_docs.py", "-k", "python_block_runs")


LICENSES = ("LICENSE-MIT", "LICENSE-APACHE")


def check_licenses_packed(name: str, members: dict[str, bytes]) -> None:
    """A package (wheel, sdist, crate) carries the texts of its `MIT OR Apache-2.0`: members
    ending in each LICENSE file's name, with the repository's text."""
    for license in LICENSES:
        packed = [path for path, data in members.items() if path.rsplit("/", 1)[-1] == license and data == (ROOT / license).read_bytes()]
        if not packed:
            sys.exit(f"amso: {name} lacks {license} (the text of its declared license); its members:\n  " + "\n  ".join(sorted(members)))
        print(f"  {name}: {packed[0]}", flush=True)


def check_headers_packed(archive: Path, folder: str) -> None:
    """`archive` (a wheel or an sdist) holds amso.h and amso.cuh in `folder`, with generated/'s
    text: the package's include/ has symlinks to them, and maturin packs what they point at."""
    if archive.suffix == ".whl":
        with zipfile.ZipFile(archive) as wheel:
            members = {name: wheel.read(name) for name in wheel.namelist()}
    else:  # an sdist's members sit under one `amso-VERSION/` folder
        with tarfile.open(archive) as sdist:
            members = {m.name.split("/", 1)[-1]: sdist.extractfile(m).read() for m in sdist.getmembers() if m.isfile()}
    check_licenses_packed(archive.name, members)
    for header in ("amso.h", "amso.cuh"):
        packed = members.get(f"{folder}/{header}")
        if packed != (ROOT / "generated" / header).read_bytes():
            listing = "\n  ".join(sorted(members))
            what = "no" if packed is None else f"another text than generated/{header} in"
            sys.exit(f"amso: {archive.name} has {what} {folder}/{header}; its members:\n  {listing}")
        print(f"  {archive.name}: {folder}/{header}, {len(packed)} bytes, as generated/{header}", flush=True)


FUZZ = ROOT / "fuzz"
# Random inputs per target in the smoke (each about 10 s or less on 2 cores).
FUZZ_TARGETS = {"spec": 3_000, "dlpack_import": 200_000, "pickle_rebuild": 1_000_000, "buffer_protocol": 10_000_000,
                "share_handle": 1_000_000}
# Inputs replayed besides each minimized corpus, whatever `cargo fuzz cmin` keeps: the spec
# itself and one file per kind of spec mistake (the codegen's error corpus).
FUZZ_SEEDS = {"spec": [ROOT / "specs" / "types.yaml", *sorted((ROOT / "amso-codegen" / "tests" / "corpus" / "spec").glob("*.yaml"))]}


def fuzz_smoke() -> None:
    """The fuzz targets built with the stable toolchain (no coverage guidance): replay every
    committed corpus input, then a fixed number of random ones. Coverage-guided runs:
    `python3 scripts/amso.py hardening` (nightly toolchain and cargo-fuzz)."""
    cargo("fmt", "--manifest-path", FUZZ / "Cargo.toml", "--", "--check")
    cargo("build", "--release", "--manifest-path", FUZZ / "Cargo.toml")
    for target, runs in FUZZ_TARGETS.items():
        binary = FUZZ / "target" / "release" / target
        inputs = sorted((FUZZ / "corpus" / target).iterdir()) + FUZZ_SEEDS.get(target, [])
        for start in range(0, len(inputs), 500):  # replay, in batches that fit a command line
            run(binary, *inputs[start : start + 500], quiet=True)
        run(binary, f"-runs={runs}", "-seed=1", "-max_len=4096", quiet=True)


def hardening_job() -> None:
    """The long runs behind a flag: Miri over the runtime's host unit tests (with and without
    the python feature), each fuzz target coverage-guided for AMSO_FUZZ_SECONDS (default 300),
    the 1,000,000-cycle soak.
    Needs the nightly toolchain with miri and rust-src, and cargo-fuzz."""
    ensure_venv()
    cargo("+nightly", "miri", "test", "-p", "amso-runtime", "--lib")
    # The Python layer's pure-Rust parts too (StateCell, strided layouts, the argument checks).
    cargo("+nightly", "miri", "test", "-p", "amso-runtime", "--lib", "--features", "python")
    # nalgebra's products over the views amso hands out (nalgebra issue #1616's calls).
    cargo("+nightly", "miri", "test", "-p", "amso-runtime", "--lib", "--features", "nalgebra", "--", "nalgebra")
    seconds = os.environ.get("AMSO_FUZZ_SECONDS", "300")
    env = dict(os.environ, RUSTC_BOOTSTRAP="1")
    for target in FUZZ_TARGETS:
        run("cargo", "+nightly", "fuzz", "run", "--fuzz-dir", FUZZ, "-O", target, FUZZ / "corpus" / target, "--",
            f"-max_total_time={seconds}", "-max_len=4096", env=env)
    build_extensions()
    run(venv_bin("python"), "tests/soak.py", "--cycles", "1000000", env=venv_env())
    asan_pytest()


def asan_pytest() -> None:
    """The Python suite over an AddressSanitizer build of the extension (nightly), with gcc's
    ASan runtime preloaded into the interpreter and Python's allocator set to malloc."""
    target = "x86_64-unknown-linux-gnu"
    env = dict(os.environ, RUSTFLAGS="-Zsanitizer=address", RUSTC_BOOTSTRAP="1")
    run("cargo", "+nightly", "build", "-p", "amso-python", "--target", target, "--target-dir", ROOT / "target" / "asan",
        env=env)
    site = ROOT / "target" / "asan" / "site"
    package = site / "amso"
    shutil.rmtree(site, ignore_errors=True)
    shutil.copytree(ROOT / "amso-python" / "python" / "amso", package, symlinks=False)
    shutil.copy(ROOT / "target" / "asan" / target / "debug" / "lib_amso.so", package / "_amso.abi3.so")
    runtime = subprocess.run(["gcc", "-print-file-name=libasan.so"], capture_output=True, text=True).stdout.strip()
    env = dict(venv_env(), LD_PRELOAD=runtime, PYTHONMALLOC="malloc", PYTHONPATH=str(site),
               ASAN_OPTIONS="detect_leaks=0:halt_on_error=1:allocator_may_return_null=1")
    run(venv_bin("python"), "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/python", env=env)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("job", choices=["main", "test", "generate", "bundled", "wheels", "hardening"], help="what to run")
    return parser.parse_args()


if __name__ == "__main__":
    job = parse_args().job
    {"main": main_job, "test": test_job, "generate": lambda: generate(check=False), "bundled": bundled_job, "wheels": wheels,
     "hardening": hardening_job}[job]()
    print(f"\namso: {job} done")
