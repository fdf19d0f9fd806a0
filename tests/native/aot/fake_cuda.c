/* A fake libcuda.so.1 for testing generated AOT launchers without a GPU.
 *
 * It implements the driver calls the launchers make, counts them, and prints
 * each launch. Behaviour from the environment:
 *   FAKE_CUDA_CC=90            compute capability of the fake device (default 90)
 *   FAKE_CUDA_NO_CONTEXT=1     cuCtxGetCurrent gives no context
 *   FAKE_CUDA_FAIL=<call>      that call fails (CUDA_ERROR_INVALID_IMAGE for module
 *                              loads, CUDA_ERROR_LAUNCH_FAILED for launches)
 *   FAKE_CUDA_REJECT_CUBIN=1   cuModuleLoadData refuses ELF images (NO_BINARY_FOR_GPU)
 */
#define _POSIX_C_SOURCE 200809L
#include <cuda.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct CUctx_st { int dummy; };
struct CUmod_st { int is_ptx; };
struct CUfunc_st { char name[256]; };

static struct CUctx_st the_ctx;
static atomic_int n_loads, n_getfn, n_launches;
/* Argument sizes per entry point, so launches can print the argument values. */
static struct { char name[256]; int n; int sizes[32]; } expected[32];
static int n_expected;

int fake_cuda_loads(void) { return atomic_load(&n_loads); }
int fake_cuda_getfn(void) { return atomic_load(&n_getfn); }
int fake_cuda_launches(void) { return atomic_load(&n_launches); }
void fake_cuda_expect(const char *entry, const int *sizes, int n) {
  if (n_expected == 32 || n > 32) abort();
  snprintf(expected[n_expected].name, sizeof expected[n_expected].name, "%s", entry);
  expected[n_expected].n = n;
  memcpy(expected[n_expected].sizes, sizes, sizeof(int) * (size_t)n);
  ++n_expected;
}

static int failing(const char *call) {
  const char *f = getenv("FAKE_CUDA_FAIL");
  return f != NULL && strcmp(f, call) == 0;
}

CUresult cuGetErrorName(CUresult error, const char **pStr) {
  switch (error) {
    case CUDA_SUCCESS: *pStr = "CUDA_SUCCESS"; return CUDA_SUCCESS;
    case CUDA_ERROR_INVALID_IMAGE: *pStr = "CUDA_ERROR_INVALID_IMAGE"; return CUDA_SUCCESS;
    case CUDA_ERROR_NO_BINARY_FOR_GPU: *pStr = "CUDA_ERROR_NO_BINARY_FOR_GPU"; return CUDA_SUCCESS;
    case CUDA_ERROR_LAUNCH_FAILED: *pStr = "CUDA_ERROR_LAUNCH_FAILED"; return CUDA_SUCCESS;
    case CUDA_ERROR_NOT_FOUND: *pStr = "CUDA_ERROR_NOT_FOUND"; return CUDA_SUCCESS;
    default: *pStr = NULL; return CUDA_ERROR_INVALID_VALUE;
  }
}

CUresult cuGetErrorString(CUresult error, const char **pStr) {
  const char *name = NULL;
  if (cuGetErrorName(error, &name) != CUDA_SUCCESS) return CUDA_ERROR_INVALID_VALUE;
  *pStr = "fake description";
  return CUDA_SUCCESS;
}

CUresult cuCtxGetCurrent(CUcontext *pctx) {
  const char *no = getenv("FAKE_CUDA_NO_CONTEXT");
  *pctx = (no != NULL && strcmp(no, "1") == 0) ? NULL : &the_ctx;
  return CUDA_SUCCESS;
}

CUresult cuCtxGetDevice(CUdevice *device) {
  *device = 0;
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib, CUdevice dev) {
  const char *cc = getenv("FAKE_CUDA_CC");
  int v = cc ? atoi(cc) : 90;
  (void)dev;
  if (attrib == CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR) *pi = v / 10;
  else if (attrib == CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR) *pi = v % 10;
  else return CUDA_ERROR_INVALID_VALUE;
  return CUDA_SUCCESS;
}

CUresult cuModuleLoadData(CUmodule *module, const void *image) {
  const unsigned char *p = (const unsigned char *)image;
  int is_elf = p[0] == 0x7f && p[1] == 'E' && p[2] == 'L' && p[3] == 'F';
  struct timespec ts = {0, 20 * 1000 * 1000};
  nanosleep(&ts, NULL); /* widen the window for racing first launches */
  atomic_fetch_add(&n_loads, 1);
  if (failing("cuModuleLoadData")) return CUDA_ERROR_INVALID_IMAGE;
  if (is_elf && getenv("FAKE_CUDA_REJECT_CUBIN") != NULL) return CUDA_ERROR_NO_BINARY_FOR_GPU;
  if (!is_elf && strstr((const char *)image, ".entry") == NULL) return CUDA_ERROR_INVALID_IMAGE;
  *module = calloc(1, sizeof(struct CUmod_st));
  (*module)->is_ptx = !is_elf;
  if (is_elf) {
    /* ELF64: the section or the program header table ends the file. */
    unsigned long long shoff = 0, phoff = 0, sh_end, ph_end;
    unsigned short phentsize = 0, phnum = 0, shentsize = 0, shnum = 0;
    memcpy(&phoff, p + 0x20, 8);
    memcpy(&shoff, p + 0x28, 8);
    memcpy(&phentsize, p + 0x36, 2);
    memcpy(&phnum, p + 0x38, 2);
    memcpy(&shentsize, p + 0x3a, 2);
    memcpy(&shnum, p + 0x3c, 2);
    sh_end = shoff + (unsigned long long)shentsize * shnum;
    ph_end = phoff + (unsigned long long)phentsize * phnum;
    printf("fake: loaded cubin %llu bytes\n", sh_end > ph_end ? sh_end : ph_end);
  } else {
    printf("fake: loaded ptx\n");
  }
  return CUDA_SUCCESS;
}

CUresult cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod, const char *name) {
  (void)hmod;
  atomic_fetch_add(&n_getfn, 1);
  if (failing("cuModuleGetFunction")) return CUDA_ERROR_NOT_FOUND;
  *hfunc = calloc(1, sizeof(struct CUfunc_st));
  snprintf((*hfunc)->name, sizeof (*hfunc)->name, "%s", name);
  return CUDA_SUCCESS;
}

CUresult cuModuleUnload(CUmodule hmod) {
  free(hmod);
  return CUDA_SUCCESS;
}

CUresult cuFuncSetAttribute(CUfunction hfunc, CUfunction_attribute attrib, int value) {
  printf("fake: set attribute %d = %d on %s\n", (int)attrib, value, hfunc->name);
  return CUDA_SUCCESS;
}

CUresult cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                        unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,
                        unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,
                        void **kernelParams, void **extra) {
  int i;
  (void)hStream;
  (void)extra;
  atomic_fetch_add(&n_launches, 1);
  if (failing("cuLaunchKernel")) return CUDA_ERROR_LAUNCH_FAILED;
  printf("fake: launch %s grid=%u,%u,%u block=%u,%u,%u shared=%u args=", f->name, gridDimX,
         gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes);
  for (i = 0; i < n_expected; ++i) {
    int j;
    if (strcmp(expected[i].name, f->name) != 0) continue;
    for (j = 0; j < expected[i].n; ++j) {
      unsigned long long v = 0;
      memcpy(&v, kernelParams[j], (size_t)expected[i].sizes[j]);
      printf("%s%llx", j ? "," : "", v);
    }
  }
  printf("\n");
  return CUDA_SUCCESS;
}
