// Without NVPTX: prints the LLVM version (proves headers + LLVMSupport link).
// With NVPTX: lowers a .ll file to PTX for the given sm_XX.
#include "llvm/Config/llvm-config.h"
#include "llvm/Support/raw_ostream.h"

#ifdef HAVE_NVPTX
#include "llvm/IR/LLVMContext.h"
#include "llvm/IR/LegacyPassManager.h"
#include "llvm/IR/Module.h"
#include "llvm/IRReader/IRReader.h"
#include "llvm/MC/TargetRegistry.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/TargetSelect.h"
#include "llvm/Target/TargetMachine.h"
#include "llvm/Target/TargetOptions.h"
#include "llvm/TargetParser/Triple.h"
#include <memory>
#include <optional>
#endif

int main(int argc, char **argv) {
  llvm::outs() << "LLVM " << LLVM_VERSION_STRING << "\n";
#ifdef HAVE_NVPTX
  if (argc != 4) {
    llvm::errs() << "usage: " << argv[0] << " KERNEL.ll sm_XX OUT.ptx\n";
    return 2;
  }
  LLVMInitializeNVPTXTargetInfo();
  LLVMInitializeNVPTXTarget();
  LLVMInitializeNVPTXTargetMC();
  LLVMInitializeNVPTXAsmPrinter();
  llvm::LLVMContext ctx;
  llvm::SMDiagnostic diag;
  std::unique_ptr<llvm::Module> mod = llvm::parseIRFile(argv[1], diag, ctx);
  if (!mod) {
    diag.print(argv[0], llvm::errs());
    return 1;
  }
#if LLVM_VERSION_MAJOR >= 21
  // LLVM 21 on takes the triple as a Triple where 19 took its string
  const llvm::Triple triple("nvptx64-nvidia-cuda");
#else
  const std::string triple = "nvptx64-nvidia-cuda";
#endif
  std::string err;
  const llvm::Target *target = llvm::TargetRegistry::lookupTarget(triple, err);
  if (!target) {
    llvm::errs() << err << "\n";
    return 1;
  }
  std::unique_ptr<llvm::TargetMachine> tm(target->createTargetMachine(
      triple, argv[2], "+ptx78", llvm::TargetOptions(), std::nullopt));
  mod->setTargetTriple(triple);
  mod->setDataLayout(tm->createDataLayout());
  std::error_code ec;
  llvm::raw_fd_ostream out(argv[3], ec, llvm::sys::fs::OF_Text);
  if (ec) {
    llvm::errs() << argv[3] << ": " << ec.message() << "\n";
    return 1;
  }
  llvm::legacy::PassManager pm;
  if (tm->addPassesToEmitFile(pm, out, nullptr, llvm::CodeGenFileType::AssemblyFile)) {
    llvm::errs() << "the NVPTX target cannot emit assembly\n";
    return 1;
  }
  pm.run(*mod);
  out.flush();
#else
  (void)argc;
  (void)argv;
#endif
  return 0;
}
