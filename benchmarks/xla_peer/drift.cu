// The peer of amso's `drift` op (examples/rust/user-crate/src/ops.rs) for benchmarks/bench_ops.py:
// the same formula as a hand-written XLA FFI handler in C++ (the typed FFI of
// xla/ffi/api/ffi.h, what JAX's FFI tutorial writes), for the host and for CUDA. Built by
// bench_ops.py with nvcc against jax.ffi.include_dir() (with a C++ compiler alone, the host
// handler only).
#include <cmath>
#include <cstdint>

#include "xla/ffi/api/ffi.h"

#ifdef __CUDACC__
#include <cuda_runtime.h>
#endif

namespace ffi = xla::ffi;

static inline float drifted(float x, float v, double dt, double box) {
    double moved = std::fmod((double)x + dt * (double)v, box);
    return (float)(moved < 0.0 ? moved + box : moved);
}

static ffi::Error DriftHost(ffi::Buffer<ffi::F32> x, ffi::Buffer<ffi::F32> v, ffi::ResultBuffer<ffi::F32> out,
                            double dt, double box_size) {
    const size_t n = x.element_count();
    if (v.element_count() != n || out->element_count() != n) {
        return ffi::Error::InvalidArgument("drift: shapes differ");
    }
    const float *xs = x.typed_data(), *vs = v.typed_data();
    float *outs = out->typed_data();
    for (size_t i = 0; i < n; ++i) outs[i] = drifted(xs[i], vs[i], dt, box_size);
    return ffi::Error::Success();
}

XLA_FFI_DEFINE_HANDLER_SYMBOL(peer_drift_host, DriftHost,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Ret<ffi::Buffer<ffi::F32>>()
                                  .Attr<double>("dt")
                                  .Attr<double>("box_size"));

#ifdef __CUDACC__
__global__ void drift_kernel(const float *x, const float *v, float *out, uint64_t n, double dt, double box) {
    const uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
    for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        double moved = fmod(__dadd_rn((double)x[i], __dmul_rn(dt, (double)v[i])), box);
        if (moved < 0.0) moved += box;
        out[i] = (float)moved;
    }
}

static ffi::Error DriftCuda(cudaStream_t stream, ffi::Buffer<ffi::F32> x, ffi::Buffer<ffi::F32> v,
                            ffi::ResultBuffer<ffi::F32> out, double dt, double box_size) {
    const uint64_t n = x.element_count();
    if (v.element_count() != n || out->element_count() != n) {
        return ffi::Error::InvalidArgument("drift: shapes differ");
    }
    if (n == 0) return ffi::Error::Success();
    uint64_t blocks = (n + 255) / 256;
    if (blocks > 65535u * 32u) blocks = 65535u * 32u;
    drift_kernel<<<(unsigned)blocks, 256, 0, stream>>>(x.typed_data(), v.typed_data(), out->typed_data(), n, dt,
                                                        box_size);
    cudaError_t launched = cudaGetLastError();
    if (launched != cudaSuccess) return ffi::Error::Internal(cudaGetErrorString(launched));
    return ffi::Error::Success();
}

XLA_FFI_DEFINE_HANDLER_SYMBOL(peer_drift_cuda, DriftCuda,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::PlatformStream<cudaStream_t>>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Ret<ffi::Buffer<ffi::F32>>()
                                  .Attr<double>("dt")
                                  .Attr<double>("box_size"));
#endif  // __CUDACC__
