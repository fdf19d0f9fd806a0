/* PTX -> cubin with NVIDIA's static PTX compiler library (nvPTXCompiler), for
 * bench/tilec_assembler.py: the in-process compiler that is ptxas as a library.
 *
 *   nvptxcompiler_probe IN.ptx OUT.cubin REPS [compiler options...]
 *   nvptxcompiler_probe --version
 *
 * Compiles IN.ptx once (kept: OUT.cubin, the info log on stderr), then REPS more
 * times in this process, each timed from create to the compiled image. Prints one
 * line: "version MAJOR.MINOR times_ms T1 T2 ...". Exit 3 on a failed compile, with
 * the compiler's error log on stderr.
 *
 * The bench builds it where the library is found (a CUDA toolkit or the
 * nvidia-nvptxcompiler wheel); tilec links the library itself (nvptxcompiler_shim.c).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "nvPTXCompiler.h"

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e3 + t.tv_nsec * 1e-6;
}

static char *read_all(const char *path, size_t *size) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  rewind(f);
  char *buf = malloc((size_t)n + 1);
  if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
    free(buf);
    buf = NULL;
  }
  fclose(f);
  if (buf) buf[n] = 0;
  *size = (size_t)n;
  return buf;
}

/* One compile; returns the image (malloc'd) or NULL after printing the error log. */
static char *compile(const char *ptx, size_t len, int nopts, const char **opts, size_t *size, int log) {
  nvPTXCompilerHandle h;
  if (nvPTXCompilerCreate(&h, len, ptx) != NVPTXCOMPILE_SUCCESS) {
    fprintf(stderr, "nvPTXCompilerCreate failed\n");
    return NULL;
  }
  char *image = NULL;
  if (nvPTXCompilerCompile(h, nopts, opts) != NVPTXCOMPILE_SUCCESS) {
    size_t n = 0;
    nvPTXCompilerGetErrorLogSize(h, &n);
    char *err = malloc(n + 1);
    if (err && nvPTXCompilerGetErrorLog(h, err) == NVPTXCOMPILE_SUCCESS) fprintf(stderr, "%s\n", err);
    free(err);
  } else if (nvPTXCompilerGetCompiledProgramSize(h, size) == NVPTXCOMPILE_SUCCESS) {
    image = malloc(*size);
    if (image && nvPTXCompilerGetCompiledProgram(h, image) != NVPTXCOMPILE_SUCCESS) {
      free(image);
      image = NULL;
    }
    if (image && log) {
      size_t n = 0;
      nvPTXCompilerGetInfoLogSize(h, &n);
      char *info = malloc(n + 1);
      if (info && nvPTXCompilerGetInfoLog(h, info) == NVPTXCOMPILE_SUCCESS) fprintf(stderr, "%s", info);
      free(info);
    }
  }
  nvPTXCompilerDestroy(&h);
  return image;
}

int main(int argc, char **argv) {
  unsigned major = 0, minor = 0;
  if (argc == 2 && strcmp(argv[1], "--version") == 0) {
    nvPTXCompilerGetVersion(&major, &minor);
    printf("version %u.%u\n", major, minor);
    return 0;
  }
  if (argc < 4) {
    fprintf(stderr, "usage: %s IN.ptx OUT.cubin REPS [options...]\n", argv[0]);
    return 2;
  }
  size_t len = 0, size = 0;
  char *ptx = read_all(argv[1], &len);
  if (!ptx) {
    fprintf(stderr, "cannot read %s\n", argv[1]);
    return 2;
  }
  int reps = atoi(argv[3]);
  const char **opts = (const char **)(argv + 4);
  int nopts = argc - 4;
  char *image = compile(ptx, len, nopts, opts, &size, 1);
  if (!image) return 3;
  FILE *out = fopen(argv[2], "wb");
  if (!out || fwrite(image, 1, size, out) != size) {
    fprintf(stderr, "cannot write %s\n", argv[2]);
    return 2;
  }
  fclose(out);
  free(image);
  nvPTXCompilerGetVersion(&major, &minor);
  printf("version %u.%u times_ms", major, minor);
  for (int i = 0; i < reps; i++) {
    double t0 = now_ms();
    char *again = compile(ptx, len, nopts, opts, &size, 0);
    double t1 = now_ms();
    if (!again) return 3;
    free(again);
    printf(" %.4f", t1 - t0);
  }
  printf("\n");
  free(ptx);
  return 0;
}
