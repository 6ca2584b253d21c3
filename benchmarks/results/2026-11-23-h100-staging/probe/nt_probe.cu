// Staged pageable <-> device copies, as amso's pipeline does them (16 MiB chunks, 4 in flight,
// 12 threads per chunk, barriers), with the workers' copy done by libc memcpy or by SSE2
// non-temporal stores. Prints GB/s per mode, best of R repeats.
//   nvcc -O2 -Xcompiler -pthread nt_probe.cu -o nt_probe -lcuda && ./nt_probe
#include <cuda_runtime.h>
#include <emmintrin.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <vector>
#include <thread>
#include <barrier>
#include <atomic>
#include <functional>

static size_t CHUNK = 16 << 20;
static const size_t DEPTH_MAX = 16, BYTES = 256 << 20;
static size_t DEPTH = 4;
static int WORKERS = 12;

static double now() { timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }

static void copy_nt(char *dst, const char *src, size_t n) {
  while (n && ((uintptr_t)dst & 15)) { *dst++ = *src++; n--; }
  size_t blocks = n / 64;
  for (size_t i = 0; i < blocks; i++) {
    __m128i a = _mm_loadu_si128((const __m128i *)src), b = _mm_loadu_si128((const __m128i *)(src + 16));
    __m128i c = _mm_loadu_si128((const __m128i *)(src + 32)), d = _mm_loadu_si128((const __m128i *)(src + 48));
    _mm_stream_si128((__m128i *)dst, a); _mm_stream_si128((__m128i *)(dst + 16), b);
    _mm_stream_si128((__m128i *)(dst + 32), c); _mm_stream_si128((__m128i *)(dst + 48), d);
    src += 64; dst += 64;
  }
  n -= blocks * 64;
  memcpy(dst, src, n);
  _mm_sfence();
}

typedef void (*copy_fn)(char *, const char *, size_t);
static void copy_libc(char *d, const char *s, size_t n) { memcpy(d, s, n); }

// One staged transfer. h2d: src pageable -> slots -> dev. d2h: dev -> slots -> dst pageable.
static void staged(bool h2d, copy_fn copy, char *host, char *dev, char **slots, cudaEvent_t *ev, cudaStream_t s) {
  size_t nchunks = BYTES / CHUNK;
  std::barrier start(WORKERS + 1), done(WORKERS + 1);
  std::vector<std::thread> ts;
  for (int w = 0; w < WORKERS; w++)
    ts.emplace_back([&, w] {
      for (size_t i = 0; i < nchunks; i++) {
        start.arrive_and_wait();
        size_t size = (CHUNK + WORKERS - 1) / WORKERS, b = std::min(w * size, CHUNK), len = std::min(size, CHUNK - b);
        char *slot = slots[i % DEPTH];
        if (h2d) copy(slot + b, host + i * CHUNK + b, len);
        else copy(host + i * CHUNK + b, slot + b, len);
        done.arrive_and_wait();
      }
    });
  if (!h2d)
    for (size_t i = 0; i < DEPTH; i++) {
      cudaMemcpyAsync(slots[i], dev + i * CHUNK, CHUNK, cudaMemcpyDeviceToHost, s);
      cudaEventRecord(ev[i], s);
    }
  for (size_t i = 0; i < nchunks; i++) {
    if (h2d) { if (i >= DEPTH) cudaEventSynchronize(ev[i % DEPTH]); }
    else cudaEventSynchronize(ev[i % DEPTH]);
    start.arrive_and_wait();
    done.arrive_and_wait();
    if (h2d) {
      cudaMemcpyAsync(dev + i * CHUNK, slots[i % DEPTH], CHUNK, cudaMemcpyHostToDevice, s);
      cudaEventRecord(ev[i % DEPTH], s);
    } else if (i + DEPTH < nchunks) {
      cudaMemcpyAsync(slots[i % DEPTH], dev + (i + DEPTH) * CHUNK, CHUNK, cudaMemcpyDeviceToHost, s);
      cudaEventRecord(ev[i % DEPTH], s);
    }
  }
  for (auto &t : ts) t.join();
  cudaStreamSynchronize(s);
}

// Threaded whole-buffer copy (the report's host reference), and chunked fill without DMA.
static void threaded(copy_fn copy, char *dst, const char *src, size_t bytes) {
  std::vector<std::thread> ts;
  size_t size = bytes / WORKERS;
  for (int w = 0; w < WORKERS; w++) ts.emplace_back([=] { copy(dst + w * size, src + w * size, size); });
  for (auto &t : ts) t.join();
}

int main(int argc, char **argv) {
  int R = argc > 1 ? atoi(argv[1]) : 10;
  if (argc > 2) WORKERS = atoi(argv[2]);
  if (argc > 3) CHUNK = (size_t)atoi(argv[3]) << 20;
  if (argc > 4) DEPTH = atoi(argv[4]);
  char *host = (char *)aligned_alloc(4096, BYTES), *host2 = (char *)aligned_alloc(4096, BYTES);
  for (size_t i = 0; i < BYTES; i++) { host[i] = (char)(i * 7); host2[i] = 0; }
  char *pinned, *dev, *slots[DEPTH_MAX];
  cudaHostAlloc(&pinned, BYTES, cudaHostAllocPortable);
  memset(pinned, 1, BYTES);
  for (size_t i = 0; i < DEPTH; i++) { cudaHostAlloc(&slots[i], CHUNK, cudaHostAllocPortable); memset(slots[i], 0, CHUNK); }
  cudaMalloc(&dev, BYTES);
  cudaStream_t s; cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  cudaEvent_t ev[DEPTH_MAX]; for (size_t i = 0; i < DEPTH; i++) cudaEventCreateWithFlags(&ev[i], cudaEventDisableTiming);
  auto best = [&](std::function<void()> f) { double b = 1e9; for (int r = 0; r < R; r++) { double t = now(); f(); t = now() - t; if (t < b) b = t; } return BYTES / b / 1e9; };
  struct { const char *name; copy_fn f; } fns[] = {{"memcpy", copy_libc}, {"nt", copy_nt}};
  printf("workers %d chunk %zu MiB depth %zu\n", WORKERS, CHUNK >> 20, DEPTH);
  int rounds = argc > 5 ? atoi(argv[5]) : 2;
  for (int round = 0; round < rounds; round++)
    for (auto &fn : fns) {
      double pinned_h2d = best([&] { cudaMemcpyAsync(dev, pinned, BYTES, cudaMemcpyHostToDevice, s); cudaStreamSynchronize(s); });
      double whole = best([&] { threaded(fn.f, pinned, host, BYTES); });
      double whole_d = best([&] { threaded(fn.f, host2, pinned, BYTES); });
      double h2d = best([&] { staged(true, fn.f, host, dev, slots, ev, s); });
      memset(host2, 0, BYTES);
      double d2h = best([&] { staged(false, fn.f, host2, dev, slots, ev, s); });
      if (memcmp(host, host2, BYTES) != 0) { printf("MISMATCH\n"); return 1; }
      printf("%-7s pinned H2D %5.1f | whole pageable->pinned %5.1f pinned->pageable %5.1f | staged H2D %5.1f (%.2f of pinned) D2H %5.1f (%.2f)\n",
             fn.name, pinned_h2d, whole, whole_d, h2d, h2d / pinned_h2d, d2h, d2h / pinned_h2d);
    }
  return 0;
}
