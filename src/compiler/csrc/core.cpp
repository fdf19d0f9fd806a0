#include "core.h"

#include <map>
#include <mutex>

#include "llvm/ADT/StringSet.h"
#include "llvm/Analysis/CGSCCPassManager.h"
#include "llvm/Analysis/LoopAnalysisManager.h"
#include "llvm/Bitcode/BitcodeWriter.h"
#include "llvm/Config/llvm-config.h"
#include "llvm/Analysis/LazyCallGraph.h"
#include "llvm/Analysis/LoopInfo.h"
#include "llvm/IR/CallingConv.h"
#include "llvm/IR/Constants.h"
#include "llvm/IR/DiagnosticInfo.h"
#include "llvm/IR/DiagnosticPrinter.h"
#include "llvm/IR/IRBuilder.h"
#include "llvm/IR/PassInstrumentation.h"
#include "llvm/IR/LLVMContext.h"
#include "llvm/IR/LegacyPassManager.h"
#include "llvm/IR/Metadata.h"
#include "llvm/IR/Module.h"
#include "llvm/IR/PassManager.h"
#include "llvm/IR/Verifier.h"
#include "llvm/IRReader/IRReader.h"
#include "llvm/Linker/Linker.h"
#include "llvm/MC/MCSubtargetInfo.h"
#include "llvm/MC/TargetRegistry.h"
#include "llvm/Passes/PassBuilder.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/TargetSelect.h"
#include "llvm/Support/raw_ostream.h"
#include "llvm/Target/TargetMachine.h"
#include "llvm/Target/TargetOptions.h"
#include "llvm/TargetParser/Host.h"
#include "llvm/Transforms/IPO/Internalize.h"
#include "llvm/Transforms/Utils/Cloning.h"

extern "C" {
void LLVMInitializeNVPTXTargetInfo();
void LLVMInitializeNVPTXTarget();
void LLVMInitializeNVPTXTargetMC();
void LLVMInitializeNVPTXAsmPrinter();
#ifdef TILEC_WITH_X86
void LLVMInitializeX86TargetInfo();
void LLVMInitializeX86Target();
void LLVMInitializeX86TargetMC();
void LLVMInitializeX86AsmPrinter();
#endif
}

// LLVM 19's NVPTX target keeps each module's nvvm.annotations (kernel, maxntid,
// reqntid, ...) in a process-wide cache keyed by the Module's and the
// function's addresses, and only its AsmPrinter clears it, for the module it
// emits. We optimize a module and emit a clone of it, so the module's entries
// outlive it: a module or function later allocated at a freed address reads
// another's annotations (a kernel emitted as a .func, another kernel's
// maxntid). We clear a module's entries whenever its functions may have changed
// or it is freed. Not in LLVM's installed headers; the symbol is in
// LLVMNVPTXCodeGen, which we link (CMakeLists.txt requires LLVM 19).
namespace llvm {
void clearAnnotationCache(const Module *Mod);
}

namespace tilec {
namespace {

struct ForgetAnnotations {
  void operator()(llvm::Module *M) const {
    llvm::clearAnnotationCache(M);
    delete M;
  }
};
using OwnedModule = std::unique_ptr<llvm::Module, ForgetAnnotations>;

void init_targets() {
  static std::once_flag once;
  std::call_once(once, [] {
    LLVMInitializeNVPTXTargetInfo();
    LLVMInitializeNVPTXTarget();
    LLVMInitializeNVPTXTargetMC();
    LLVMInitializeNVPTXAsmPrinter();
#ifdef TILEC_WITH_X86
    LLVMInitializeX86TargetInfo();
    LLVMInitializeX86Target();
    LLVMInitializeX86TargetMC();
    LLVMInitializeX86AsmPrinter();
#endif
  });
}

// LLVM's default handler exits the process on errors; collect them instead
// and raise after the LLVM call returns (never throw through LLVM frames).
struct CollectingHandler : llvm::DiagnosticHandler {
  std::vector<std::string> *errors;
  explicit CollectingHandler(std::vector<std::string> *errors)
      : errors(errors) {}
  bool handleDiagnostics(const llvm::DiagnosticInfo &DI) override {
    if (DI.getSeverity() == llvm::DS_Error) {
      std::string msg;
      llvm::raw_string_ostream os(msg);
      llvm::DiagnosticPrinterRawOStream printer(os);
      DI.print(printer);
      errors->push_back(os.str());
    }
    return true;  // handled: warnings and remarks are dropped, not printed
  }
};

const llvm::Target &lookup_target(const std::string &triple) {
  init_targets();
  std::string err;
  const llvm::Target *target = llvm::TargetRegistry::lookupTarget(triple, err);
  if (!target)
    throw CoreError("target", "no LLVM target for triple '" + triple +
                                  "': " + err);
  return *target;
}

llvm::CodeGenOptLevel codegen_level(int level) {
  switch (level) {
  case 0: return llvm::CodeGenOptLevel::None;
  case 1: return llvm::CodeGenOptLevel::Less;
  case 2: return llvm::CodeGenOptLevel::Default;
  case 3: return llvm::CodeGenOptLevel::Aggressive;
  }
  throw CoreError("usage", "opt level must be 0..3, got " +
                               std::to_string(level));
}

std::unique_ptr<llvm::TargetMachine>
new_target_machine(const std::string &triple, const std::string &cpu,
                   const std::string &features, int level, bool pic) {
  const llvm::Target &target = lookup_target(triple);
  // Unknown processors only warn on stderr inside LLVM; refuse them here.
  std::unique_ptr<llvm::MCSubtargetInfo> sti(
      target.createMCSubtargetInfo(triple, "", ""));
  bool known = false;
  for (const auto &kv : sti->getAllProcessorDescriptions())
    if (cpu == kv.Key) known = true;
  if (!known)
    throw CoreError("target", "'" + cpu + "' is not a processor of " + triple);
  llvm::TargetOptions options;
  std::unique_ptr<llvm::TargetMachine> tm(target.createTargetMachine(
      triple, cpu, features, options,
      pic ? std::optional<llvm::Reloc::Model>(llvm::Reloc::PIC_) : std::nullopt,
      std::nullopt, codegen_level(level)));
  if (!tm)
    throw CoreError("target", "could not create a target machine for " +
                                  triple + " " + cpu);
  return tm;
}

// Making a TargetMachine (and the MCSubtargetInfo that checks the processor)
// is much of the fixed cost of a small kernel's LLVM stages, and a compile
// made three (set_target, optimize, emit). Made ones are kept for the
// process, per configuration (the relocation model included), and lent to
// one caller at a time: the bindings release the GIL, and a TargetMachine is
// not meant for two compiles at once. What it emits does not depend on what
// it emitted before (tests/native compares with a new process's machines).
class MachinePool {
 public:
  class Lease {
   public:
    Lease(MachinePool &pool, std::string key,
          std::unique_ptr<llvm::TargetMachine> tm)
        : pool_(pool), key_(std::move(key)), tm_(std::move(tm)) {}
    Lease(const Lease &) = delete;
    Lease &operator=(const Lease &) = delete;
    ~Lease() { pool_.put(key_, std::move(tm_)); }
    llvm::TargetMachine *get() const { return tm_.get(); }
    llvm::TargetMachine *operator->() const { return tm_.get(); }

   private:
    MachinePool &pool_;
    std::string key_;
    std::unique_ptr<llvm::TargetMachine> tm_;
  };

  Lease take(const std::string &triple, const std::string &cpu,
             const std::string &features, int level, bool pic) {
    std::string key = triple + '\0' + cpu + '\0' + features + '\0' +
                      std::to_string(level) + '\0' + (pic ? "pic" : "static");
    {
      std::lock_guard<std::mutex> hold(mu_);
      auto &idle = idle_[key];
      if (!idle.empty()) {
        auto tm = std::move(idle.back());
        idle.pop_back();
        return Lease(*this, std::move(key), std::move(tm));
      }
    }
    // Made outside the lock: a miss does not hold up other threads' hits.
    auto tm = new_target_machine(triple, cpu, features, level, pic);
    return Lease(*this, std::move(key), std::move(tm));
  }

 private:
  void put(const std::string &key, std::unique_ptr<llvm::TargetMachine> tm) {
    std::lock_guard<std::mutex> hold(mu_);
    idle_[key].push_back(std::move(tm));
  }

  std::mutex mu_;
  std::map<std::string, std::vector<std::unique_ptr<llvm::TargetMachine>>>
      idle_;
};

MachinePool::Lease make_target_machine(const std::string &triple,
                                       const std::string &cpu,
                                       const std::string &features, int level,
                                       bool pic = false) {
  // Never destroyed: a TargetMachine freed after LLVM's own statics would be
  // freed into torn-down state at exit.
  static MachinePool *pool = new MachinePool;
  return pool->take(triple, cpu, features, level, pic);
}

std::string join(const std::vector<std::string> &errors) {
  std::string out;
  for (const auto &e : errors) {
    if (!out.empty()) out += "\n";
    out += e;
  }
  return out;
}

bool is_kernel(const llvm::Function &F,
               const llvm::SmallPtrSetImpl<const llvm::Function *> &annotated) {
  return F.getCallingConv() == llvm::CallingConv::PTX_Kernel ||
         annotated.count(&F) != 0;
}

}  // namespace

std::string llvm_version() { return LLVM_VERSION_STRING; }

std::string host_cpu() { return llvm::sys::getHostCPUName().str(); }

std::string host_features() {
  std::string out;
  for (const auto &kv : llvm::sys::getHostCPUFeatures()) {
    if (!out.empty()) out += ",";
    out += (kv.getValue() ? "+" : "-") + kv.getKey().str();
  }
  return out;
}

std::vector<std::string> registered_targets() {
  init_targets();
  std::vector<std::string> out;
  for (const auto &t : llvm::TargetRegistry::targets())
    out.emplace_back(t.getName());
  return out;
}

TargetInfo target_info(const std::string &triple) {
  const llvm::Target &target = lookup_target(triple);
  std::unique_ptr<llvm::MCSubtargetInfo> sti(
      target.createMCSubtargetInfo(triple, "", ""));
  TargetInfo info;
  for (const auto &kv : sti->getAllProcessorDescriptions())
    info.processors.emplace_back(kv.Key);
  for (const auto &kv : sti->getAllProcessorFeatures())
    info.features.emplace_back(kv.Key);
  return info;
}

struct Module::Impl {
  std::vector<std::string> errors;
  std::unique_ptr<llvm::LLVMContext> ctx;
  OwnedModule mod;  // declared after ctx: freed before its context

  void reset_errors() { errors.clear(); }
  void check(const char *kind, const std::string &what) {
    if (!errors.empty()) {
      std::string msg = what + ": " + join(errors);
      errors.clear();
      throw CoreError(kind, msg);
    }
  }
};

Module::Module(const std::string &data, const std::string &name)
    : impl_(std::make_unique<Impl>()) {
  auto &I = *impl_;
  I.ctx = std::make_unique<llvm::LLVMContext>();
  I.ctx->setDiagnosticHandler(std::make_unique<CollectingHandler>(&I.errors));
  auto buffer = llvm::MemoryBuffer::getMemBuffer(data, name,
                                                 /*RequiresNullTerminator=*/false);
  llvm::SMDiagnostic diag;
  I.mod.reset(llvm::parseIR(buffer->getMemBufferRef(), diag, *I.ctx).release());
  if (!I.mod) {
    int line = diag.getLineNo();
    int col = diag.getColumnNo();
    std::string msg = diag.getMessage().str();
    if (line > 0) {
      msg = name + ":" + std::to_string(line) + ":" + std::to_string(col + 1) +
            ": " + msg;
      if (!diag.getLineContents().empty())
        msg += "\n" + diag.getLineContents().str() + "\n" +
               std::string(col > 0 ? col : 0, ' ') + "^";
      throw CoreError("parse", msg, line, col + 1);
    }
    throw CoreError("parse", name + ": " + msg);
  }
  verify();
}

Module::~Module() = default;

void Module::close() {
  if (impl_) {
    impl_->mod.reset();
    impl_->ctx.reset();
    impl_.reset();
  }
}

bool Module::closed() const { return !impl_; }

Module::Impl &Module::get() const {
  if (!impl_) throw CoreError("closed", "module is closed");
  return *impl_;
}

void Module::verify() const {
  auto &I = get();
  std::string msg;
  llvm::raw_string_ostream os(msg);
  if (llvm::verifyModule(*I.mod, &os))
    throw CoreError("verify", "invalid module '" +
                                  I.mod->getModuleIdentifier() + "':\n" +
                                  os.str());
}

std::string Module::to_text() const {
  auto &I = get();
  std::string out;
  llvm::raw_string_ostream os(out);
  I.mod->print(os, nullptr);
  return os.str();
}

std::string Module::to_bitcode() const {
  auto &I = get();
  std::string out;
  llvm::raw_string_ostream os(out);
  llvm::WriteBitcodeToFile(*I.mod, os);
  return os.str();
}

std::vector<FunctionInfo> Module::functions() const {
  auto &I = get();
  llvm::SmallPtrSet<const llvm::Function *, 8> annotated;
  if (auto *md = I.mod->getNamedMetadata("nvvm.annotations")) {
    for (auto *node : md->operands()) {
      if (node->getNumOperands() < 3) continue;
      auto *fn = llvm::mdconst::dyn_extract_or_null<llvm::Function>(
          node->getOperand(0));
      auto *key = llvm::dyn_cast_or_null<llvm::MDString>(node->getOperand(1));
      auto *val = llvm::mdconst::dyn_extract_or_null<llvm::ConstantInt>(
          node->getOperand(2));
      if (fn && key && val && key->getString() == "kernel" && !val->isZero())
        annotated.insert(fn);
    }
  }
  std::vector<FunctionInfo> out;
  for (const auto &F : *I.mod) {
    FunctionInfo info;
    info.name = F.getName().str();
    info.is_kernel = is_kernel(F, annotated);
    info.is_declaration = F.isDeclaration();
    llvm::raw_string_ostream rs(info.return_type);
    F.getReturnType()->print(rs);
    rs.flush();
    for (const auto &arg : F.args()) {
      std::string t;
      llvm::raw_string_ostream ts(t);
      arg.getType()->print(ts);
      info.param_types.push_back(ts.str());
      info.param_names.push_back(arg.getName().str());
    }
    out.push_back(std::move(info));
  }
  return out;
}

void Module::set_target(const std::string &triple, const std::string &cpu,
                        const std::string &features) {
  auto &I = get();
  auto tm = make_target_machine(triple, cpu, features, 2);
  I.mod->setTargetTriple(triple);
  I.mod->setDataLayout(tm->createDataLayout());
}

void Module::set_module_flag_i32(const std::string &key, int value) {
  auto &I = get();
  if (I.mod->getModuleFlag(key)) {
    // Replace rather than add a second, conflicting flag.
    auto *flags = I.mod->getModuleFlagsMetadata();
    auto *i32 = llvm::Type::getInt32Ty(*I.ctx);
    for (unsigned i = 0; i < flags->getNumOperands(); ++i) {
      auto *op = flags->getOperand(i);
      auto *k = llvm::dyn_cast_or_null<llvm::MDString>(op->getOperand(1));
      if (k && k->getString() == key) {
        llvm::Metadata *ops[] = {
            op->getOperand(0), op->getOperand(1),
            llvm::ConstantAsMetadata::get(llvm::ConstantInt::get(i32, value))};
        flags->setOperand(i, llvm::MDNode::get(*I.ctx, ops));
      }
    }
    return;
  }
  I.mod->addModuleFlag(llvm::Module::Override, key, value);
}

std::vector<std::string>
Module::link_bitcode_internalized(const std::string &path) {
  auto &I = get();
  llvm::SMDiagnostic diag;
  // Lazily: only the functions the linker pulls in are materialised (libdevice
  // is ~500 functions; parsing it whole cost ~40 ms per compile). The PTX is
  // byte-identical to the eager path's (tests/native/test_lowering.py).
  std::unique_ptr<llvm::Module> lib =
      llvm::getLazyIRFileModule(path, diag, *I.ctx);
  if (!lib)
    throw CoreError("link", "cannot read '" + path +
                                "': " + diag.getMessage().str());
  // libdevice carries its own triple/layout; adopt ours so the linker does
  // not warn about a mismatch.
  lib->setTargetTriple(I.mod->getTargetTriple());
  lib->setDataLayout(I.mod->getDataLayout());
  std::vector<std::string> linked;
  I.reset_errors();
  bool failed = llvm::Linker::linkModules(
      *I.mod, std::move(lib), llvm::Linker::LinkOnlyNeeded,
      [&linked](llvm::Module &M, const llvm::StringSet<> &names) {
        for (const auto &entry : names) linked.push_back(entry.getKey().str());
        llvm::internalizeModule(M, [&names](const llvm::GlobalValue &GV) {
          return !GV.hasName() || names.count(GV.getName()) == 0;
        });
      });
  if (failed) {
    I.check("link", "linking '" + path + "' failed");
    throw CoreError("link", "linking '" + path + "' failed");
  }
  I.errors.clear();
  verify();
  return linked;
}

std::vector<PassDump> Module::optimize(const std::string &triple,
                                       const std::string &cpu,
                                       const std::string &features, int level,
                                       bool dump_passes) {
  auto &I = get();
  auto tm = make_target_machine(triple, cpu, features, level);
  I.mod->setTargetTriple(triple);
  I.mod->setDataLayout(tm->createDataLayout());

  std::vector<PassDump> dumps;
  llvm::PassInstrumentationCallbacks PIC;
  if (dump_passes) {
    // Like -print-after-all, but collected: each entry is the unit the pass
    // ran on (a loop pass shows its whole function).
    PIC.registerAfterPassCallback(
        [&dumps](llvm::StringRef pass, llvm::Any ir,
                 const llvm::PreservedAnalyses &) {
          static const std::vector<llvm::StringRef> wrappers = {
              "PassManager", "PassAdaptor", "AnalysisManagerProxy",
              "DevirtSCCRepeatedPass", "ModuleInlinerWrapperPass",
              "VerifierPass"};
          if (llvm::isSpecialPass(pass, wrappers)) return;
          PassDump d;
          d.pass = pass.str();
          llvm::raw_string_ostream os(d.ir);
          if (const auto *M = llvm::any_cast<const llvm::Module *>(&ir)) {
            d.unit = "module";
            (*M)->print(os, nullptr);
          } else if (const auto *F =
                         llvm::any_cast<const llvm::Function *>(&ir)) {
            d.unit = (*F)->getName().str();
            (*F)->print(os);
          } else if (const auto *C =
                         llvm::any_cast<const llvm::LazyCallGraph::SCC *>(
                             &ir)) {
            for (const auto &N : **C) {
              if (!d.unit.empty()) d.unit += ",";
              d.unit += N.getFunction().getName().str();
              N.getFunction().print(os);
            }
          } else if (const auto *L = llvm::any_cast<const llvm::Loop *>(&ir)) {
            const llvm::Function *F = (*L)->getHeader()->getParent();
            d.unit = F->getName().str() + ":" + (*L)->getName().str();
            F->print(os);
          } else {
            return;
          }
          os.flush();
          dumps.push_back(std::move(d));
        });
  }

  llvm::LoopAnalysisManager LAM;
  llvm::FunctionAnalysisManager FAM;
  llvm::CGSCCAnalysisManager CGAM;
  llvm::ModuleAnalysisManager MAM;
  // With the target machine, the builder runs the NVPTX callbacks
  // (NVVMReflect, NVVMIntrRange) and uses NVPTX's TTI cost model.
  llvm::PassBuilder PB(tm.get(), llvm::PipelineTuningOptions(), std::nullopt,
                       &PIC);
  PB.registerModuleAnalyses(MAM);
  PB.registerCGSCCAnalyses(CGAM);
  PB.registerFunctionAnalyses(FAM);
  PB.registerLoopAnalyses(LAM);
  PB.crossRegisterProxies(LAM, FAM, CGAM, MAM);

  llvm::OptimizationLevel ol;
  switch (level) {
  case 0: ol = llvm::OptimizationLevel::O0; break;
  case 1: ol = llvm::OptimizationLevel::O1; break;
  case 2: ol = llvm::OptimizationLevel::O2; break;
  case 3: ol = llvm::OptimizationLevel::O3; break;
  default:
    throw CoreError("usage", "opt level must be 0..3, got " +
                                 std::to_string(level));
  }
  llvm::ModulePassManager MPM = level == 0
                                    ? PB.buildO0DefaultPipeline(ol)
                                    : PB.buildPerModuleDefaultPipeline(ol);
  I.reset_errors();
  // Specializing and linking add functions, maybe at freed functions' addresses.
  llvm::clearAnnotationCache(I.mod.get());
  MPM.run(*I.mod, MAM);
  I.check("optimize", "optimization failed");
  verify();
  return dumps;
}

namespace {

std::string emit(llvm::Module &M, std::vector<std::string> &errors,
                 const std::string &triple, const std::string &cpu,
                 const std::string &features, int level, bool pic,
                 llvm::CodeGenFileType type) {
  auto tm = make_target_machine(triple, cpu, features, level, pic);
  M.setTargetTriple(triple);
  M.setDataLayout(tm->createDataLayout());
  // Codegen mutates the module; emit from a clone so the module stays usable.
  llvm::SmallString<0> out;
  {
    llvm::raw_svector_ostream os(out);
    llvm::legacy::PassManager PM;
    if (tm->addPassesToEmitFile(PM, os, nullptr, type))
      throw CoreError("codegen", "target " + triple + " cannot emit " +
                                     (type == llvm::CodeGenFileType::ObjectFile
                                          ? "object files"
                                          : "assembly"));
    errors.clear();
    OwnedModule clone(llvm::CloneModule(M).release());
    PM.run(*clone);
  }
  return std::string(out.str());
}

}  // namespace

std::string Module::emit_assembly(const std::string &triple,
                                  const std::string &cpu,
                                  const std::string &features, int level,
                                  bool pic) {
  auto &I = get();
  std::string out = emit(*I.mod, I.errors, triple, cpu, features, level, pic,
                         llvm::CodeGenFileType::AssemblyFile);
  I.check("codegen", "code generation for " + triple + " failed");
  return out;
}

std::string Module::emit_object(const std::string &triple,
                                const std::string &cpu,
                                const std::string &features, int level,
                                bool pic) {
  auto &I = get();
  std::string out = emit(*I.mod, I.errors, triple, cpu, features, level, pic,
                         llvm::CodeGenFileType::ObjectFile);
  I.check("codegen", "code generation for " + triple + " failed");
  return out;
}

void Module::specialize(
    const std::string &kernel, const std::string &new_name,
    const std::vector<std::pair<int, std::string>> &constants,
    const std::vector<std::pair<int, long long>> &multiples) {
  auto &I = get();
  llvm::Function *F = I.mod->getFunction(kernel);
  if (!F || F->isDeclaration())
    throw CoreError("usage", "no kernel named '" + kernel + "' to specialize");
  if (!F->getReturnType()->isVoidTy())
    throw CoreError("usage", "kernel '" + kernel + "' must return void");
  if (I.mod->getNamedValue(new_name))
    throw CoreError("usage", "cannot name the specialization '" + new_name +
                                 "': the module already defines it");
  const unsigned n = F->arg_size();
  std::vector<llvm::Constant *> fixed(n, nullptr);
  auto where = [&](int idx) {
    return "kernel '" + kernel + "' parameter " + std::to_string(idx);
  };
  for (const auto &[idx, text] : constants) {
    if (idx < 0 || static_cast<unsigned>(idx) >= n)
      throw CoreError("usage", where(idx) + " does not exist");
    if (fixed[idx])
      throw CoreError("usage", where(idx) + " is fixed twice");
    llvm::Type *ty = F->getArg(idx)->getType();
    if (auto *ity = llvm::dyn_cast<llvm::IntegerType>(ty)) {
      // Python passes the two's complement bits as an unsigned decimal.
      llvm::APInt value;
      if (llvm::StringRef(text).getAsInteger(10, value) ||
          value.getActiveBits() > ity->getBitWidth())
        throw CoreError("usage", where(idx) + ": '" + text + "' is not an " +
                                     "i" + std::to_string(ity->getBitWidth()));
      fixed[idx] =
          llvm::ConstantInt::get(ity, value.zextOrTrunc(ity->getBitWidth()));
    } else if (ty->isFloatTy() || ty->isDoubleTy()) {
      llvm::APFloat value(ty->getFltSemantics());
      auto status = value.convertFromString(
          text, llvm::APFloat::rmNearestTiesToEven);
      if (!status) {
        llvm::consumeError(status.takeError());
        throw CoreError("usage", where(idx) + ": '" + text +
                                     "' is not a floating-point number");
      }
      fixed[idx] = llvm::ConstantFP::get(ty, value);
    } else {
      throw CoreError("usage", where(idx) + " is not an integer or float; " +
                                   "only those can be fixed");
    }
  }
  for (const auto &[idx, k] : multiples) {
    if (idx < 0 || static_cast<unsigned>(idx) >= n)
      throw CoreError("usage", where(idx) + " does not exist");
    if (fixed[idx])
      throw CoreError("usage", where(idx) + " is fixed; it cannot also be a "
                                            "multiple");
    if (!F->getArg(idx)->getType()->isIntegerTy() || k <= 0)
      throw CoreError("usage", where(idx) + ": only integer parameters can be "
                                            "declared multiples of k > 0");
  }

  llvm::LLVMContext &ctx = *I.ctx;
  std::vector<llvm::Type *> kept;
  for (unsigned i = 0; i < n; ++i)
    if (!fixed[i]) kept.push_back(F->getArg(i)->getType());
  auto *fty = llvm::FunctionType::get(llvm::Type::getVoidTy(ctx), kept, false);
  llvm::Function *S = llvm::Function::Create(
      fty, llvm::GlobalValue::ExternalLinkage, new_name, *I.mod);
  S->setCallingConv(F->getCallingConv());
  // The original is called, not launched: plain C calling convention.
  F->setCallingConv(llvm::CallingConv::C);
  llvm::AttributeList attrs = F->getAttributes();
  std::vector<llvm::Value *> args(n, nullptr);
  unsigned j = 0;
  for (unsigned i = 0; i < n; ++i) {
    if (fixed[i]) {
      args[i] = fixed[i];
      continue;
    }
    llvm::Argument *a = S->getArg(j);
    a->setName(F->getArg(i)->getName());
    S->addParamAttrs(j, llvm::AttrBuilder(ctx, attrs.getParamAttrs(i)));
    args[i] = a;
    ++j;
  }
  llvm::IRBuilder<> B(llvm::BasicBlock::Create(ctx, "entry", S));
  for (const auto &[idx, k] : multiples) {
    llvm::Value *v = args[idx];
    auto *ity = llvm::cast<llvm::IntegerType>(v->getType());
    llvm::Value *rem = B.CreateURem(v, llvm::ConstantInt::get(ity, k));
    B.CreateAssumption(
        B.CreateICmpEQ(rem, llvm::ConstantInt::get(ity, 0), "multiple"));
  }
  B.CreateCall(F, args);
  B.CreateRetVoid();

  F->setLinkage(llvm::GlobalValue::InternalLinkage);
  F->removeFnAttr(llvm::Attribute::NoInline);
  F->removeFnAttr(llvm::Attribute::OptimizeNone);
  F->addFnAttr(llvm::Attribute::AlwaysInline);
  // Annotations (kernel, maxntid, ...) move to the specialization.
  if (auto *md = I.mod->getNamedMetadata("nvvm.annotations")) {
    for (unsigned i = 0; i < md->getNumOperands(); ++i) {
      llvm::MDNode *node = md->getOperand(i);
      if (node->getNumOperands() == 0) continue;
      if (llvm::mdconst::dyn_extract_or_null<llvm::Function>(
              node->getOperand(0)) != F)
        continue;
      std::vector<llvm::Metadata *> ops(node->op_begin(), node->op_end());
      ops[0] = llvm::ValueAsMetadata::get(S);
      md->setOperand(i, llvm::MDNode::get(ctx, ops));
    }
  }
  verify();
}

}  // namespace tilec
