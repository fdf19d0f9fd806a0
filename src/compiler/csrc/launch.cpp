// tilec._launch: check and pack kernel arguments and call cuLaunchKernel, in native code.
//
// The module never links libcuda: the driver is dlopen'ed ("libcuda.so.1") the first time a
// kernel is bound to a context, so importing tilec works on machines without a GPU, and the
// wheel does not depend on the driver's version. No LLVM here; only nanobind and the C API.
//
// Argument checks mirror tilec/launch.py and tilec/backends/cuda/launch.py (the Python packer,
// kept as the reference). When this code refuses an argument it does not build the message
// itself: it asks the Python packer, which raises the one error text tilec has (or, for an
// object this code does not understand, packs it), so both paths can never disagree.

#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <dlfcn.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

namespace nb = nanobind;
using namespace nb::literals;

namespace {

// The driver types we need, as the driver API declares them: no cuda.h at build time.
using CUresult = int;
struct CUctx_st;
struct CUfunc_st;
struct CUstream_st;
using CUcontext = CUctx_st *;
using CUfunction = CUfunc_st *;
using CUstream = CUstream_st *;
constexpr int kMaxDynamicSharedAttr = 8;  // CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
constexpr unsigned kStaticSharedLimit = 48 * 1024;
constexpr CUresult kInvalidContext = 201;  // CUDA_ERROR_INVALID_CONTEXT

struct Driver {
  bool tried = false;
  bool ok = false;
  std::string error;
  CUresult (*ctx_get_current)(CUcontext *) = nullptr;
  CUresult (*launch_kernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned,
                            unsigned, unsigned, CUstream, void **, void **) = nullptr;
  CUresult (*func_set_attribute)(CUfunction, int, int) = nullptr;
  CUresult (*get_error_name)(CUresult, const char **) = nullptr;
  CUresult (*get_error_string)(CUresult, const char **) = nullptr;
};

Driver &driver() {
  static Driver d;
  return d;
}

// Called with the GIL held, so once is enough without a lock.
bool load_driver() {
  Driver &d = driver();
  if (d.tried) return d.ok;
  d.tried = true;
  void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) {
    const char *e = dlerror();
    d.error = e ? e : "dlopen(libcuda.so.1) failed";
    return false;
  }
  auto sym = [&](const char *name) {
    void *p = dlsym(h, name);
    if (p == nullptr) d.error += std::string(d.error.empty() ? "" : "; ") + "no " + name;
    return p;
  };
  d.ctx_get_current = reinterpret_cast<decltype(d.ctx_get_current)>(sym("cuCtxGetCurrent"));
  d.launch_kernel = reinterpret_cast<decltype(d.launch_kernel)>(sym("cuLaunchKernel"));
  d.func_set_attribute =
      reinterpret_cast<decltype(d.func_set_attribute)>(sym("cuFuncSetAttribute"));
  d.get_error_name = reinterpret_cast<decltype(d.get_error_name)>(sym("cuGetErrorName"));
  d.get_error_string = reinterpret_cast<decltype(d.get_error_string)>(sym("cuGetErrorString"));
  d.ok = d.error.empty();
  return d.ok;
}

// tilec.errors' classes, looked up once (kept for the life of the process on purpose: a static
// nb::object would be released after the interpreter is gone).
PyObject *error_class(const char *name) {
  static PyObject *module = nullptr;
  if (module == nullptr) {
    module = PyImport_ImportModule("tilec.errors");
    if (module == nullptr) throw nb::python_error();
  }
  PyObject *cls = PyObject_GetAttrString(module, name);
  if (cls == nullptr) throw nb::python_error();
  Py_DECREF(cls);  // the module keeps it alive
  return cls;
}

[[noreturn]] void raise(const char *cls, const std::string &message) {
  PyErr_SetString(error_class(cls), message.c_str());
  throw nb::python_error();
}

[[noreturn]] void raise_cuda(const char *call, CUresult code, const char *name,
                             const char *desc) {
  PyObject *exc = PyObject_CallFunction(error_class("CudaError"), "siss", call, code, name, desc);
  if (exc == nullptr) throw nb::python_error();
  PyErr_SetObject(reinterpret_cast<PyObject *>(Py_TYPE(exc)), exc);
  Py_DECREF(exc);
  throw nb::python_error();
}

[[noreturn]] void raise_cuda(const char *call, CUresult code) {
  Driver &d = driver();
  const char *name = nullptr;
  const char *desc = nullptr;
  if (d.get_error_name == nullptr || d.get_error_name(code, &name) != 0 || name == nullptr)
    name = "CUDA_ERROR";
  if (d.get_error_string == nullptr || d.get_error_string(code, &desc) != 0 || desc == nullptr)
    desc = "unknown error";
  raise_cuda(call, code, name, desc);
}

enum class Kind : uint8_t { Ptr, I8, I16, I32, I64, F32, F64 };

size_t kind_size(Kind k) {
  switch (k) {
    case Kind::I8: return 1;
    case Kind::I16: return 2;
    case Kind::I32:
    case Kind::F32: return 4;
    default: return 8;
  }
}

Kind parse_kind(const std::string &s) {
  if (s == "ptr") return Kind::Ptr;
  if (s == "i8") return Kind::I8;
  if (s == "i16") return Kind::I16;
  if (s == "i32") return Kind::I32;
  if (s == "i64") return Kind::I64;
  if (s == "float") return Kind::F32;
  if (s == "double") return Kind::F64;
  throw nb::value_error(("tilec._launch: unknown parameter kind " + s).c_str());
}

PyObject *interned(const char *s) {
  PyObject *o = PyUnicode_InternFromString(s);
  if (o == nullptr) throw nb::python_error();
  return o;  // kept for the life of the process
}

struct Names {
  PyObject *data_ptr = interned("data_ptr");
  PyObject *device = interned("device");
  PyObject *type = interned("type");
  PyObject *index = interned("index");
  PyObject *cai = interned("__cuda_array_interface__");
  PyObject *cuda_stream = interned("cuda_stream");
  PyObject *name = interned("__name__");
  PyObject *stream = interned("stream");
  PyObject *shared_mem = interned("shared_mem");
  PyObject *cuda = interned("cuda");
  PyObject *is_cuda = interned("is_cuda");
  PyObject *get_device = interned("get_device");
};

Names &names() {
  static Names *n = new Names();
  return *n;
}

// A Python int (no bool) as a 64-bit pointer value: 0..2**64-1.
bool ptr_from_long(PyObject *v, uint64_t &out) {
  int overflow = 0;
  long long s = PyLong_AsLongLongAndOverflow(v, &overflow);
  if (overflow == 0) {
    if (s == -1 && PyErr_Occurred()) {
      PyErr_Clear();
      return false;
    }
    if (s < 0) return false;
    out = static_cast<uint64_t>(s);
    return true;
  }
  if (overflow < 0) return false;
  unsigned long long u = PyLong_AsUnsignedLongLong(v);
  if (u == static_cast<unsigned long long>(-1) && PyErr_Occurred()) {
    PyErr_Clear();
    return false;
  }
  out = u;
  return true;
}

// "cuda", "cuda:1", "cpu": (is cuda, index or -1).
bool parse_device_string(PyObject *s, bool &is_cuda, long &index) {
  Py_ssize_t n = 0;
  const char *text = PyUnicode_AsUTF8AndSize(s, &n);
  if (text == nullptr) {
    PyErr_Clear();
    return false;
  }
  std::string str(text, static_cast<size_t>(n));
  size_t colon = str.find(':');
  std::string kind = str.substr(0, colon);
  is_cuda = kind == "cuda";
  index = -1;
  if (colon != std::string::npos) {
    std::string idx = str.substr(colon + 1);
    bool digits = !idx.empty() && idx.size() < 10;
    for (char c : idx) digits = digits && c >= '0' && c <= '9';
    if (digits) index = std::stol(idx);
  }
  return true;
}

// A tensor-like object's device (torch.device, or a string): host memory, or another device
// than the current one, is refused. No `device` attribute: nothing to check.
bool device_ok(PyObject *v, long current) {
  Names &nm = names();
  PyObject *dev = PyObject_GetAttr(v, nm.device);
  if (dev == nullptr) {
    PyErr_Clear();
    return true;
  }
  bool is_cuda = false;
  long index = -1;
  bool ok = true;
  if (dev == Py_None) {
    Py_DECREF(dev);
    return true;
  }
  if (PyUnicode_Check(dev)) {
    ok = parse_device_string(dev, is_cuda, index);
  } else {
    PyObject *type = PyObject_GetAttr(dev, nm.type);
    if (type == nullptr || !PyUnicode_Check(type)) {
      ok = false;
    } else {
      is_cuda = PyUnicode_Compare(type, nm.cuda) == 0;
    }
    Py_XDECREF(type);
    PyObject *idx = ok ? PyObject_GetAttr(dev, nm.index) : nullptr;
    if (ok && idx == nullptr) {
      PyErr_Clear();
    } else if (ok && idx != Py_None) {
      if (!PyLong_Check(idx) || PyBool_Check(idx)) {
        ok = false;
      } else {
        index = PyLong_AsLong(idx);
        if (index == -1 && PyErr_Occurred()) {
          PyErr_Clear();
          ok = false;
        }
      }
    }
    Py_XDECREF(idx);
  }
  if (PyErr_Occurred()) PyErr_Clear();
  Py_DECREF(dev);
  if (!ok || !is_cuda) return false;
  return current < 0 || index < 0 || index == current;
}

bool type_named(PyObject *v, const char *want) {
  PyObject *n = PyObject_GetAttr(reinterpret_cast<PyObject *>(Py_TYPE(v)), names().name);
  if (n == nullptr) {
    PyErr_Clear();
    return false;
  }
  bool same = PyUnicode_Check(n) && PyUnicode_CompareWithASCIIString(n, want) == 0;
  Py_DECREF(n);
  return same;
}

bool pack_cai(PyObject *cai, uint64_t &out) {
  if (!PyDict_Check(cai)) return false;
  PyObject *data = PyDict_GetItemString(cai, "data");  // borrowed
  PyObject *mask = PyDict_GetItemString(cai, "mask");
  if (data == nullptr || (mask != nullptr && mask != Py_None) || !PyTuple_Check(data) ||
      PyTuple_Size(data) < 1)
    return false;
  PyObject *addr = PyNumber_Long(PyTuple_GetItem(data, 0));
  if (addr == nullptr) {
    PyErr_Clear();
    return false;
  }
  bool ok = ptr_from_long(addr, out);
  Py_DECREF(addr);
  return ok;
}

// torch.Tensor, once torch is imported (looked up again until then; kept for the process).
PyObject *torch_tensor_type() {
  static PyObject *cached = nullptr;
  if (cached != nullptr) return cached;
  PyObject *modules = PySys_GetObject("modules");  // borrowed
  PyObject *torch = modules != nullptr ? PyDict_GetItemString(modules, "torch") : nullptr;
  if (torch == nullptr) return nullptr;
  PyObject *type = PyObject_GetAttrString(torch, "Tensor");
  if (type == nullptr || !PyType_Check(type)) {  // torch is still being imported
    PyErr_Clear();
    Py_XDECREF(type);
    return nullptr;
  }
  cached = type;
  return cached;
}

// DLPack's C exchange table (DLPack 1.2: a PyCapsule named "dlpack_exchange_api" in the
// type's `__dlpack_c_exchange_api__`). One C call gives a tensor's address and device, where
// torch's methods cost three calls through its argument parser per tensor. Declared here
// with the layout DLPack 1.x fixes, so that no DLPack header is needed at build time.
struct DlDevice {
  int32_t type;  // DLDeviceType
  int32_t id;
};
struct DlDataType {
  uint8_t code;
  uint8_t bits;
  uint16_t lanes;
};
struct DlTensor {
  void *data;
  DlDevice device;
  int32_t ndim;
  DlDataType dtype;
  int64_t *shape;
  int64_t *strides;
  uint64_t byte_offset;
};
struct DlExchangeHeader {
  uint32_t major;
  uint32_t minor;
  DlExchangeHeader *prev;  // an older table, for consumers of an older major version
};
struct DlExchange {
  DlExchangeHeader header;
  void *managed_tensor_allocator;
  void *managed_tensor_from_py_object_no_sync;
  void *managed_tensor_to_py_object_no_sync;
  int (*dltensor_from_py_object_no_sync)(void *object, DlTensor *out);  // may be NULL
  void *current_work_stream;
};
constexpr int32_t kDlCpu = 1;
constexpr int32_t kDlCuda = 2;
constexpr uint32_t kDlMajor = 1;  // the DlTensor layout above

// The table of major version 1 a type offers, or nullptr. Answers are kept per type (the spec
// allows it), holding a reference so that a freed type's address cannot come back as another.
const DlExchange *exchange_table(PyTypeObject *type) {
  struct Seen {
    PyTypeObject *type;
    const DlExchange *api;
  };
  static Seen seen[16];
  static size_t nseen = 0;
  for (size_t i = 0; i < nseen; ++i)
    if (seen[i].type == type) return seen[i].api;
  const DlExchange *api = nullptr;
  static PyObject *attr = interned("__dlpack_c_exchange_api__");
  PyObject *cap = PyObject_GetAttr(reinterpret_cast<PyObject *>(type), attr);
  if (cap == nullptr) {
    PyErr_Clear();
  } else {
    if (PyCapsule_IsValid(cap, "dlpack_exchange_api")) {
      auto *h = static_cast<DlExchangeHeader *>(PyCapsule_GetPointer(cap, "dlpack_exchange_api"));
      while (h != nullptr && h->major > kDlMajor) h = h->prev;
      if (h != nullptr && h->major == kDlMajor) {
        api = reinterpret_cast<const DlExchange *>(h);
        if (api->dltensor_from_py_object_no_sync == nullptr) api = nullptr;
      }
    }
    Py_DECREF(cap);  // the table itself lives as long as the process (the spec says so)
  }
  if (nseen < sizeof(seen) / sizeof(seen[0])) {
    Py_INCREF(reinterpret_cast<PyObject *>(type));
    seen[nseen++] = Seen{type, api};
  }
  return api;
}

enum class Answer { Packed, Refused, Undecided };

// CUDA memory is packed (or refused when on another device than the current one) and host
// memory refused; anything else (managed memory, a producer that cannot describe the object)
// is left to the other ways of reading an address.
Answer pack_exchange(const DlExchange *api, PyObject *v, long device, uint64_t &out) {
  DlTensor t{};
  if (api->dltensor_from_py_object_no_sync(v, &t) != 0) {
    PyErr_Clear();
    return Answer::Undecided;
  }
  if (t.device.type == kDlCpu) return Answer::Refused;
  if (t.device.type != kDlCuda) return Answer::Undecided;
  if (device >= 0 && t.device.id != device) return Answer::Refused;
  out = reinterpret_cast<uintptr_t>(t.data) + t.byte_offset;
  return Answer::Packed;
}

// A torch tensor's address. `is_cuda` and `get_device()` say what `tensor.device` says (the
// Python packer's test) without making a torch.device per argument, which costs more than
// the rest of the packing.
bool pack_torch(PyObject *v, long device, uint64_t &out) {
  Names &nm = names();
  PyObject *is_cuda = PyObject_GetAttr(v, nm.is_cuda);
  if (is_cuda == nullptr) {
    PyErr_Clear();
    return false;
  }
  const bool on_cuda = is_cuda == Py_True;
  Py_DECREF(is_cuda);
  if (!on_cuda) return false;
  if (device >= 0) {
    PyObject *index = PyObject_CallMethodObjArgs(v, nm.get_device, nullptr);
    if (index == nullptr || !PyLong_Check(index)) {
      PyErr_Clear();
      Py_XDECREF(index);
      return false;
    }
    const long got = PyLong_AsLong(index);
    Py_DECREF(index);
    if (got != device) {
      PyErr_Clear();
      return false;
    }
  }
  PyObject *addr = PyObject_CallMethodObjArgs(v, nm.data_ptr, nullptr);
  if (addr == nullptr) {
    PyErr_Clear();
    return false;
  }
  const bool ok = PyLong_Check(addr) && !PyBool_Check(addr) && ptr_from_long(addr, out);
  Py_DECREF(addr);
  return ok;
}

// A device address: None, an int, an object whose type offers DLPack's C exchange table
// (torch >= 2.10), one with data_ptr() (torch), one with __cuda_array_interface__, a
// CUdeviceptr or anything with __index__.
bool pack_pointer(PyObject *v, long device, uint64_t &out) {
  Names &nm = names();
  if (v == Py_None) {
    out = 0;
    return true;
  }
  if (PyBool_Check(v)) return false;
  if (PyLong_CheckExact(v)) return ptr_from_long(v, out);
  if (const DlExchange *api = exchange_table(Py_TYPE(v))) {
    const Answer a = pack_exchange(api, v, device, out);
    if (a != Answer::Undecided) return a == Answer::Packed;
  }
  PyObject *tensor = torch_tensor_type();
  if (tensor != nullptr && PyObject_TypeCheck(v, reinterpret_cast<PyTypeObject *>(tensor)))
    return pack_torch(v, device, out);
  PyObject *dp = PyObject_GetAttr(v, nm.data_ptr);
  if (dp == nullptr) {
    PyErr_Clear();
  } else if (PyCallable_Check(dp)) {
    bool ok = device_ok(v, device);
    PyObject *r = ok ? PyObject_CallNoArgs(dp) : nullptr;
    Py_DECREF(dp);
    if (r == nullptr) {
      PyErr_Clear();
      return false;
    }
    ok = PyLong_Check(r) && !PyBool_Check(r) && ptr_from_long(r, out);
    Py_DECREF(r);
    return ok;
  } else {
    Py_DECREF(dp);
  }
  PyObject *cai = PyObject_GetAttr(v, nm.cai);
  if (cai == nullptr) {
    PyErr_Clear();
  } else if (cai != Py_None) {
    bool ok = pack_cai(cai, out);
    Py_DECREF(cai);
    return ok;
  } else {
    Py_DECREF(cai);
  }
  if (PyFloat_Check(v) || PyComplex_Check(v) || PyUnicode_Check(v) || PyBytes_Check(v))
    return false;
  PyObject *as_int = nullptr;
  if (PyLong_Check(v) || type_named(v, "CUdeviceptr")) {
    as_int = PyNumber_Long(v);
  } else if (PyIndex_Check(v)) {
    as_int = PyNumber_Index(v);
  } else {
    return false;
  }
  if (as_int == nullptr) {
    PyErr_Clear();
    return false;
  }
  bool ok = ptr_from_long(as_int, out);
  Py_DECREF(as_int);
  return ok;
}

// LLVM integers carry no sign: the signed and the unsigned range are both accepted.
bool pack_int(PyObject *v, Kind k, uint64_t &slot) {
  if (PyBool_Check(v) || PyFloat_Check(v)) return false;
  PyObject *idx = nullptr;
  if (!PyLong_Check(v)) {
    if (!PyIndex_Check(v)) return false;
    idx = PyNumber_Index(v);
    if (idx == nullptr) {
      PyErr_Clear();
      return false;
    }
    v = idx;
  }
  const unsigned bits = static_cast<unsigned>(kind_size(k) * 8);
  int overflow = 0;
  long long s = PyLong_AsLongLongAndOverflow(v, &overflow);
  uint64_t bitsval = 0;
  bool ok = true;
  if (overflow == 0) {
    if (s == -1 && PyErr_Occurred()) {
      PyErr_Clear();
      ok = false;
    } else if (bits < 64) {
      const long long lo = -(1LL << (bits - 1));
      const long long hi = 1LL << bits;  // exclusive
      ok = s >= lo && s < hi;
    }
    bitsval = static_cast<uint64_t>(s);
  } else if (overflow > 0 && bits == 64) {
    unsigned long long u = PyLong_AsUnsignedLongLong(v);
    if (u == static_cast<unsigned long long>(-1) && PyErr_Occurred()) {
      PyErr_Clear();
      ok = false;
    }
    bitsval = u;
  } else {
    ok = false;
  }
  Py_XDECREF(idx);
  if (!ok) return false;
  slot = 0;
  switch (k) {
    case Kind::I8: {
      uint8_t x = static_cast<uint8_t>(bitsval);
      std::memcpy(&slot, &x, 1);
      break;
    }
    case Kind::I16: {
      uint16_t x = static_cast<uint16_t>(bitsval);
      std::memcpy(&slot, &x, 2);
      break;
    }
    case Kind::I32: {
      uint32_t x = static_cast<uint32_t>(bitsval);
      std::memcpy(&slot, &x, 4);
      break;
    }
    default:
      slot = bitsval;
  }
  return true;
}

bool pack_float(PyObject *v, Kind k, uint64_t &slot) {
  if (PyBool_Check(v) || PyUnicode_Check(v) || PyBytes_Check(v)) return false;
  double d;
  if (PyFloat_Check(v) || PyLong_Check(v) || PyObject_HasAttrString(v, "__float__")) {
    d = PyFloat_AsDouble(v);
    if (d == -1.0 && PyErr_Occurred()) {
      PyErr_Clear();
      return false;
    }
  } else {
    return false;
  }
  slot = 0;
  if (k == Kind::F32) {
    if (std::isfinite(d) && std::fabs(d) > static_cast<double>(std::numeric_limits<float>::max()))
      return false;
    float f = static_cast<float>(d);
    std::memcpy(&slot, &f, 4);
  } else {
    std::memcpy(&slot, &d, 8);
  }
  return true;
}

struct Binding {
  uintptr_t ctx;
  uintptr_t function;
  long device;
  unsigned dynamic_shared;  // the largest dynamic shared size already allowed
};

constexpr size_t kInlineParams = 16;

class Launcher {
 public:
  Launcher(std::string signature, const std::vector<std::string> &kinds, nb::object fallback,
           nb::object resolver)
      : signature_(std::move(signature)),
        fallback_(std::move(fallback)),
        resolver_(std::move(resolver)) {
    for (const auto &k : kinds) kinds_.push_back(parse_kind(k));
  }

  size_t nparams() const { return kinds_.size(); }
  const std::string &signature() const { return signature_; }

  // Index of the first argument this code refuses (-1: all packed), without the fallback.
  long check(nb::tuple args, long device, uint64_t *slots) const {
    const size_t n = static_cast<size_t>(PyTuple_Size(args.ptr()));
    if (n != kinds_.size()) return static_cast<long>(std::min(n, kinds_.size()));
    for (size_t i = 0; i < n; ++i) {
      PyObject *v = PyTuple_GetItem(args.ptr(), static_cast<Py_ssize_t>(i));
      Kind k = kinds_[i];
      bool ok = k == Kind::Ptr ? pack_pointer(v, device, slots[i])
                : (k == Kind::F32 || k == Kind::F64) ? pack_float(v, k, slots[i])
                                                     : pack_int(v, k, slots[i]);
      if (!ok) return static_cast<long>(i);
    }
    return -1;
  }

  // Check and pack into slots; a refused argument goes to the Python packer, which raises
  // tilec's error for it (or packs an object only it understands).
  void pack_into(nb::tuple args, long device, uint64_t *slots) const {
    if (check(args, device, slots) < 0) return;
    nb::object dev = device < 0 ? nb::object(nb::none()) : nb::object(nb::int_(device));
    nb::object packed = fallback_(args, dev);
    if (!nb::isinstance<nb::bytes>(packed))
      raise("LaunchArgumentError", "kernel " + signature_ + ": the reference packer returned no bytes");
    nb::bytes b = nb::borrow<nb::bytes>(packed);
    const char *data = b.c_str();
    size_t off = 0;
    const size_t size = b.size();
    for (size_t i = 0; i < kinds_.size(); ++i) {
      const size_t sz = kind_size(kinds_[i]);
      if (off + sz > size) raise("LaunchArgumentError", "kernel " + signature_ + ": short packing");
      slots[i] = 0;
      std::memcpy(&slots[i], data + off, sz);
      off += sz;
    }
  }

  nb::bytes pack(nb::tuple args, long device) const {
    std::vector<uint64_t> slots(std::max<size_t>(1, kinds_.size()));
    pack_into(args, device, slots.data());
    std::string out;
    for (size_t i = 0; i < kinds_.size(); ++i)
      out.append(reinterpret_cast<const char *>(&slots[i]), kind_size(kinds_[i]));
    return nb::bytes(out.data(), out.size());
  }

  void bind(uintptr_t ctx, uintptr_t function, long device) {
    if (!load_driver()) raise("CudaUnavailableError", "no CUDA driver: " + driver().error);
    for (auto &b : bindings_) {
      if (b.ctx == ctx) {
        b = Binding{ctx, function, device, 0};
        return;
      }
    }
    bindings_.push_back(Binding{ctx, function, device, 0});
  }

  void unbind_all() { bindings_.clear(); }

  std::vector<std::tuple<uintptr_t, uintptr_t, long>> bindings() const {
    std::vector<std::tuple<uintptr_t, uintptr_t, long>> out;
    for (const auto &b : bindings_) out.emplace_back(b.ctx, b.function, b.device);
    return out;
  }

  void launch(nb::tuple args, const unsigned grid[3], const unsigned block[3], unsigned shared,
              uintptr_t stream) {
    uint64_t inline_slots[kInlineParams];
    std::vector<uint64_t> heap_slots;
    uint64_t *slots = inline_slots;
    if (kinds_.size() > kInlineParams) {
      heap_slots.resize(kinds_.size());
      slots = heap_slots.data();
    }
    Binding *b = current();
    if (b == nullptr) {
      // First launch in this context: the arguments are checked before the module is loaded.
      pack_into(args, -1, slots);
      resolver_();
      b = current();
      if (b == nullptr) {
        const std::string why = "kernel " + signature_ + ": no function bound to the current context";
        raise_cuda("cuCtxGetCurrent", kInvalidContext, "CUDA_ERROR_INVALID_CONTEXT", why.c_str());
      }
    }
    // A copy: the fallback packer runs Python, and another thread may bind meanwhile.
    const Binding bound = *b;
    pack_into(args, bound.device, slots);
    void *params[kInlineParams];
    std::vector<void *> heap_params;
    void **pp = params;
    if (kinds_.size() > kInlineParams) {
      heap_params.resize(kinds_.size());
      pp = heap_params.data();
    }
    for (size_t i = 0; i < kinds_.size(); ++i) pp[i] = &slots[i];
    Driver &d = driver();
    CUfunction fn = reinterpret_cast<CUfunction>(bound.function);
    if (shared > kStaticSharedLimit && shared > bound.dynamic_shared) {
      CUresult rc = d.func_set_attribute(fn, kMaxDynamicSharedAttr, static_cast<int>(shared));
      if (rc != 0) raise_cuda("cuFuncSetAttribute", rc);
      for (auto &other : bindings_)
        if (other.ctx == bound.ctx && other.function == bound.function) other.dynamic_shared = shared;
    }
    CUresult rc;
    {
      nb::gil_scoped_release release;
      rc = d.launch_kernel(fn, grid[0], grid[1], grid[2], block[0], block[1], block[2], shared,
                           reinterpret_cast<CUstream>(stream), pp, nullptr);
    }
    if (rc != 0) raise_cuda("cuLaunchKernel", rc);
  }

 private:
  Binding *current() {
    if (bindings_.empty()) return nullptr;  // nothing bound yet: the driver may not be loaded
    CUcontext ctx = nullptr;
    CUresult rc = driver().ctx_get_current(&ctx);
    if (rc != 0) raise_cuda("cuCtxGetCurrent", rc);
    const uintptr_t key = reinterpret_cast<uintptr_t>(ctx);
    if (key == 0) return nullptr;
    for (auto &b : bindings_)
      if (b.ctx == key) return &b;
    return nullptr;
  }

  std::string signature_;
  std::vector<Kind> kinds_;
  nb::object fallback_;
  nb::object resolver_;
  std::vector<Binding> bindings_;
};

long device_arg(nb::handle device) {
  if (device.is_none()) return -1;
  long d = nb::cast<long>(device);
  if (d < 0) throw nb::value_error("device must be a non-negative ordinal or None");
  return d;
}

unsigned shared_arg(PyObject *v) {
  if (v != nullptr && v != Py_None && PyLong_Check(v) && !PyBool_Check(v)) {
    long long s = PyLong_AsLongLong(v);
    if (!(s == -1 && PyErr_Occurred()) && s >= 0 && s <= std::numeric_limits<int>::max())
      return static_cast<unsigned>(s);
    PyErr_Clear();
  }
  nb::str repr = nb::repr(nb::handle(v ? v : Py_None));
  PyErr_Format(PyExc_TypeError, "shared_mem must be a non-negative int, got %s", repr.c_str());
  throw nb::python_error();
}

uintptr_t stream_arg(PyObject *s) {
  if (s == nullptr || s == Py_None) return 0;
  PyObject *handle = nullptr;
  if (PyLong_Check(s)) {
    handle = s;
    Py_INCREF(handle);
  } else {
    handle = PyObject_GetAttr(s, names().cuda_stream);
    if (handle == nullptr) {
      PyErr_Clear();
      if (type_named(s, "CUstream")) handle = PyNumber_Long(s);
      if (handle == nullptr) PyErr_Clear();
    }
  }
  uint64_t value = 0;
  bool ok = handle != nullptr && PyLong_Check(handle) && !PyBool_Check(handle) &&
            ptr_from_long(handle, value);
  Py_XDECREF(handle);
  if (!ok) {
    nb::str repr = nb::repr(nb::handle(s));
    PyErr_Format(PyExc_TypeError,
                 "stream must be None, an int handle, a CUstream or have .cuda_stream, got %s",
                 repr.c_str());
    throw nb::python_error();
  }
  return static_cast<uintptr_t>(value);
}

// `kernel[grid, block]` with the launch configuration checked once: calling it packs the
// arguments and launches, all here.
struct BoundLaunch {
  nb::object owner;  // keeps the Launcher alive
  Launcher *launcher;
  unsigned grid[3];
  unsigned block[3];

  void call(nb::args args, nb::kwargs kwargs) {
    PyObject *stream = nullptr;
    PyObject *shared = nullptr;
    if (kwargs.size() != 0) {
      Py_ssize_t pos = 0;
      PyObject *key = nullptr;
      PyObject *value = nullptr;
      Names &nm = names();
      while (PyDict_Next(kwargs.ptr(), &pos, &key, &value)) {
        if (PyUnicode_Compare(key, nm.stream) == 0) {
          stream = value;
        } else if (PyUnicode_Compare(key, nm.shared_mem) == 0) {
          shared = value;
        } else {
          nb::str repr = nb::repr(nb::handle(key));
          PyErr_Format(PyExc_TypeError,
                       "a launch takes the kernel's arguments and stream=, shared_mem=; got %s",
                       repr.c_str());
          throw nb::python_error();
        }
      }
    }
    unsigned smem = shared == nullptr ? 0 : shared_arg(shared);
    launcher->launch(nb::borrow<nb::tuple>(args), grid, block, smem, stream_arg(stream));
  }
};

}  // namespace

NB_MODULE(_launch, m) {
  m.doc() = "tilec's native launch path: argument packing and cuLaunchKernel (libcuda dlopen'ed)";
  // Kernels, and with them their launchers, often live in module globals until the interpreter
  // exits, and Python does not free those before extension modules go: nanobind would report
  // them as leaks at every exit. Reference counts are tested instead (test_native_launch.py).
  nb::set_leak_warnings(false);

  nb::class_<Launcher>(m, "Launcher")
      .def(nb::init<std::string, const std::vector<std::string> &, nb::object, nb::object>(),
           "signature"_a, "kinds"_a, "fallback"_a, "resolver"_a)
      .def_prop_ro("nparams", &Launcher::nparams)
      .def_prop_ro("signature", &Launcher::signature)
      .def(
          "check",
          [](const Launcher &self, nb::tuple args, nb::handle device) {
            std::vector<uint64_t> slots(std::max<size_t>(1, self.nparams()));
            return self.check(args, device_arg(device), slots.data());
          },
          "args"_a, "device"_a = nb::none(),
          "Index of the first argument the native checks refuse (-1: none), without the fallback.")
      .def(
          "pack",
          [](const Launcher &self, nb::tuple args, nb::handle device) {
            return self.pack(args, device_arg(device));
          },
          "args"_a, "device"_a = nb::none(),
          "The packed argument bytes (each argument's value, in order, no padding).")
      .def("bind", &Launcher::bind, "context"_a, "function"_a, "device"_a)
      .def("unbind_all", &Launcher::unbind_all)
      .def_prop_ro("bindings", &Launcher::bindings)
      .def(
          "config",
          [](nb::handle self, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
             unsigned bz) {
            BoundLaunch b{nb::borrow(self), &nb::cast<Launcher &>(self), {gx, gy, gz}, {bx, by, bz}};
            return b;
          },
          "gx"_a, "gy"_a, "gz"_a, "bx"_a, "by"_a, "bz"_a)
      .def(
          "launch",
          [](Launcher &self, nb::tuple args, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
             unsigned by, unsigned bz, nb::handle shared_mem, nb::handle stream) {
            const unsigned grid[3] = {gx, gy, gz};
            const unsigned block[3] = {bx, by, bz};
            self.launch(args, grid, block, shared_arg(shared_mem.ptr()), stream_arg(stream.ptr()));
          },
          "args"_a, "gx"_a, "gy"_a, "gz"_a, "bx"_a, "by"_a, "bz"_a, "shared_mem"_a = 0,
          "stream"_a = nb::none());

  nb::class_<BoundLaunch>(m, "BoundLaunch")
      .def("__call__", &BoundLaunch::call)
      .def_prop_ro("grid", [](const BoundLaunch &b) {
        return nb::make_tuple(b.grid[0], b.grid[1], b.grid[2]);
      })
      .def_prop_ro("block", [](const BoundLaunch &b) {
        return nb::make_tuple(b.block[0], b.block[1], b.block[2]);
      });

  m.def(
      "uses_dlpack_table",
      [](nb::handle type) {
        if (!PyType_Check(type.ptr())) throw nb::type_error("uses_dlpack_table takes a type");
        return exchange_table(reinterpret_cast<PyTypeObject *>(type.ptr())) != nullptr;
      },
      "type"_a,
      "Whether the launcher reads this type's objects through DLPack's C exchange table.");
  m.def("driver_loaded", [] { return driver().ok; });
  m.def("driver_error", [] { return driver().error; });
}
