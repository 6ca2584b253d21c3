// Cloud-in-cell deposit on the GPU: one thread per particle, periodic boundaries, unit mass,
// float64 weights added to the 8 surrounding cells with atomicAdd. The formula is cic.rs's.
// Two entry points share it: `cic_deposit` reads positions as the rows of a float32 (n, 3)
// array, `cic_deposit_records` as the `pos` field of particle records (an array of structs).
#include "amso.cuh"

// Add a unit mass at `pos` (x, y, z) to the 8 cells around it, periodic in every axis.
static __device__ __forceinline__ void cic_deposit_one(const float pos[3], amso::Indexer<double, 3> density,
                                                       double box_size) {
    uint64_t lower[3], upper[3];
    double fraction[3];
    for (int d = 0; d < 3; ++d) {
        const int64_t cells = (int64_t)density.shape[d];
        const double u = (double)pos[d] / (box_size / (double)cells) - 0.5;
        const double floor_u = floor(u);
        fraction[d] = u - floor_u;
        int64_t i0 = (int64_t)floor_u % cells;
        if (i0 < 0) i0 += cells;
        lower[d] = (uint64_t)i0;
        upper[d] = (uint64_t)((i0 + 1) % cells);
    }
    for (int corner = 0; corner < 8; ++corner) {
        const int a = corner >> 2, b = (corner >> 1) & 1, c = corner & 1;
        const double weight = (a ? fraction[0] : 1.0 - fraction[0]) * (b ? fraction[1] : 1.0 - fraction[1]) *
                              (c ? fraction[2] : 1.0 - fraction[2]);
        atomicAdd(&density(a ? upper[0] : lower[0], b ? upper[1] : lower[1], c ? upper[2] : lower[2]), weight);
    }
}

extern "C" __global__ void cic_deposit(amso::Indexer<float, 2> positions, amso::Indexer<double, 3> density,
                                       double box_size) {
    const uint64_t particles = positions.shape[0];
    const uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
    for (uint64_t p = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; p < particles; p += stride) {
        const float pos[3] = {positions(p, (uint64_t)0), positions(p, (uint64_t)1), positions(p, (uint64_t)2)};
        cic_deposit_one(pos, density, box_size);
    }
}

// Records: `particles(p)` is the p-th amso::particle, `particles(p).pos[d]` its coordinate d.
extern "C" __global__ void cic_deposit_records(amso::particle_indexer<1> particles, amso::Indexer<double, 3> density,
                                               double box_size) {
    const uint64_t count = particles.shape[0];
    const uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
    for (uint64_t p = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; p < count; p += stride) {
        cic_deposit_one(particles(p).pos, density, box_size);
    }
}
