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
};

struct TargetInfo {
  std::vector<std::string> processors;  // sm_XX
  std::vector<std::string> features;    // ptxNN, ...
};

std::string llvm_version();
std::vector<std::string> registered_targets();
TargetInfo target_info(const std::string &triple);

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
  void optimize(const std::string &triple, const std::string &cpu,
                const std::string &features, int level);
  std::string emit_assembly(const std::string &triple, const std::string &cpu,
                            const std::string &features, int level);
  void verify() const;

private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  Impl &get() const;
};

}  // namespace tilec
