/* A producer of DLPack's C exchange table (DLPack 1.2's `__dlpack_c_exchange_api__`), for the
 * native launch tests without torch or a GPU. Written from the DLPack specification's layout.
 *
 * fake_dlpack.Array(data, device_type, device_id, byte_offset=0, fail=False): the table answers
 * with those values (or fails with a Python error when `fail`). It also has the attributes the
 * Python packer reads (`device`, `data_ptr()`), which count how often they are asked.
 * fake_dlpack.Future: the same, behind a table of major version 2 whose `prev` is version 1.
 * fake_dlpack.Unknown: only a table of major version 2: a consumer of version 1 must not use it.
 * fake_dlpack.counts() -> (table calls, data_ptr() calls, device reads).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

typedef struct {
  int32_t type;
  int32_t id;
} Device;

typedef struct {
  void *data;
  Device device;
  int32_t ndim;
  uint8_t code, bits;
  uint16_t lanes;
  int64_t *shape;
  int64_t *strides;
  uint64_t byte_offset;
} Tensor;

typedef struct Header {
  uint32_t major, minor;
  struct Header *prev;
} Header;

typedef struct {
  Header header;
  void *allocator, *from_py_managed, *to_py_managed;
  int (*from_py)(void *, Tensor *);
  void *current_work_stream;
} Table;

typedef struct {
  PyObject_HEAD
  unsigned long long data;
  int device_type, device_id;
  unsigned long long byte_offset;
  int fail;
  int64_t shape[1];
} Array;

static long table_calls, data_ptr_calls, device_reads;

static int from_py(void *object, Tensor *out) {
  Array *a = (Array *)object;
  ++table_calls;
  if (a->fail) {
    PyErr_SetString(PyExc_BufferError, "fake_dlpack: this array cannot be described");
    return -1;
  }
  out->data = (void *)(uintptr_t)a->data;
  out->device.type = a->device_type;
  out->device.id = a->device_id;
  out->ndim = 1;
  out->code = 2; /* float */
  out->bits = 32;
  out->lanes = 1;
  out->shape = a->shape;
  out->strides = NULL;
  out->byte_offset = a->byte_offset;
  return 0;
}

static Table v1 = {{1, 2, NULL}, NULL, NULL, NULL, from_py, NULL};
static Table v2 = {{2, 0, &v1.header}, NULL, NULL, NULL, NULL, NULL};
static Table v2_alone = {{2, 0, NULL}, NULL, NULL, NULL, from_py, NULL};

static int array_init(PyObject *self, PyObject *args, PyObject *kwargs) {
  static char *kw[] = {"data", "device_type", "device_id", "byte_offset", "fail", NULL};
  Array *a = (Array *)self;
  a->byte_offset = 0;
  a->fail = 0;
  a->shape[0] = 4;
  return PyArg_ParseTupleAndKeywords(args, kwargs, "Kii|Kp", kw, &a->data, &a->device_type,
                                     &a->device_id, &a->byte_offset, &a->fail)
             ? 0
             : -1;
}

static PyObject *array_data_ptr(PyObject *self, PyObject *unused) {
  Array *a = (Array *)self;
  (void)unused;
  ++data_ptr_calls;
  return PyLong_FromUnsignedLongLong(a->data + a->byte_offset);
}

/* torch's spelling: "cuda:0", "cpu", else the device type's number. */
static PyObject *array_device(PyObject *self, void *unused) {
  Array *a = (Array *)self;
  (void)unused;
  ++device_reads;
  if (a->device_type == 2) return PyUnicode_FromFormat("cuda:%d", a->device_id);
  if (a->device_type == 1) return PyUnicode_FromString("cpu");
  return PyUnicode_FromFormat("dlpack%d:%d", a->device_type, a->device_id);
}

static PyMethodDef array_methods[] = {
    {"data_ptr", array_data_ptr, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef array_getset[] = {
    {"device", array_device, NULL, NULL, NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot array_slots[] = {
    {Py_tp_init, array_init},
    {Py_tp_methods, array_methods},
    {Py_tp_getset, array_getset},
    {0, NULL},
};

static PyType_Spec array_spec = {"fake_dlpack.Array", sizeof(Array), 0, Py_TPFLAGS_DEFAULT,
                                 array_slots};

static int add_type(PyObject *module, const char *name, Table *table) {
  PyObject *type = PyType_FromSpec(&array_spec);
  if (type == NULL) return -1;
  PyObject *qualname = PyUnicode_FromString(name);
  int rc = qualname == NULL ? -1 : PyObject_SetAttrString(type, "__name__", qualname);
  Py_XDECREF(qualname);
  PyObject *capsule = rc == 0 ? PyCapsule_New(table, "dlpack_exchange_api", NULL) : NULL;
  if (capsule == NULL) rc = -1;
  if (rc == 0) rc = PyObject_SetAttrString(type, "__dlpack_c_exchange_api__", capsule);
  Py_XDECREF(capsule);
  if (rc == 0) rc = PyModule_AddObjectRef(module, name, type);
  Py_DECREF(type);
  return rc;
}

static PyObject *counts(PyObject *module, PyObject *unused) {
  (void)module;
  (void)unused;
  return Py_BuildValue("(lll)", table_calls, data_ptr_calls, device_reads);
}

static PyMethodDef module_methods[] = {
    {"counts", counts, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "fake_dlpack", NULL, -1,
                                        module_methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit_fake_dlpack(void) {
  PyObject *m = PyModule_Create(&module_def);
  if (m == NULL) return NULL;
  if (add_type(m, "Array", &v1) < 0 || add_type(m, "Future", &v2) < 0 ||
      add_type(m, "Unknown", &v2_alone) < 0) {
    Py_DECREF(m);
    return NULL;
  }
  return m;
}
