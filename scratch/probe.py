import cupy, re
h = open("generated/amso.cuh").read()
h = "\n".join(l for l in h.splitlines() if "static_assert(sizeof" not in l and "__builtin_offsetof" not in l)
src = h + r'''
extern "C" __global__ void probe(unsigned long long *out) {
  out[0] = sizeof(amso::Indexer<double, 3>); out[1] = sizeof(amso::Indexer<uint8_t, 1>);
  out[2] = sizeof(uint64_t); out[3] = sizeof(void*); out[4] = alignof(amso::Indexer<double,3>);
  amso::Indexer<float, 2> x; out[5] = (unsigned long long)((char*)&x.shape - (char*)&x);
}'''
for opts in [("--std=c++17",), ("--std=c++17", "--include-path=/usr/local/cuda/include")]:
    try:
        k = cupy.RawKernel(src, "probe", options=opts, backend="nvrtc")
        out = cupy.zeros(6, dtype=cupy.uint64); k((1,), (1,), (out,)); print(opts, out.get())
    except Exception as e:
        print(opts, "ERR", str(e)[:1500])
