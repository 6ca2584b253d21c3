// The kernels of ops.rs's graph ops: a drift step and the clearing of a grid. Each thread
// strides over the elements; every output element is written (XLA's and torch's outputs come
// uninitialised).
#include "amso.cuh"

// moved = (positions + dt * velocities) wrapped into [0, box_size), element by element.
extern "C" __global__ void drift(amso::Indexer<float, 2> positions, amso::Indexer<float, 2> velocities,
                                 amso::Indexer<float, 2> moved, double dt, double box_size) {
    const uint64_t count = positions.size();
    const uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
    for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < count; i += stride) {
        double x = fmod(__dadd_rn((double)positions.data[i], __dmul_rn(dt, (double)velocities.data[i])), box_size);
        if (x < 0.0) x += box_size;
        moved.data[i] = (float)x;
    }
}

extern "C" __global__ void clear(amso::Indexer<double, 3> grid) {
    const uint64_t count = grid.size();
    const uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
    for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < count; i += stride) grid.data[i] = 0.0;
}
