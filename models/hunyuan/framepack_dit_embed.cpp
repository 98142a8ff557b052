#include "models/hunyuan/framepack_dit_embed.h"

#include <string>

namespace flick::hunyuan {
namespace {

constexpr int kTime = 0, kGuidance = 1, kText = 2;
const char* const kNames[3] = {"timestep_embedder", "guidance_embedder", "text_embedder"};

}  // namespace

Expected<DitTimeTextEmbed> DitTimeTextEmbed::load(const WeightView& v, int64_t dim,
                                                  int64_t pooled_dim, bool guidance,
                                                  const DitRun& run) {
  DitTimeTextEmbed m;
  m.run_ = run;
  m.dim_ = dim;
  m.guidance_ = guidance;
  for (int i = 0; i < 3; ++i) {
    if (i == kGuidance && !guidance) continue;
    const WeightView e = v.sub(kNames[i]);
    const int64_t in = i == kText ? pooled_dim : 256;
    FLICK_ASSIGN_OR_RETURN(m.l1_[i], load_dit_linear(e, "linear_1", dim, in, run, run.kept()));
    FLICK_ASSIGN_OR_RETURN(m.l2_[i], load_dit_linear(e, "linear_2", dim, dim, run, run.kept()));
  }
  return m;
}

void DitTimeTextEmbed::mlp(int i, const Tensor& in, Tensor& out) const {
  OwnedTensor h(run_.act(), {1, dim_});
  dit_linear_act(run_, in, *l1_[i], h.t, Activation::Silu);
  run_.be->linear(h.t, *l2_[i], out, Activation::None);
}

void DitTimeTextEmbed::forward(float t, std::optional<float> guidance, const Tensor& pooled,
                               Tensor& out) const {
  FLICK_CHECK(guidance.has_value() == guidance_, "time embedding: guidance given iff embedded");
  Backend& be = *run_.be;
  OwnedTensor sinus(run_.act(), {1, 256}), part(run_.act(), {1, dim_});
  dit_timestep_sinusoid(t, sinus.t);
  mlp(kTime, sinus.t, out);
  if (guidance_) {
    dit_timestep_sinusoid(*guidance, sinus.t);
    mlp(kGuidance, sinus.t, part.t);
    be.add(out, part.t, out);
  }
  mlp(kText, pooled, part.t);
  be.add(out, part.t, out);
}

}  // namespace flick::hunyuan
