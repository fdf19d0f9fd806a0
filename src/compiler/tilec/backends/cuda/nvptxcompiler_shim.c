/* tilec's C boundary to NVIDIA's PTX compiler library (nvPTXCompiler).
 *
 * Built on the user's machine, never shipped compiled: tilec (nvptxcompiler.py) links this file
 * against the user's own libnvptxcompiler_static.a with the machine's g++, statically with
 * libstdc++ (the archive is C++ built for it), exporting only the functions below. tilec's core is
 * built with another C++ runtime (the pinned zig toolchain's libc++); the two never meet, as only
 * plain C values cross this boundary. Buffers handed out are malloc'd here and freed here.
 */
#include <stdlib.h>
#include <string.h>

#include "nvPTXCompiler.h"

#define TILEC_EXPORT __attribute__((visibility("default")))

TILEC_EXPORT int tilec_nvptxc_version(unsigned *major, unsigned *minor) {
  return (int)nvPTXCompilerGetVersion(major, minor);
}

TILEC_EXPORT void tilec_nvptxc_free(void *p) { free(p); }

typedef nvPTXCompileResult (*size_fn)(nvPTXCompilerHandle, size_t *);
typedef nvPTXCompileResult (*log_fn)(nvPTXCompilerHandle, char *);

static char *read_log(nvPTXCompilerHandle h, size_fn size_of, log_fn read) {
  size_t n = 0;
  if (size_of(h, &n) != NVPTXCOMPILE_SUCCESS) return NULL;
  char *text = malloc(n + 1);
  if (text == NULL) return NULL;
  text[0] = 0;
  if (n && read(h, text) != NVPTXCOMPILE_SUCCESS) text[0] = 0;
  text[n] = 0;
  return text;
}

/* Compiles `ptx` with `options` (ptxas's spelling). Returns the library's result code (0 on
 * success). On success *image holds the cubin; the info log (ptxas -v's report with
 * --verbose) and the error log are returned whenever the library gave them. */
TILEC_EXPORT int tilec_nvptxc_compile(const char *ptx, size_t len, int noptions,
                                      const char *const *options, char **image, size_t *image_size,
                                      char **info_log, char **error_log) {
  nvPTXCompilerHandle h = NULL;
  *image = *info_log = *error_log = NULL;
  *image_size = 0;
  nvPTXCompileResult rc = nvPTXCompilerCreate(&h, len, ptx);
  if (rc != NVPTXCOMPILE_SUCCESS) return (int)rc;
  rc = nvPTXCompilerCompile(h, noptions, options);
  *error_log = read_log(h, nvPTXCompilerGetErrorLogSize, nvPTXCompilerGetErrorLog);
  *info_log = read_log(h, nvPTXCompilerGetInfoLogSize, nvPTXCompilerGetInfoLog);
  if (rc == NVPTXCOMPILE_SUCCESS) rc = nvPTXCompilerGetCompiledProgramSize(h, image_size);
  if (rc == NVPTXCOMPILE_SUCCESS) {
    *image = malloc(*image_size ? *image_size : 1);
    if (*image == NULL) {
      rc = NVPTXCOMPILE_ERROR_OUT_OF_MEMORY;
    } else {
      rc = nvPTXCompilerGetCompiledProgram(h, *image);
    }
    if (rc != NVPTXCOMPILE_SUCCESS) {
      free(*image);
      *image = NULL;
      *image_size = 0;
    }
  }
  nvPTXCompilerDestroy(&h);
  return (int)rc;
}
