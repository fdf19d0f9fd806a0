"""LLVM's demangler and xxh3, through ctypes, as llvmlite.binding calls its library."""

import ctypes
import os

_lib = ctypes.CDLL(os.path.join(os.path.dirname(__file__), "libctypesprobe.so"))
_lib.PROBE_XXH3.restype = ctypes.c_uint64
_lib.PROBE_XXH3.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
_lib.PROBE_Demangle.restype = ctypes.c_void_p
_lib.PROBE_Demangle.argtypes = [ctypes.c_char_p]
_lib.PROBE_Free.argtypes = [ctypes.c_void_p]


def llvm_major() -> int:
    return int(_lib.PROBE_LLVMVersionMajor())


def xxh3(data: bytes) -> int:
    return int(_lib.PROBE_XXH3(data, len(data)))


def demangle(name: str) -> str:
    p = _lib.PROBE_Demangle(name.encode())
    try:
        return ctypes.string_at(p).decode()
    finally:
        _lib.PROBE_Free(p)
