// flick_cudnn_probe: the deviceless check of CI (shared/research/
// cuda-backend.md, section 0.1). Builds every cuDNN graph the CUDA backend
// builds for the models, at their real shapes, and asks cuDNN's heuristics
// for engine configs on each device-property JSON given (sm_80 / sm_89 /
// sm_90 fixtures in tests/cuda/device_props). A graph with no engine config
// on some device fails the check: the backend would have to fall back.
// Needs libcudnn and a loadable libcuda.so.1 (the toolkit's stub will do: put
// lib64/stubs, with a libcuda.so.1 link, on LD_LIBRARY_PATH); no GPU.
// Exit 0: every graph has an engine everywhere; 1: some has none; 77: cuDNN
// cannot run heuristics here (DEVICEPROP refused), i.e. skipped.
//
// `flick_cudnn_probe --dump-device [ID]` (on a GPU machine) prints the JSON
// representation of GPU ID's DEVICEPROP descriptor: what a fixture in
// tests/cuda/device_props holds (tools/gpu_check.sh saves it).
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "runtime/cuda/cuda_shapes.h"
#include "runtime/cuda/cudnn_graph.h"

using namespace flick;
using namespace flick::cuda;

namespace {

// The JSON of a device's DEVICEPROP descriptor; exit 0, or 77 with the reason.
int dump_device(int32_t id) {
  CudnnDesc p(CUDNN_BACKEND_DEVICEPROP_DESCRIPTOR);
  p.set(CUDNN_ATTR_DEVICEPROP_DEVICE_ID, CUDNN_TYPE_INT32, 1, &id);
  if (p.finalize() != CUDNN_STATUS_SUCCESS) {
    std::fprintf(stderr, "%s\n", cudnn_error(p.status(), "DEVICEPROP of a device id").c_str());
    return 77;
  }
  std::string json(1 << 20, '\0');
  int64_t n = 0;
  const cudnnStatus_t st =
      cudnnBackendGetAttribute(p.get(), CUDNN_ATTR_DEVICEPROP_JSON_REPRESENTATION, CUDNN_TYPE_CHAR,
                               static_cast<int64_t>(json.size()), &n, json.data());
  if (st != CUDNN_STATUS_SUCCESS) {
    std::fprintf(stderr, "%s\n", cudnn_error(st, "DEVICEPROP JSON representation").c_str());
    return 77;
  }
  json.resize(static_cast<size_t>(n));
  while (!json.empty() && json.back() == '\0') json.pop_back();
  std::printf("%s\n", json.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 2 && std::string(argv[1]) == "--dump-device")
    return dump_device(argc >= 3 ? std::stoi(argv[2]) : 0);
  if (argc < 2) {
    std::fprintf(stderr, "usage: flick_cudnn_probe DEVICE.json... | --dump-device [ID]\n");
    return 64;
  }
  std::printf("cuDNN %zu (headers %d)\n", cudnnGetVersion(), CUDNN_VERSION);
  int missing = 0;
  // cuBLASLt: the descriptors only (heuristics need a GPU: cublasLtCreate
  // fails without one).
  std::printf("cuBLASLt %zu descriptors\n", cublasLtGetVersion());
  for (const ModelGemm& g : model_gemm_shapes()) {
    auto d = model_gemm_descs(g);
    std::printf("  %s %-48s %s\n", d.ok() ? "ok  " : "FAIL", g.name.c_str(),
                d.ok() ? "descriptors accepted" : d.status().message().c_str());
    if (!d.ok()) ++missing;
  }
  for (int a = 1; a < argc; ++a) {
    std::ifstream f(argv[a]);
    std::stringstream ss;
    ss << f.rdbuf();
    if (!f) {
      std::fprintf(stderr, "cannot read %s\n", argv[a]);
      return 64;
    }
    auto prop = device_prop_from_json(ss.str());
    if (!prop.ok()) {
      std::printf("SKIP: %s: %s\n", argv[a], prop.status().message().c_str());
      return 77;
    }
    std::printf("%s\n", argv[a]);
    auto report = [&](const std::string& name, const Expected<CudnnGraph>& g) {
      if (!g.ok()) {
        std::printf("  FAIL %-48s graph: %s\n", name.c_str(), g.status().message().c_str());
        ++missing;
        return;
      }
      auto cfgs = engine_configs(*g, &*prop);
      if (!cfgs.ok()) {
        std::printf("  FAIL %-48s %s\n", name.c_str(), cfgs.status().message().c_str());
        ++missing;
        return;
      }
      std::printf("  %s %-48s %zu engine configs\n", cfgs->empty() ? "FAIL" : "ok  ", name.c_str(),
                  cfgs->size());
      if (cfgs->empty()) ++missing;
    };
    for (const ModelSdpa& m : model_sdpa_shapes()) report(m.name, sdpa_graph(m.shape, nullptr));
    for (const ModelConv& m : model_conv_shapes()) report(m.name, conv_graph(m.shape, nullptr));
    auto count = [&](const SdpaShape& shape) -> size_t {
      auto g = sdpa_graph(shape, nullptr);
      if (!g.ok()) return 0;
      auto cfgs = engine_configs(*g, &*prop);
      return cfgs.ok() ? cfgs->size() : 0;
    };
    for (const ModelSdpa& m : fallback_sdpa_shapes())
      std::printf("  info %-48s %zu engine configs (the backend uses its fallback)\n",
                  m.name.c_str(), count(m.shape));
    const ModelSdpa control = control_refused_sdpa();
    const size_t n = count(control.shape);
    std::printf("  %s %-48s %zu engine configs\n", n ? "FAIL" : "ok  ", control.name.c_str(), n);
    if (n) ++missing;
  }
  if (missing) std::printf("%d graph(s) without an engine config\n", missing);
  return missing ? 1 : 0;
}
