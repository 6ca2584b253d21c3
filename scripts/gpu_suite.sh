#!/usr/bin/env bash
# Runs on the GPU machine over a copy of the repository with the wheels built here in wheels/:
#   here:   python3 scripts/amso.py wheels      (builds wheels/ for amso and the user-crate example)
#   there:  bash scripts/gpu_suite.sh [pytest|sanitizer|stacks|soak|bench|report|pool|nvrtc12|all]
# (all = pytest, sanitizer, soak; bench and report are separate runs)
# Installs the wheels into /tmp/site and writes logs and reports to $OUT (or results/).
set -uo pipefail
cd "$(dirname "$0")/.."
what=${1:-all}
out=${OUT:-results}
mkdir -p "$out"
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site wheels/*.whl || exit 1
# Dask and its dependencies, where carried (the GPU machine has none): wheels_extra/dask/.
if compgen -G "wheels_extra/dask/*.whl" > /dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site wheels_extra/dask/*.whl || exit 1
fi
# TVM-FFI, where carried (pip download apache-tvm-ffi, DEVELOPERS.md).
if compgen -G "wheels_extra/apache_tvm_ffi-*.whl" > /dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site wheels_extra/apache_tvm_ffi-*.whl || exit 1
fi
# The allocator plug-ins' peers, where carried (wheels_extra/pool/: numba-cuda, numba, RMM).
if compgen -G "wheels_extra/pool/*.whl" > /dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site wheels_extra/pool/*.whl || exit 1
fi
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
status=0
if [[ $what == pytest || $what == all ]]; then
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$out/gpu.txt"
  python3 -c 'import torch, cupy, jax, numba, numpy; print("torch", torch.__version__, "cupy", cupy.__version__, "jax", jax.__version__, "numba", numba.__version__, "numpy", numpy.__version__)' | tee -a "$out/gpu.txt"
  # (Type checking, tests/python/test_typing.py, needs no GPU and runs in the test command,
  # where mypy and pyright are installed; the GPU machine has neither.)
  python3 -m pytest -q -rs -p no:cacheprovider tests/python tests/outside-crate/tests \
    --ignore=tests/python/test_typing.py 2>&1 | tee "$out/pytest.log"
  status=$((status | ${PIPESTATUS[0]}))
  if [[ -x wheels/cuda_design ]]; then
    wheels/cuda_design --nocapture 2>&1 | tee "$out/rust_cuda.log"
    status=$((status | ${PIPESTATUS[0]}))
  fi
fi
if [[ $what == sanitizer || $what == all ]]; then
  # memcheck over amso's own device tests (transfers, kernels, exports, imports, the corpus,
  # memory management, threads; the peers' suites are too slow under it); racecheck over the
  # kernel and transfer tests. API errors are not reported: the corpus and OOM tests provoke
  # them on purpose (a host pointer given to cuPointerGetAttribute, an allocation too large).
  # Left out of memcheck: the out-of-device-memory test, whose allocations of nearly all the
  # device's memory memcheck cannot shadow.
  compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 9 python3 -m pytest -q -p no:cacheprovider \
    tests/python/test_cuda.py tests/python/test_corpus.py tests/python/test_kernels.py \
    tests/python/test_memory.py tests/python/test_threads.py tests/python/test_graphs.py \
    tests/python/test_low_precision.py tests/python/test_vectors.py tests/python/test_record_arrays.py \
    -k "not out_of_device_memory" \
    2>&1 | tail -n 25 | tee "$out/memcheck.log"
  status=$((status | ${PIPESTATUS[0]}))
  # The allocator plug-ins (each test a child process, which compute-sanitizer follows).
  compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 9 python3 -m pytest -q -p no:cacheprovider \
    tests/python/test_pool.py tests/python/test_pool_streams.py \
    -k "not four_libraries and not random_workload and not out_of_memory and not impossible" \
    2>&1 | tail -n 25 | tee "$out/memcheck_pool.log"
  status=$((status | ${PIPESTATUS[0]}))
  # The graph ops (issue 58): their kernels on XLA's and torch's streams, eagerly and compiled.
  # Left out: the reduce-overhead test. Under memcheck, PyTorch's cudagraph trees refuse the
  # recording ("tensor(s) in the cudagraph pool not tracked as outputs", 0 memcheck errors) for
  # a custom op written in PyTorch alone as for amso's; tests/reduce_overhead_case.py runs
  # both, without and with the sanitizer, and its lines below show it.
  : > "$out/memcheck_ops.log"
  for which in peer amso; do
    python3 tests/reduce_overhead_case.py "$which" 2>&1 | tail -n 1 | sed "s/^/plain: /" | tee -a "$out/memcheck_ops.log"
    compute-sanitizer --tool memcheck --report-api-errors no python3 tests/reduce_overhead_case.py "$which" 2>&1 \
      | grep -E "replayed|RuntimeError: Detected|ERROR SUMMARY" | sed "s/^/memcheck, $which: /" | tee -a "$out/memcheck_ops.log"
  done
  compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 9 python3 -m pytest -q -p no:cacheprovider \
    tests/python/test_ops.py -k "(cuda or torch) and not reduce_overhead" \
    2>&1 | tail -n 25 | tee -a "$out/memcheck_ops.log"
  status=$((status | ${PIPESTATUS[0]}))
  # Cross-stream reuse of the pool's blocks (a block freed under a running kernel) under racecheck.
  compute-sanitizer --tool racecheck --error-exitcode 9 python3 -m pytest -q -p no:cacheprovider \
    tests/python/test_pool_streams.py -k "never_reaches or stays_on_its_stream or never_waits or reused_behind" \
    2>&1 | tail -n 25 | tee "$out/racecheck_pool.log"
  status=$((status | ${PIPESTATUS[0]}))
  compute-sanitizer --tool racecheck --error-exitcode 9 python3 -m pytest -q -p no:cacheprovider \
    tests/python/test_cuda.py tests/python/test_kernels.py -k "add_index or design_sequence or pinned or move or kernel or deposit" \
    2>&1 | tail -n 25 | tee "$out/racecheck.log"
  status=$((status | ${PIPESTATUS[0]}))
fi
if [[ $what == stacks ]]; then
  # The pair of tests that hung under memcheck while a thread held the GIL inside the driver
  # (PyTorch's allocator test, then the thread test that switches allocators), three times
  # under memcheck, while py-spy (carried in wheels_extra/) dumps every thread's Python and
  # native stack twice a second. A thread marked "+gil" inside libcuda is a violation.
  : > "$out/stacks.txt"
  pyspy=${PYSPY:-}
  if [[ -z $pyspy ]]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/pyspy wheels_extra/py_spy-*.whl || exit 1
    pyspy=$(find /tmp/pyspy -name py-spy -type f | head -n 1)
  fi
  [[ -x $pyspy ]] || { echo "stacks: no py-spy (carry its wheel in wheels_extra/)"; exit 1; }
  for round in 1 2 3; do
    compute-sanitizer --tool memcheck --report-api-errors no python3 -m pytest -q -p no:cacheprovider \
      tests/python/test_memory.py tests/python/test_threads.py -k "torch_adapter_uses_torchs_pool or switches_it" \
      >> "$out/stacks_run.log" 2>&1 &
    sanitizer=$!
    while kill -0 "$sanitizer" 2>/dev/null; do
      sleep 0.5
      for pid in $(pgrep -f "python3 -m pytest -q -p no:cacheprovider tests/python/test_memory.py"); do
        [[ $pid == "$sanitizer" ]] && continue  # compute-sanitizer itself, whose command line holds the same words
        "$pyspy" dump --native --pid "$pid" >> "$out/stacks.txt" 2>&1 || true
      done
    done
    wait "$sanitizer"
    status=$((status | $?))
  done
  grep -E "passed|failed|ERROR SUMMARY" "$out/stacks_run.log"
  python3 - "$out/stacks.txt" <<'PY'
import re, sys
dumps = open(sys.argv[1]).read()
threads = [t for t in re.split(r"\n(?=Thread )", dumps) if t.startswith("Thread ")]
holding = [t for t in threads if "+gil" in t.split("\n", 1)[0]]
in_driver = [t for t in threads if "libcuda" in t]
violations = [t for t in holding if "libcuda" in t]
print(f"py-spy: {dumps.count('Process ')} dumps, {len(threads)} thread stacks, {len(in_driver)} inside libcuda, "
      f"{len(holding)} holding the GIL, {len(violations)} holding the GIL inside libcuda")
for t in (violations or in_driver)[:2]:
    print(t[:1500])
if not threads:
    print("no stacks were taken: the check saw nothing")
sys.exit(1 if violations or not threads else 0)
PY
  status=$((status | $?))
fi
if [[ $what == soak || $what == all ]]; then
  python3 tests/soak.py --cycles 1000000 2>&1 | tee "$out/soak.log"
  status=$((status | ${PIPESTATUS[0]}))
fi
if [[ $what == nvrtc12 ]]; then
  # The kernel tests against NVRTC 12 from PyPI (nvidia-cuda-nvrtc-cu12, carried as
  # wheels_extra/nvrtc12.tar.xz): CUDA 13's libnvrtc is hidden in a private mount namespace.
  mkdir -p /tmp/nvrtc12 && tar xJf wheels_extra/nvrtc12.tar.xz -C /tmp/nvrtc12
  unshare -m bash -c '
    for lib in $(ldconfig -p | grep -o "/[^ ]*libnvrtc\.so[.0-9]*$" | sort -u) /usr/local/cuda*/lib64/libnvrtc.so*; do
      [[ -e $lib && $lib != *.so.12* ]] && mount --bind /dev/null "$lib"
    done
    export LD_LIBRARY_PATH=/tmp/nvrtc12/nvidia/cuda_nvrtc/lib
    python3 -c "import amso, numpy as np; a = amso.MemArray(4, np.float32, on_device=True); a.add_index_tuple(); \
print(\"libnvrtc loaded:\", sorted({l.split()[-1] for l in open(\"/proc/self/maps\") if \"nvrtc\" in l}))"
    python3 -m pytest -q -p no:cacheprovider tests/python/test_kernels.py tests/python/test_cuda.py -k "kernel or add_index or deposit"
    [[ -x wheels/cuda_design ]] && wheels/cuda_design --nocapture
  ' 2>&1 | tee "$out/nvrtc12.log"
  status=$((status | ${PIPESTATUS[0]}))
fi
if [[ $what == bench ]]; then
  python3 benchmarks/bench_cuda.py --out "$out" 2>&1 | tee "$out/bench.log"
  status=$((status | ${PIPESTATUS[0]}))
  python3 benchmarks/bench_capi.py --out "$out" 2>&1 | tee -a "$out/bench.log"
  status=$((status | ${PIPESTATUS[0]}))
  python3 benchmarks/bench_alloc.py --out "$out" 2>&1 | tee -a "$out/bench.log"
  status=$((status | ${PIPESTATUS[0]}))
  python3 benchmarks/bench_cic.py --out "$out" 2>&1 | tee -a "$out/bench.log"
  status=$((status | ${PIPESTATUS[0]}))
fi
if [[ $what == pool ]]; then
  # The pool's tests (each case a fresh process) and its benchmark table alone.
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$out/gpu.txt"
  python3 -m pytest -q -rs -p no:cacheprovider tests/python/test_pool.py tests/python/test_pool_streams.py \
    tests/python/test_memory.py 2>&1 | tee "$out/pool_pytest.log"
  status=$((status | ${PIPESTATUS[0]}))
  (cd benchmarks && python3 bench_pool.py > "$out/bench_pool.txt" 2>&1)
  status=$((status | $?))
fi
if [[ $what == report ]]; then
  python3 benchmarks/run.py --out "$out/report" 2>&1 | tee "$out/report.log"
  status=$((status | ${PIPESTATUS[0]}))
fi
exit $status
