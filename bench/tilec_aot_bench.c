/* Host overhead of a tilec AOT launcher against a raw cuLaunchKernel, from C, in one process.
 *
 *   cc -O2 -DAOT_HEADER='"vadd_aot.h"' -DAOT_FN=vadd_aot -DAOT_FN_FUNCTION=vadd_aot_function \
 *      tilec_aot_bench.c vadd_aot.c -I<dir> -I/usr/local/cuda/include \
 *      -L/usr/local/cuda/lib64/stubs -lcuda -lpthread -o aot_bench
 *   ./aot_bench LAUNCHES BATCHES
 *
 * The kernel is the vector add (a, b, out, n) over 256 floats, one block; the AOT
 * launcher's block is fixed at generation. Both paths launch the same CUfunction (the
 * launcher's, through its _function accessor) on the legacy default stream and check
 * every return code. Batches of LAUNCHES launches, host-timed around the loop with a
 * synchronize after it (outside the time), alternate between the two paths; the result
 * is one JSON line with the medians (microseconds per launch).
 */
#include <cuda.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include AOT_HEADER

#define N 256

static void check(CUresult rc, const char *what) {
  if (rc != CUDA_SUCCESS) {
    const char *name = NULL;
    cuGetErrorName(rc, &name);
    fprintf(stderr, "%s failed: %s (%d)\n", what, name ? name : "?", (int)rc);
    exit(1);
  }
}

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static int verify(CUdeviceptr dout, const float *ha, const float *hb) {
  float out[N];
  check(cuCtxSynchronize(), "cuCtxSynchronize");
  check(cuMemcpyDtoH(out, dout, sizeof out), "cuMemcpyDtoH");
  for (int i = 0; i < N; i++)
    if (out[i] != ha[i] + hb[i]) return 0;
  return 1;
}

int main(int argc, char **argv) {
  int launches = argc > 1 ? atoi(argv[1]) : 500;
  int batches = argc > 2 ? atoi(argv[2]) : 21;
  CUdevice dev;
  CUcontext ctx;
  check(cuInit(0), "cuInit");
  check(cuDeviceGet(&dev, 0), "cuDeviceGet");
  check(cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
  check(cuCtxSetCurrent(ctx), "cuCtxSetCurrent");

  float ha[N], hb[N], poison[N];
  srand((unsigned)time(NULL));
  for (int i = 0; i < N; i++) {
    ha[i] = (float)rand() / (float)RAND_MAX - 0.5f;
    hb[i] = (float)rand() / (float)RAND_MAX - 0.5f;
    poison[i] = NAN;
  }
  CUdeviceptr da, db, dout;
  check(cuMemAlloc(&da, sizeof ha), "cuMemAlloc");
  check(cuMemAlloc(&db, sizeof hb), "cuMemAlloc");
  check(cuMemAlloc(&dout, sizeof poison), "cuMemAlloc");
  check(cuMemcpyHtoD(da, ha, sizeof ha), "cuMemcpyHtoD");
  check(cuMemcpyHtoD(db, hb, sizeof hb), "cuMemcpyHtoD");
  int32_t n = N;
  CUstream stream = 0;

  CUfunction fn;
  check(AOT_FN_FUNCTION(&fn), "AOT _function");
  void *args[] = {&da, &db, &dout, &n};

  /* Correctness of both paths first. */
  check(cuMemcpyHtoD(dout, poison, sizeof poison), "cuMemcpyHtoD");
  check(AOT_FN(stream, 1, 1, 1, da, db, dout, n), "AOT launcher");
  int aot_ok = verify(dout, ha, hb);
  check(cuMemcpyHtoD(dout, poison, sizeof poison), "cuMemcpyHtoD");
  check(cuLaunchKernel(fn, 1, 1, 1, N, 1, 1, 0, stream, args, NULL), "cuLaunchKernel");
  int raw_ok = verify(dout, ha, hb);
  if (!aot_ok || !raw_ok) {
    fprintf(stderr, "wrong result: aot %d raw %d\n", aot_ok, raw_ok);
    return 1;
  }

  for (int i = 0; i < 200; i++) { /* warm-up */
    check(AOT_FN(stream, 1, 1, 1, da, db, dout, n), "AOT launcher");
    check(cuLaunchKernel(fn, 1, 1, 1, N, 1, 1, 0, stream, args, NULL), "cuLaunchKernel");
  }
  check(cuCtxSynchronize(), "cuCtxSynchronize");

  double *aot = calloc((size_t)batches, sizeof *aot), *raw = calloc((size_t)batches, sizeof *raw);
  for (int b = 0; b < batches; b++) {
    double t0 = now();
    for (int i = 0; i < launches; i++) {
      CUresult rc = AOT_FN(stream, 1, 1, 1, da, db, dout, n);
      if (rc != CUDA_SUCCESS) check(rc, "AOT launcher");
    }
    aot[b] = (now() - t0) / launches;
    check(cuCtxSynchronize(), "cuCtxSynchronize");
    t0 = now();
    for (int i = 0; i < launches; i++) {
      CUresult rc = cuLaunchKernel(fn, 1, 1, 1, N, 1, 1, 0, stream, args, NULL);
      if (rc != CUDA_SUCCESS) check(rc, "cuLaunchKernel");
    }
    raw[b] = (now() - t0) / launches;
    check(cuCtxSynchronize(), "cuCtxSynchronize");
  }
  double am = median(aot, batches), rm = median(raw, batches);
  printf("{\"aot_us\": %.4f, \"raw_us\": %.4f, \"aot_over_raw\": %.4f, \"launches\": %d, "
         "\"batches\": %d, \"aot_min_us\": %.4f, \"raw_min_us\": %.4f, \"correct\": true}\n",
         am * 1e6, rm * 1e6, am / rm, launches, batches, aot[0] * 1e6, raw[0] * 1e6);
  return 0;
}
