// Thin LLVM core of tilec. This header is deliberately free of LLVM and
// nanobind types: core.cpp is compiled with LLVM's RTTI setting, bindings.cpp
// always with RTTI (nanobind needs it), and they meet only through std types.
#pragma once

#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace tilec {

// kind: "parse", "verify", "link", "target", "codegen", "closed", "usage".
// line/column are 1-based; 0 means "no position" (bitcode, verifier).
class CoreError : public std::runtime_error {
public:
  CoreError(std::string kind, const std::string &message, int line = 0,
            int column = 0)
      : std::runtime_error(message), kind(std::move(kind)), line(line),
        column(column) {}
  std::string kind;
  int line;
  int column;
};

struct FunctionInfo {
  std::string name;
  bool is_kernel;
  bool is_declaration;
  std::string return_type;
  std::vector<std::string> param_types;
  std::vector<std::string> param_names;  // "" where the IR names none
};

// The IR after one LLVM pass: pass name, the unit it ran on, the unit's text.
struct PassDump {
  std::string pass;
  std::string unit;
  std::string ir;
};

struct TargetInfo {
  std::vector<std::string> processors;  // sm_XX
  std::vector<std::string> features;    // ptxNN, ...
};

std::string llvm_version();
std::vector<std::string> registered_targets();
TargetInfo target_info(const std::string &triple);
// LLVM's name for the host processor and the features it reports ("+avx2,...").
std::string host_cpu();
std::string host_features();

class Module {
public:
  // Parses text IR or bitcode (detected by magic) and verifies it.
  Module(const std::string &data, const std::string &name);
  ~Module();
  Module(const Module &) = delete;
  Module &operator=(const Module &) = delete;

  void close();
  bool closed() const;

  std::string to_text() const;
  std::string to_bitcode() const;
  std::vector<FunctionInfo> functions() const;

  // Sets triple and data layout of the NVPTX target machine for `cpu`.
  void set_target(const std::string &triple, const std::string &cpu,
                  const std::string &features);
  void set_module_flag_i32(const std::string &key, int value);
  // Links only what is referenced from `path` and internalizes it. Returns
  // the names of the linked definitions.
  std::vector<std::string> link_bitcode_internalized(const std::string &path);
  // Runs the target machine's O0-O3 pipeline. With dump_passes, returns the
  // IR after every pass (pass managers and adaptors left out).
  std::vector<PassDump> optimize(const std::string &triple,
                                 const std::string &cpu,
                                 const std::string &features, int level,
                                 bool dump_passes = false);
  // Assembly (PTX for NVPTX) or an object file; pic selects position
  // independent code (host shared objects).
  std::string emit_assembly(const std::string &triple, const std::string &cpu,
                            const std::string &features, int level,
                            bool pic = false);
  std::string emit_object(const std::string &triple, const std::string &cpu,
                          const std::string &features, int level,
                          bool pic = false);
  // Adds kernel `new_name` taking the parameters of `kernel` that are not
  // fixed: it calls `kernel` with the constants (parameter index, decimal
  // text) and assumes each (index, k) parameter is a multiple of k. `kernel`
  // becomes internal and always-inline and hands its annotations over.
  void specialize(const std::string &kernel, const std::string &new_name,
                  const std::vector<std::pair<int, std::string>> &constants,
                  const std::vector<std::pair<int, long long>> &multiples);
  void verify() const;

private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  Impl &get() const;
};

}  // namespace tilec
