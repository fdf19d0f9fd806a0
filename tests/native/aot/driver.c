/* Drives a generated AOT library "vaddlib" (dispatcher `vadd(a, b, out, n)`) against
 * the fake libcuda (fake_cuda.c), so its logic is tested without a GPU.
 *
 *   driver dispatch N     one launch through the dispatcher with n = N
 *   driver twice N        two launches (the module must load once)
 *   driver threads K      K threads launch at once (the module must load once)
 */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vaddlib.h"

int fake_cuda_loads(void);
int fake_cuda_getfn(void);
int fake_cuda_launches(void);
void fake_cuda_expect(const char *entry, const int *sizes, int n);

static pthread_barrier_t start;

static CUresult launch(int n) {
  unsigned int grid = (unsigned int)((n + VADD_BLOCK_X - 1) / VADD_BLOCK_X);
  CUresult rc = vadd((CUstream)0, grid, 1, 1, (CUdeviceptr)0x1000, (CUdeviceptr)0x2000,
                     (CUdeviceptr)0x3000, (int32_t)n);
  printf("rc=%d\n", (int)rc);
  if (rc != CUDA_SUCCESS) printf("error=%s\n", vaddlib_last_error());
  return rc;
}

static void *worker(void *arg) {
  (void)arg;
  pthread_barrier_wait(&start);
  launch(1024);
  return NULL;
}

int main(int argc, char **argv) {
  static const int full[] = {8, 8, 8, 4};
  fake_cuda_expect("vadd", full, 4);
  fake_cuda_expect("vadd__n_mul16", full, 4);
  fake_cuda_expect("vadd__n_1024", full, 3);
  if (argc != 3) {
    fprintf(stderr, "usage: driver dispatch|twice|threads N\n");
    return 2;
  }
  int value = atoi(argv[2]);
  if (strcmp(argv[1], "dispatch") == 0) {
    launch(value);
  } else if (strcmp(argv[1], "twice") == 0) {
    launch(value);
    launch(value);
  } else if (strcmp(argv[1], "threads") == 0) {
    pthread_t threads[64];
    int k = value > 64 ? 64 : value;
    pthread_barrier_init(&start, NULL, (unsigned)k);
    for (int i = 0; i < k; ++i) pthread_create(&threads[i], NULL, worker, NULL);
    for (int i = 0; i < k; ++i) pthread_join(threads[i], NULL);
  } else {
    return 2;
  }
  printf("loads=%d getfn=%d launches=%d\n", fake_cuda_loads(), fake_cuda_getfn(),
         fake_cuda_launches());
  return 0;
}
