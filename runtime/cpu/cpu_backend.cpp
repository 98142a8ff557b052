#include "runtime/backend_adapter.h"
#include "runtime/cpu/ops.h"

namespace flick {
namespace {

#define FLICK_CPU_FORWARD(ret, name, params, args) FLICK_FORWARD_OP(cpu, ret, name, params, args)
class CpuBackend final : public Backend {
 public:
  const char* name() const override { return "cpu"; }
  FLICK_OP_LIST(FLICK_CPU_FORWARD)
};
#undef FLICK_CPU_FORWARD

}  // namespace

std::unique_ptr<Backend> make_cpu_backend() { return std::make_unique<CpuBackend>(); }

}  // namespace flick
