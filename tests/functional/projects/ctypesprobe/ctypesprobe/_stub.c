/* A stub extension, as llvmlite's: it makes the wheel platform-specific. */
#include <Python.h>

static struct PyModuleDef stub = {PyModuleDef_HEAD_INIT, "_stub", NULL, -1, NULL};

PyMODINIT_FUNC PyInit__stub(void) { return PyModule_Create(&stub); }
