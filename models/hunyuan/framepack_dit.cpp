#include "models/hunyuan/framepack_dit.h"

#include <filesystem>
#include <string>

#include "models/wan/wan_quant.h"
#include "runtime/dtype.h"
#include "runtime/plan_cache.h"

namespace flick::hunyuan {

Expected<FramePackDit> FramePackDit::load(const WeightView& model, const FramePackDitConfig& config,
                                          Backend& backend, Precision precision) {
  FLICK_TRY(check_wan_precision(precision, backend, "FramePack DiT"));
  FLICK_TRY(check_framepack_dit_layout(model, config));
  FramePackDit m;
  m.cfg_ = config;
  m.run_ = DitRun{&backend, precision};
  const FramePackDitConfig& c = config;
  FLICK_ASSIGN_OR_RETURN(m.embed_, DitPatchEmbedders::load(model, c, m.run_));
  FLICK_ASSIGN_OR_RETURN(m.temb_, DitTimeTextEmbed::load(model.sub("time_text_embed"), c.dim,
                                                         c.pooled_dim, /*guidance=*/true, m.run_));
  FLICK_ASSIGN_OR_RETURN(m.refiner_,
                         DitTokenRefiner::load(model.sub("context_embedder"), c, m.run_));
  FLICK_ASSIGN_OR_RETURN(m.image_proj_, DitImageProjection::load(model.sub("image_projection"),
                                                                 c.dim, c.image_dim, m.run_));
  for (int64_t i = 0; i < c.layers; ++i) {
    FLICK_ASSIGN_OR_RETURN(
        DitDoubleBlock b,
        DitDoubleBlock::load(model.sub("transformer_blocks").sub(std::to_string(i)), c, m.run_));
    m.double_.push_back(std::move(b));
    model.release_pages();  // packed: the mapped block need not stay resident
  }
  for (int64_t i = 0; i < c.single_layers; ++i) {
    FLICK_ASSIGN_OR_RETURN(
        DitSingleBlock b,
        DitSingleBlock::load(model.sub("single_transformer_blocks").sub(std::to_string(i)), c,
                             m.run_));
    m.single_.push_back(std::move(b));
    model.release_pages();
  }
  FLICK_ASSIGN_OR_RETURN(m.head_, DitOutputHead::load(model, c, m.run_));
  return m;
}

Expected<FramePackDitFiles> framepack_dit_files(const std::string& path,
                                                const std::string& config_json) {
  namespace fs = std::filesystem;
  std::error_code ec;
  FramePackDitFiles f{"", config_json};
  if (fs::is_regular_file(path, ec)) {  // a single-file checkpoint
    f.weights = path;
    const fs::path beside = fs::path(path).parent_path() / "config.json";
    if (f.config.empty() && fs::is_regular_file(beside, ec)) f.config = beside.string();
    return f;
  }
  FLICK_ASSIGN_OR_RETURN(f.weights, framepack_dit_weights_path(path));
  if (f.config.empty()) f.config = path + "/config.json";
  return f;
}

namespace {

// The DiT's entries in the plan cache of the current scope (a pipeline's
// load, runtime/plan_cache.h), if any: named after the checkpoint's path,
// keyed by the identity of every file of it (each shard of an index).
Status set_plan_source(const WeightStore& store, const std::string& weights) {
  PlanCacheScope* scope = PlanCacheScope::current();
  if (scope == nullptr) return ok_status();
  std::vector<std::string> files;
  for (const WeightStore::Source& s : store.sources())
    for (const WeightFile* f : s.files) files.push_back(f->path());
  return scope->set_checkpoint_source("framepack-dit", weights, files);
}

}  // namespace

Expected<FramePackDitModel> open_framepack_dit(const std::string& folder, Backend& backend,
                                               Precision precision,
                                               const std::string& config_json) {
  FLICK_ASSIGN_OR_RETURN(const FramePackDitFiles files, framepack_dit_files(folder, config_json));
  const std::string &weights = files.weights, &config = files.config;
  FramePackDitModel m;
  FLICK_ASSIGN_OR_RETURN(m.store, WeightStore::open({weights}));
  FLICK_TRY(set_plan_source(m.store, weights));
  FLICK_ASSIGN_OR_RETURN(const FramePackDitConfig cfg,
                         FramePackDitConfig::detect(m.store.root(), config));
  FLICK_ASSIGN_OR_RETURN(m.dit, FramePackDit::load(m.store.root(), cfg, backend, precision));
  FLICK_TRY(m.store.check_all_used());
  m.store.release_pages();
  return m;
}

Expected<OwnedTensor> FramePackDit::forward(const FramePackDitInputs& in, const DitTap& tap,
                                            DitTeaCache* teacache) const {
  const FramePackDitConfig& c = cfg_;
  Backend& be = *run_.be;
  const DType act = run_.act();
  auto is_float = [](const Tensor& t) { return t.dtype == DType::F32 || t.dtype == DType::BF16; };
  if (in.text.ndim() != 3 || in.text.dim(0) != 1 || in.text.dim(1) < 1 ||
      in.text.dim(2) != c.text_dim || !is_float(in.text))
    return invalid_input("FramePack DiT: expected F32/BF16 text states [1, n_valid >= 1, " +
                         std::to_string(c.text_dim) + "], got " + in.text.str());
  if (in.pooled.shape != Shape{1, c.pooled_dim} || !is_float(in.pooled))
    return invalid_input("FramePack DiT: expected an F32/BF16 pooled text embedding [1, " +
                         std::to_string(c.pooled_dim) + "], got " + in.pooled.str());
  if (in.image_embeddings.ndim() != 3 || in.image_embeddings.dim(0) != 1 ||
      in.image_embeddings.dim(1) < 1 || in.image_embeddings.dim(2) != c.image_dim ||
      !is_float(in.image_embeddings))
    return invalid_input("FramePack DiT: expected F32/BF16 image embeddings [1, n, " +
                         std::to_string(c.image_dim) + "], got " + in.image_embeddings.str());
  FLICK_ASSIGN_OR_RETURN(DitPacked packed, embed_.pack(in.latents, tap));

  // The reference's timestep / guidance tensors have the run dtype.
  const float t = run_.bf16() ? round_bf16(in.timestep) : in.timestep;
  const float g = run_.bf16() ? round_bf16(in.guidance) : in.guidance;
  auto to_act = [&](const Tensor& x, Shape shape) {  // `.to(dtype)` of an input
    OwnedTensor o(act, shape);
    be.copy(x.reshape(shape), o.t);
    return o;
  };
  const int64_t nt = in.text.dim(1), ni = in.image_embeddings.dim(1), d = c.dim;
  const OwnedTensor pooled = to_act(in.pooled, {1, c.pooled_dim});
  OwnedTensor temb(act, {1, d}), temb_silu(act, {1, d});
  temb_.forward(t, g, pooled.t, temb.t);
  run_.tap(tap, "temb", temb.t);
  be.silu(temb.t, temb_silu.t);  // every block's modulation input

  // Context = [image tokens ; valid text tokens].
  const OwnedTensor text = to_act(in.text, {nt, c.text_dim});
  const OwnedTensor image = to_act(in.image_embeddings, {ni, c.image_dim});
  const int64_t nx = packed.x.t.dim(0), nc = ni + nt;
  OwnedTensor h(act, {nx + nc, d});  // [x ; ctx]: the single blocks' layout
  Tensor x = h.t.slice(0, 0, nx), ctx = h.t.slice(0, nx, nc);
  Tensor ctx_img = ctx.slice(0, 0, ni), ctx_text = ctx.slice(0, ni, nt);
  refiner_.forward(text.t, t, ctx_text, tap);
  image_proj_.forward(image.t, ctx_img);
  run_.tap(tap, "image_proj", ctx_img);
  be.copy(packed.x.t, x);

  bool calc = true;
  OwnedTensor x_in;
  if (teacache != nullptr) {
    if (double_.empty())
      return invalid_input("FramePack DiT: TeaCache probes double block 0; the model has none");
    OwnedTensor probe(act, {nx, d});
    double_[0].modulated_input(x, temb_silu.t, probe.t);
    FLICK_ASSIGN_OR_RETURN(calc, teacache->should_calc(run_, probe.t));
    if (calc) {
      x_in = OwnedTensor(act, {nx, d});
      be.copy(x, x_in.t);
    } else {
      teacache->apply_residual(run_, x);
    }
  }
  if (calc) {
    for (size_t i = 0; i < double_.size(); ++i)
      double_[i].forward(x, ctx, temb_silu.t, packed.cos.t, packed.sin.t,
                         "double" + std::to_string(i) + ".", tap);
    for (size_t i = 0; i < single_.size(); ++i)
      single_[i].forward(h.t, nx, temb_silu.t, packed.cos.t, packed.sin.t,
                         "single" + std::to_string(i) + ".", tap);
    if (teacache != nullptr) teacache->store_residual(run_, x, x_in.t);
  }

  const Tensor noisy = x.slice(0, nx - packed.noisy_tokens, packed.noisy_tokens);
  OwnedTensor out = head_.forward(noisy, temb_silu.t, packed.frames, packed.h, packed.w, tap);
  run_.tap(tap, "output", out.t);
  return out;
}

}  // namespace flick::hunyuan
