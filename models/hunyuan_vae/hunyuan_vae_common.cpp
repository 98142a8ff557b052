#include "models/hunyuan_vae/hunyuan_vae_common.h"

namespace flick::hunyuan_vae {

Expected<OwnedTensor> load_f32(const WeightView& v, std::string_view name, const Shape& shape) {
  FLICK_ASSIGN_OR_RETURN(Tensor t,
                         v.get(name, DTypeSet{DType::F32, DType::BF16, DType::F16}, shape));
  OwnedTensor out(DType::F32, shape);
  float* p = out.t.ptr<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = load_as_f32(t.dtype, t.data, i);
  return out;
}

OwnedTensor contiguous_copy(Backend& be, const Tensor& x, DType dt) {
  OwnedTensor y(dt, x.shape);
  be.copy(x, y.t);
  return y;
}

}  // namespace flick::hunyuan_vae
