/* Runs the generated AOT library "vaddlib" on a real GPU (tests/gpu/test_aot_gpu.py).
 *
 *   aot_gpu_main run DIR N...   a.bin, b.bin in DIR (float32); out_<N>.bin for each N,
 *                               launched through the dispatcher vadd(...)
 *   aot_gpu_main threads K      K threads make the first launches at once
 *   aot_gpu_main bench ROUNDS BATCHES LAUNCHES
 *                               host time per launch: raw cuLaunchKernel, the AOT
 *                               launcher and the dispatcher, on the same CUfunction,
 *                               interleaved; prints one JSON object
 */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "vaddlib.h"

#ifndef GENERIC
#error "compile with -DGENERIC=<the generic launcher's name>"
#endif
#define CAT2(a, b) a##b
#define CAT(a, b) CAT2(a, b)

#define CHECK(call)                                                                    \
  do {                                                                                 \
    CUresult rc_ = (call);                                                             \
    if (rc_ != CUDA_SUCCESS) {                                                         \
      const char *n_ = NULL;                                                           \
      cuGetErrorName(rc_, &n_);                                                        \
      fprintf(stderr, "%s:%d: %s failed: %s (%d); last_error: %s\n", __FILE__, __LINE__, \
              #call, n_ ? n_ : "?", (int)rc_, vaddlib_last_error());                    \
      exit(1);                                                                         \
    }                                                                                  \
  } while (0)

static CUcontext ctx;

static void init(void) {
  CUdevice dev;
  CHECK(cuInit(0));
  CHECK(cuDeviceGet(&dev, 0));
  CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
  CHECK(cuCtxSetCurrent(ctx));
}

static float *read_floats(const char *dir, const char *name, size_t *count) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "rb");
  if (!f) { perror(path); exit(1); }
  fseek(f, 0, SEEK_END);
  long size = ftell(f);
  fseek(f, 0, SEEK_SET);
  float *data = malloc((size_t)size);
  if (fread(data, 1, (size_t)size, f) != (size_t)size) { perror(path); exit(1); }
  fclose(f);
  *count = (size_t)size / sizeof(float);
  return data;
}

static int run(const char *dir, int argc, char **argv) {
  size_t na, nb;
  float *a = read_floats(dir, "a.bin", &na);
  float *b = read_floats(dir, "b.bin", &nb);
  CUdeviceptr da, db, dout;
  CUstream stream;
  CHECK(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  CHECK(cuMemAlloc(&da, na * sizeof(float)));
  CHECK(cuMemAlloc(&db, nb * sizeof(float)));
  CHECK(cuMemAlloc(&dout, na * sizeof(float)));
  CHECK(cuMemcpyHtoD(da, a, na * sizeof(float)));
  CHECK(cuMemcpyHtoD(db, b, nb * sizeof(float)));
  float *out = malloc(na * sizeof(float));
  for (int i = 0; i < argc; ++i) {
    int n = atoi(argv[i]);
    unsigned int grid = (unsigned int)((n + VADD_BLOCK_X - 1) / VADD_BLOCK_X);
    CHECK(cuMemsetD8(dout, 0xff, na * sizeof(float)));
    CHECK(vadd(stream, grid, 1, 1, da, db, dout, (int32_t)n));
    CHECK(cuStreamSynchronize(stream));
    CHECK(cuMemcpyDtoH(out, dout, (size_t)n * sizeof(float)));
    char path[4096];
    snprintf(path, sizeof path, "%s/out_%d.bin", dir, n);
    FILE *f = fopen(path, "wb");
    fwrite(out, sizeof(float), (size_t)n, f);
    fclose(f);
    printf("ran n=%d\n", n);
  }
  CHECK(cuMemFree(da));
  CHECK(cuMemFree(db));
  CHECK(cuMemFree(dout));
  CHECK(cuStreamDestroy(stream));
  return 0;
}

static pthread_barrier_t start;
static void *first_launch(void *arg) {
  CUresult *rc = arg;
  CHECK(cuCtxSetCurrent(ctx));
  pthread_barrier_wait(&start);
  /* n = 0: every thread returns at once; only the load and the launch matter. */
  *rc = vadd((CUstream)0, 1, 1, 1, 0, 0, 0, 0);
  return NULL;
}

static int threads(int k) {
  pthread_t t[64];
  CUresult rc[64];
  if (k > 64) k = 64;
  pthread_barrier_init(&start, NULL, (unsigned)k);
  for (int i = 0; i < k; ++i) pthread_create(&t[i], NULL, first_launch, &rc[i]);
  for (int i = 0; i < k; ++i) pthread_join(t[i], NULL);
  CHECK(cuCtxSynchronize());
  int ok = 0;
  for (int i = 0; i < k; ++i) ok += rc[i] == CUDA_SUCCESS;
  printf("threads ok=%d of %d\n", ok, k);
  return ok == k ? 0 : 1;
}

static double now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static int cmp(const void *x, const void *y) {
  double a = *(const double *)x, b = *(const double *)y;
  return (a > b) - (a < b);
}

enum { RAW, AOT, DISPATCH, MODES };
static const char *mode_name[MODES] = {"raw_cuLaunchKernel", "aot_launcher", "aot_dispatcher"};

int bench(int rounds, int batches, int launches) {
  CUfunction fn;
  CUstream stream;
  CUdeviceptr a, b, out;
  int32_t n = 1;
  CHECK(CAT(GENERIC, _function)(&fn));
  CHECK(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  CHECK(cuMemAlloc(&a, 4096));
  CHECK(cuMemAlloc(&b, 4096));
  CHECK(cuMemAlloc(&out, 4096));
  double *per_round[MODES];
  double *end_sync[MODES];
  for (int m = 0; m < MODES; ++m) {
    per_round[m] = calloc((size_t)rounds, sizeof(double));
    end_sync[m] = calloc((size_t)rounds, sizeof(double));
  }
  double *batch_ns = calloc((size_t)batches, sizeof(double));
  /* Warm-up: module loaded, caches and the driver's queues hot. */
  for (int i = 0; i < 2000; ++i) {
    void *args[] = {&a, &b, &out, &n};
    CHECK(cuLaunchKernel(fn, 1, 1, 1, VADD_BLOCK_X, 1, 1, 0, stream, args, NULL));
    CHECK(GENERIC(stream, 1, 1, 1, a, b, out, n));
    CHECK(vadd(stream, 1, 1, 1, a, b, out, n));
  }
  CHECK(cuStreamSynchronize(stream));
  for (int r = 0; r < rounds; ++r) {
    for (int j = 0; j < MODES; ++j) {
      int m = (r + j) % MODES; /* rotate the order every round */
      /* Host time of each batch of launches; the drain between batches is not timed. */
      for (int bt = 0; bt < batches; ++bt) {
        double t0 = now_ns();
        if (m == RAW) {
          for (int i = 0; i < launches; ++i) {
            void *args[] = {&a, &b, &out, &n};
            CUresult rc = cuLaunchKernel(fn, 1, 1, 1, VADD_BLOCK_X, 1, 1, 0, stream, args, NULL);
            if (rc != CUDA_SUCCESS) CHECK(rc);
          }
        } else if (m == AOT) {
          for (int i = 0; i < launches; ++i) {
            CUresult rc = GENERIC(stream, 1, 1, 1, a, b, out, n);
            if (rc != CUDA_SUCCESS) CHECK(rc);
          }
        } else {
          for (int i = 0; i < launches; ++i) {
            CUresult rc = vadd(stream, 1, 1, 1, a, b, out, n);
            if (rc != CUDA_SUCCESS) CHECK(rc);
          }
        }
        batch_ns[bt] = (now_ns() - t0) / launches;
        CHECK(cuStreamSynchronize(stream));
      }
      qsort(batch_ns, (size_t)batches, sizeof(double), cmp);
      per_round[m][r] = batch_ns[batches / 2];
      /* The same launches with one synchronize at the end, timed whole. */
      double t0 = now_ns();
      for (int i = 0; i < launches; ++i) {
        if (m == RAW) {
          void *args[] = {&a, &b, &out, &n};
          CHECK(cuLaunchKernel(fn, 1, 1, 1, VADD_BLOCK_X, 1, 1, 0, stream, args, NULL));
        } else if (m == AOT) {
          CHECK(GENERIC(stream, 1, 1, 1, a, b, out, n));
        } else {
          CHECK(vadd(stream, 1, 1, 1, a, b, out, n));
        }
      }
      CHECK(cuStreamSynchronize(stream));
      end_sync[m][r] = (now_ns() - t0) / launches;
    }
  }
  printf("{\"rounds\": %d, \"batches_per_round\": %d, \"launches_per_batch\": %d", rounds, batches,
         launches);
  for (int k = 0; k < 2; ++k) {
    printf(", \"%s\": {", k == 0 ? "host_ns_per_launch" : "end_sync_ns_per_launch");
    for (int m = 0; m < MODES; ++m) {
      double *v = k == 0 ? per_round[m] : end_sync[m];
      qsort(v, (size_t)rounds, sizeof(double), cmp);
      printf("%s\"%s\": {\"median\": %.2f, \"min\": %.2f, \"p90\": %.2f, \"rounds\": [", m ? ", " : "",
             mode_name[m], v[rounds / 2], v[0], v[(rounds * 9) / 10]);
      for (int r = 0; r < rounds; ++r) printf("%s%.1f", r ? ", " : "", v[r]);
      printf("]}");
    }
    printf("}");
  }
  printf("}\n");
  CHECK(cuMemFree(a));
  CHECK(cuMemFree(b));
  CHECK(cuMemFree(out));
  CHECK(cuStreamDestroy(stream));
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: aot_gpu_main run DIR N... | threads K | bench ROUNDS BATCHES LAUNCHES\n");
    return 2;
  }
  init();
  if (strcmp(argv[1], "run") == 0) return run(argv[2], argc - 3, argv + 3);
  if (strcmp(argv[1], "threads") == 0) return threads(atoi(argv[2]));
  if (strcmp(argv[1], "bench") == 0 && argc == 5)
    return bench(atoi(argv[2]), atoi(argv[3]), atoi(argv[4]));
  return 2;
}
