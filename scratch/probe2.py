import cupy
h = open("generated/amso.cuh").read()
base = "\n".join(l for l in h.splitlines() if "static_assert(sizeof" not in l and "__builtin_offsetof" not in l)
variants = {
 "inside-ns": base.replace("}  // namespace amso", 'static_assert(sizeof(Indexer<double, 3>) == 32, "x");\n}  // namespace amso'),
 "outside-ns": base + '\nstatic_assert(sizeof(amso::Indexer<double, 3>) == 32, "x");\n',
 "outside-explicit-inst": base + '\ntemplate struct amso::Indexer<double, 3>;\nstatic_assert(sizeof(amso::Indexer<double, 3>) == 32, "x");\n',
 "in-kernel": base + '\n__device__ inline void amso_layout_check() { static_assert(sizeof(amso::Indexer<double, 3>) == 32, "x"); }\n',
 "offsetof-outside": base + '\nstatic_assert(__builtin_offsetof(amso::Indexer<float, 2>, shape) == 8, "y");\n',
 "offsetof-alias": base + '\ntypedef amso::Indexer<float, 2> amso_indexer_f2;\nstatic_assert(__builtin_offsetof(amso_indexer_f2, shape) == 8, "y");\n',
 "no-member-asserts": base.replace('static_assert(N >= 1 && N <= 8, "amso arrays have 1 to 8 dimensions");', '') + '\nstatic_assert(sizeof(amso::Indexer<double, 3>) == 32, "x");\n',
}
for name, h2 in variants.items():
    src = h2 + '\nextern "C" __global__ void k(int *o) { o[0] = 1; }\n'
    try:
        cupy.RawKernel(src, "k", options=("--std=c++17",), backend="nvrtc").compile(); print(name, "OK")
    except Exception as e:
        print(name, "ERR", " | ".join(l for l in str(e).splitlines() if "error" in l)[:300])
