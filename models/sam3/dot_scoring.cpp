#include "models/sam3/dot_scoring.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "runtime/dtype.h"

namespace flick {
namespace {

const DTypeSet kFloat{DType::F32, DType::BF16, DType::F16};

}  // namespace

Expected<DotScoring> DotScoring::load(const WeightView& scoring, Backend& backend,
                                      Precision precision, int64_t rows, int64_t max_prompt) {
  DotScoring m;
  DotScoringConfig& c = m.cfg_;
  const TensorInfo* l0 = scoring.info("prompt_mlp.layers.0.weight");
  const TensorInfo* pp = scoring.info("prompt_proj.weight");
  if (!l0 || l0->shape.size() != 2)
    return not_found(scoring.full_name("prompt_mlp.layers.0.weight") + ": missing or not 2-d");
  if (!pp || pp->shape.size() != 2)
    return not_found(scoring.full_name("prompt_proj.weight") + ": missing or not 2-d");
  c.hidden = l0->shape[0];
  c.d_model = l0->shape[1];
  c.d_proj = pp->shape[0];
  c.rows = rows;
  c.max_prompt = max_prompt;
  if (rows < 1 || max_prompt < 1)
    return invalid_input("SAM3 scoring: rows and prompt length must be positive");
  if (precision != Precision::F32 && precision != Precision::BF16)
    return invalid_input(std::string("SAM3 scoring: precision ") + precision_name(precision) +
                         " is not supported (F32 or BF16)");
  m.backend_ = &backend;
  m.precision_ = precision;
  m.act_ = precision == Precision::F32 ? DType::F32 : DType::BF16;
  FLICK_TRY(m.load_weights(scoring));
  m.plan();
  return m;
}

Status DotScoring::load_weights(const WeightView& scoring) {
  const DotScoringConfig& c = cfg_;
  const int64_t d = c.d_model;
  auto linear = [&](const std::string& p, int64_t n,
                    int64_t k) -> Expected<std::unique_ptr<PackedLinear>> {
    FLICK_ASSIGN_OR_RETURN(Tensor w, scoring.get(p + ".weight", kFloat, {n, k}));
    FLICK_ASSIGN_OR_RETURN(Tensor b, scoring.get(p + ".bias", kFloat, {n}));
    return backend_->pack_linear({w, Tensor{}, b, precision_});
  };
  auto param = [&](const std::string& name, Shape shape) -> Expected<Tensor> {
    FLICK_ASSIGN_OR_RETURN(Tensor t, scoring.get(name, kFloat, shape));
    if (t.dtype == act_) return t;
    OwnedTensor& o = owned_.emplace_back(act_, t.shape);
    convert(t.dtype, t.data, act_, o.t.data, t.numel());
    return o.t;
  };
  FLICK_ASSIGN_OR_RETURN(fc1_, linear("prompt_mlp.layers.0", c.hidden, d));
  FLICK_ASSIGN_OR_RETURN(fc2_, linear("prompt_mlp.layers.1", d, c.hidden));
  FLICK_ASSIGN_OR_RETURN(norm_w_, param("prompt_mlp.out_norm.weight", {d}));
  FLICK_ASSIGN_OR_RETURN(norm_b_, param("prompt_mlp.out_norm.bias", {d}));
  FLICK_ASSIGN_OR_RETURN(prompt_proj_, linear("prompt_proj", c.d_proj, d));
  FLICK_ASSIGN_OR_RETURN(hs_proj_, linear("hs_proj", c.d_proj, d));
  return ok_status();
}

void DotScoring::plan() {
  const DotScoringConfig& c = cfg_;
  const int64_t p = c.max_prompt, d = c.d_model;
  prompt_ = arena_.request("scoring.prompt", act_, {p, d});
  hidden_ = arena_.request("scoring.hidden", act_, {p, c.hidden});
  mlp_ = arena_.request("scoring.prompt_mlp", act_, {p, d});
  weights_ = arena_.request("scoring.pool_weights", act_, {1, 1, p});
  pooled_ = arena_.request("scoring.pooled", act_, {1, d});
  proj_ = arena_.request("scoring.prompt_proj", act_, {1, c.d_proj});
  hsp_ = arena_.request("scoring.hs_proj", act_, {c.rows, c.d_proj});
  scores_ = arena_.request("scoring.scores", act_, {c.rows, 1});
  logits_ = arena_.request("scoring.logits", DType::F32, {c.rows});
  arena_.finalize();
}

Expected<Tensor> DotScoring::forward(const Tensor& hs, const Tensor& prompt,
                                     const Tensor& prompt_valid) {
  const DotScoringConfig& c = cfg_;
  const int64_t d = c.d_model;
  auto is_float = [](const Tensor& x) { return x.dtype == DType::F32 || x.dtype == DType::BF16; };
  if (!is_float(hs) || hs.numel() != c.rows * d || !hs.is_contiguous())
    return invalid_input("SAM3 scoring: expected contiguous hs of " + std::to_string(c.rows) +
                         " x " + std::to_string(d) + " values, got " + hs.str());
  const int64_t np = prompt.ndim() == 2 ? prompt.dim(0) : 0;
  if (prompt.ndim() != 2 || prompt.dim(1) != d || np < 1 || np > c.max_prompt ||
      !is_float(prompt) || prompt_valid.dtype != DType::U8 || prompt_valid.shape != Shape{np} ||
      !prompt_valid.is_contiguous())
    return invalid_input("SAM3 scoring: expected a prompt [P <= " + std::to_string(c.max_prompt) +
                         ", " + std::to_string(d) + "] and U8 validity [P], got " + prompt.str() +
                         " and " + prompt_valid.str());
  Backend& be = *backend_;

  // prompt_mlp: LN(layers.1(relu(layers.0 p)) + p).
  Tensor pr = arena_.get(prompt_).slice(0, 0, np);
  be.copy(prompt, pr);
  Tensor hid = arena_.get(hidden_).slice(0, 0, np);
  be.linear(pr, *fc1_, hid, Activation::Relu);
  Tensor mlp = arena_.get(mlp_).slice(0, 0, np);
  be.linear(hid, *fc2_, mlp, Activation::None);
  be.add(mlp, pr, mlp);
  be.layer_norm(mlp, norm_w_, norm_b_, c.eps, mlp);

  // Masked mean over the valid tokens as a [1, P] @ [P, d] product with
  // weights valid_i / max(n_valid, 1) (mean_pool_text).
  const uint8_t* ok = prompt_valid.ptr<uint8_t>();
  const int64_t n_valid = std::count_if(ok, ok + np, [](uint8_t v) { return v != 0; });
  std::vector<float> w(static_cast<size_t>(np));
  for (int64_t i = 0; i < np; ++i)
    w[static_cast<size_t>(i)] =
        ok[i] ? 1.f / static_cast<float>(std::max<int64_t>(n_valid, 1)) : 0.f;
  Tensor weights = arena_.get(weights_).slice(2, 0, np);  // [1, 1, P]
  convert(DType::F32, w.data(), act_, weights.data, np);
  Tensor pooled = arena_.get(pooled_);
  Tensor pooled3 = pooled.reshape({1, 1, d});
  be.matmul(weights, mlp.reshape({1, np, d}), pooled3);
  Tensor proj = arena_.get(proj_);
  be.linear(pooled, *prompt_proj_, proj, Activation::None);

  // scores = hs_proj(hs) @ proj^T / sqrt(d_proj), clamped.
  Tensor hsp = arena_.get(hsp_);
  be.linear(hs.reshape({c.rows, d}), *hs_proj_, hsp, Activation::None);
  Tensor scores = arena_.get(scores_);
  Tensor scores3 = scores.reshape({1, c.rows, 1});
  be.matmul(hsp.reshape({1, c.rows, c.d_proj}), proj.reshape({1, c.d_proj, 1}), scores3);
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(c.d_proj)));
  be.affine(scores, scale, 0.f, scores);
  Tensor logits = arena_.get(logits_);
  Tensor logits2 = logits.reshape({c.rows, 1});
  be.copy(scores, logits2);
  float* l = logits.ptr<float>();  // clamp_(-12, 12) on the host: no clamp op in the backend
  for (int64_t i = 0; i < c.rows; ++i) l[i] = std::min(std::max(l[i], -c.clamp), c.clamp);
  return logits;
}

}  // namespace flick
