#include "runtime/backend.h"

#include <dlfcn.h>

#include <cstdlib>
#include <filesystem>
#include <vector>

namespace flick {

const char* precision_name(Precision p) {
  switch (p) {
    case Precision::F32: return "f32";
    case Precision::BF16: return "bf16";
    case Precision::INT8: return "int8";
    case Precision::FP8: return "fp8";
  }
  return "?";
}

namespace {

// Candidate paths of the CUDA module, in the order load_cuda_backend tries.
std::vector<std::string> cuda_module_paths() {
  if (const char* env = std::getenv("FLICK_CUDA_MODULE"); env && *env) return {env};
  std::vector<std::string> paths;
  std::error_code ec;
  const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) paths.push_back((exe.parent_path() / "libflick_cuda.so").string());
  paths.push_back("libflick_cuda.so");  // the loader's search path
  return paths;
}

}  // namespace

Expected<std::unique_ptr<Backend>> load_cuda_backend() {
  std::string tried;
  void* module = nullptr;
  for (const std::string& path : cuda_module_paths()) {
    // RTLD_LOCAL: the module's copy of flick's runtime stays private to it.
    module = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (module) break;
    const char* e = dlerror();
    tried += "\n  " + path + ": " + (e ? e : "?");
  }
  if (!module)
    return unavailable(
        "backend \"cuda\": cannot load the CUDA backend module (build flick with "
        "-DFLICK_CUDA=ON, and install the CUDA 13 runtime, cuBLASLt and cuDNN 9):" +
        tried);
  auto entry = reinterpret_cast<CudaBackendEntry>(dlsym(module, kCudaBackendEntry));
  if (!entry)
    return unavailable(std::string("backend \"cuda\": the module has no ") + kCudaBackendEntry);
  // The module stays loaded: the backend's code lives in it.
  char err[1024] = {};
  Backend* b = nullptr;
  if (entry(kBackendModuleAbi, &b, err, sizeof err) != 0 || b == nullptr)
    return unavailable(std::string("backend \"cuda\": ") + err);
  return std::unique_ptr<Backend>(b);
}

}  // namespace flick
