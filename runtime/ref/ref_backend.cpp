#include "runtime/backend_adapter.h"
#include "runtime/ref/ops.h"

namespace flick {
namespace {

#define FLICK_REF_FORWARD(ret, name, params, args) FLICK_FORWARD_OP(ref, ret, name, params, args)
class RefBackend final : public Backend {
 public:
  const char* name() const override { return "ref"; }
  FLICK_OP_LIST(FLICK_REF_FORWARD)
};
#undef FLICK_REF_FORWARD

}  // namespace

std::unique_ptr<Backend> make_ref_backend() { return std::make_unique<RefBackend>(); }

}  // namespace flick
