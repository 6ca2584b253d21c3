/* A stand-in libcuda.so.1 for `benchmarks/pool_instructions.py`: amso's own instructions in the
 * pool's plug-in path, counted by callgrind on a machine without a GPU. One device; contexts,
 * streams and events are handles; device addresses come from a counter and are never
 * dereferenced (a copy or a kernel launch finds no symbol here). Every call succeeds at once, so
 * the driver's own cost (cuStreamIsCapturing on a non-default stream: about 200 instructions
 * with driver 580) is not in the counts. Not a driver: a measuring stub. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
typedef int CUresult;
typedef int CUdevice;
typedef void *CUcontext, *CUstream, *CUevent, *CUmemoryPool;
typedef unsigned long long CUdeviceptr;
static char ctx_obj[64], pool_obj[64];
static __thread CUcontext current;
static CUdeviceptr next_ptr = 0x7f0000000000ULL;
#define OK return 0
CUresult cuInit(unsigned f) { OK; }
CUresult cuDriverGetVersion(int *v) { *v = 13000; OK; }
CUresult cuDeviceGetCount(int *n) { *n = 1; OK; }
CUresult cuDeviceGet(CUdevice *d, int o) { *d = o; return o == 0 ? 0 : 101; }
CUresult cuDeviceGetName(char *name, int len, CUdevice d) { snprintf(name, len, "Fake H200"); OK; }
CUresult cuDeviceTotalMem_v2(size_t *b, CUdevice d) { *b = 140ULL << 30; OK; }
CUresult cuDeviceGetAttribute(int *v, int attr, CUdevice d) {
  switch (attr) {
    case 75: *v = 9; break;  /* compute capability major */
    case 76: *v = 0; break;  /* minor */
    case 16: *v = 132; break; /* multiprocessors */
    case 1: *v = 1024; break; /* max threads per block */
    case 10: *v = 32; break; /* warp size */
    default: *v = 1;
  }
  OK;
}
CUresult cuDeviceGetUuid(char *u, CUdevice d) { memset(u, 7, 16); OK; }
CUresult cuDeviceGetUuid_v2(char *u, CUdevice d) { memset(u, 7, 16); OK; }
CUresult cuDeviceGetPCIBusId(char *s, int len, CUdevice d) { snprintf(s, len, "0000:01:00.0"); OK; }
CUresult cuDevicePrimaryCtxRetain(CUcontext *c, CUdevice d) { *c = ctx_obj; OK; }
CUresult cuDevicePrimaryCtxRelease_v2(CUdevice d) { OK; }
CUresult cuDevicePrimaryCtxGetState(CUdevice d, unsigned *f, int *active) { *f = 0; *active = 1; OK; }
CUresult cuDevicePrimaryCtxSetFlags_v2(CUdevice d, unsigned f) { OK; }
CUresult cuCtxSetCurrent(CUcontext c) { current = c; OK; }
CUresult cuCtxGetCurrent(CUcontext *c) { *c = current; OK; }
CUresult cuCtxPushCurrent_v2(CUcontext c) { current = c; OK; }
CUresult cuCtxPopCurrent_v2(CUcontext *c) { if (c) *c = current; OK; }
CUresult cuCtxGetDevice(CUdevice *d) { *d = 0; OK; }
CUresult cuCtxSynchronize(void) { OK; }
CUresult cuCtxGetApiVersion(CUcontext c, unsigned *v) { *v = 13000; OK; }
CUresult cuCtxGetFlags(unsigned *f) { *f = 0; OK; }
CUresult cuCtxSetFlags(unsigned f) { OK; }
CUresult cuCtxGetLimit(size_t *v, int l) { *v = 0; OK; }
CUresult cuStreamCreate(CUstream *s, unsigned f) { *s = malloc(16); OK; }
CUresult cuStreamCreateWithPriority(CUstream *s, unsigned f, int p) { *s = malloc(16); OK; }
CUresult cuStreamDestroy_v2(CUstream s) { OK; }
CUresult cuStreamSynchronize(CUstream s) { OK; }
CUresult cuStreamQuery(CUstream s) { OK; }
CUresult cuStreamIsCapturing(CUstream s, int *st) { *st = 0; OK; }
CUresult cuStreamGetCaptureInfo_v3(CUstream s, int *st, unsigned long long *id, void *g, void *d, void *e, size_t *n) {
  *st = 0; if (id) *id = 0; OK;
}
CUresult cuStreamGetCaptureInfo_v2(CUstream s, int *st, unsigned long long *id, void *g, void *d, size_t *n) {
  *st = 0; if (id) *id = 0; OK;
}
CUresult cuStreamGetCtx(CUstream s, CUcontext *c) { *c = ctx_obj; OK; }
CUresult cuStreamGetCtx_v2(CUstream s, CUcontext *c, void *g) { *c = ctx_obj; OK; }
CUresult cuStreamGetFlags(CUstream s, unsigned *f) { *f = 1; OK; }
CUresult cuStreamWaitEvent(CUstream s, CUevent e, unsigned f) { OK; }
CUresult cuThreadExchangeStreamCaptureMode(int *m) { OK; }
CUresult cuEventCreate(CUevent *e, unsigned f) { *e = malloc(16); OK; }
CUresult cuEventDestroy_v2(CUevent e) { OK; }
CUresult cuEventRecord(CUevent e, CUstream s) { OK; }
CUresult cuEventRecordWithFlags(CUevent e, CUstream s, unsigned f) { OK; }
CUresult cuEventQuery(CUevent e) { OK; }
CUresult cuEventSynchronize(CUevent e) { OK; }
static CUdeviceptr take(size_t n) { CUdeviceptr p = next_ptr; next_ptr += (n + 0xfffff) & ~0xfffffULL; return p; }
CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t n) { *p = take(n); OK; }
CUresult cuMemAllocAsync(CUdeviceptr *p, size_t n, CUstream s) { *p = take(n); OK; }
CUresult cuMemAllocFromPoolAsync(CUdeviceptr *p, size_t n, CUmemoryPool m, CUstream s) { *p = take(n); OK; }
CUresult cuMemFree_v2(CUdeviceptr p) { OK; }
CUresult cuMemFreeAsync(CUdeviceptr p, CUstream s) { OK; }
CUresult cuMemGetInfo_v2(size_t *f, size_t *t) { *f = 130ULL << 30; *t = 140ULL << 30; OK; }
CUresult cuMemsetD8_v2(CUdeviceptr p, unsigned char v, size_t n) { OK; }
CUresult cuMemsetD8Async(CUdeviceptr p, unsigned char v, size_t n, CUstream s) { OK; }
CUresult cuDeviceGetDefaultMemPool(CUmemoryPool *m, CUdevice d) { *m = pool_obj; OK; }
CUresult cuDeviceGetMemPool(CUmemoryPool *m, CUdevice d) { *m = pool_obj; OK; }
CUresult cuMemPoolSetAttribute(CUmemoryPool m, int a, void *v) { OK; }
CUresult cuMemPoolGetAttribute(CUmemoryPool m, int a, void *v) { memset(v, 0, 8); OK; }
CUresult cuMemPoolTrimTo(CUmemoryPool m, size_t k) { OK; }
CUresult cuPointerGetAttribute(void *d, int a, CUdeviceptr p) { memset(d, 0, 8); OK; }
CUresult cuGetErrorString(CUresult e, const char **s) { *s = "fake error"; OK; }
CUresult cuGetErrorName(CUresult e, const char **s) { *s = "CUDA_ERROR_FAKE"; OK; }
