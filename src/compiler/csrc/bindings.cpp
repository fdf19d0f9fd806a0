// nanobind bindings: conversion only; the logic lives in Python (tilec).
#include <nanobind/nanobind.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "core.h"

namespace nb = nanobind;

NB_MODULE(_core, m) {
  m.doc() = "tilec native core: LLVM IR -> optimized IR -> PTX (NVPTX)";

  // One exception type; tilec.errors turns (kind, message, line, column)
  // into the public exception classes.
  static nb::object core_error =
      nb::borrow(PyErr_NewException("tilec._core.CoreError", PyExc_RuntimeError,
                                    nullptr));
  m.attr("CoreError") = core_error;
  nb::register_exception_translator(
      [](const std::exception_ptr &p, void *) {
        try {
          std::rethrow_exception(p);
        } catch (const tilec::CoreError &e) {
          nb::object inst =
              core_error(nb::str(e.kind.c_str()), nb::str(e.what()),
                         nb::int_(e.line), nb::int_(e.column));
          PyErr_SetObject(core_error.ptr(), inst.ptr());
        }
      });

  m.def("llvm_version", &tilec::llvm_version);
  m.def("registered_targets", &tilec::registered_targets);
  m.def("host_cpu", &tilec::host_cpu);
  m.def("host_features", &tilec::host_features);
  m.def("target_info", [](const std::string &triple) {
    auto info = tilec::target_info(triple);
    return nb::make_tuple(info.processors, info.features);
  });

  nb::class_<tilec::Module>(m, "Module")
      .def(
          "__init__",
          [](tilec::Module *self, nb::bytes data, const std::string &name) {
            std::string buf(data.c_str(), data.size());
            nb::gil_scoped_release release;
            new (self) tilec::Module(buf, name);
          },
          nb::arg("data"), nb::arg("name") = "<input>")
      .def("close", &tilec::Module::close)
      .def_prop_ro("closed", &tilec::Module::closed)
      .def("to_text", &tilec::Module::to_text)
      .def("to_bitcode",
           [](const tilec::Module &self) {
             std::string bc = self.to_bitcode();
             return nb::bytes(bc.data(), bc.size());
           })
      .def("functions",
           [](const tilec::Module &self) {
             nb::list out;
             for (const auto &f : self.functions())
               out.append(nb::make_tuple(f.name, f.is_kernel, f.is_declaration,
                                         f.return_type, f.param_types,
                                         f.param_names));
             return out;
           })
      .def("verify", &tilec::Module::verify)
      .def("set_target", &tilec::Module::set_target)
      .def("set_module_flag_i32", &tilec::Module::set_module_flag_i32)
      .def("link_bitcode_internalized",
           &tilec::Module::link_bitcode_internalized,
           nb::call_guard<nb::gil_scoped_release>())
      .def(
          "optimize",
          [](tilec::Module &self, const std::string &triple,
             const std::string &cpu, const std::string &features, int level,
             bool dump_passes) {
            std::vector<tilec::PassDump> dumps;
            {
              nb::gil_scoped_release release;
              dumps = self.optimize(triple, cpu, features, level, dump_passes);
            }
            nb::list out;
            for (const auto &d : dumps)
              out.append(nb::make_tuple(d.pass, d.unit, d.ir));
            return out;
          },
          nb::arg("triple"), nb::arg("cpu"), nb::arg("features"),
          nb::arg("level"), nb::arg("dump_passes") = false)
      .def("emit_assembly", &tilec::Module::emit_assembly, nb::arg("triple"),
           nb::arg("cpu"), nb::arg("features"), nb::arg("level"),
           nb::arg("pic") = false, nb::call_guard<nb::gil_scoped_release>())
      .def(
          "emit_object",
          [](tilec::Module &self, const std::string &triple,
             const std::string &cpu, const std::string &features, int level,
             bool pic) {
            std::string obj;
            {
              nb::gil_scoped_release release;
              obj = self.emit_object(triple, cpu, features, level, pic);
            }
            return nb::bytes(obj.data(), obj.size());
          },
          nb::arg("triple"), nb::arg("cpu"), nb::arg("features"),
          nb::arg("level"), nb::arg("pic") = false)
      .def("specialize", &tilec::Module::specialize, nb::arg("kernel"),
           nb::arg("new_name"), nb::arg("constants"), nb::arg("multiples"));
}
