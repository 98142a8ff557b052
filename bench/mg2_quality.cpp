#include "bench/mg2_quality.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>

#include "io/frame_sink.h"
#include "models/wan/wan_action.h"
#include "models/wan/wan_dit.h"
#include "models/wan/wan_quant.h"
#include "runtime/cpu/onednn_info.h"
#include "runtime/dtype.h"

namespace flick::bench {
namespace {

constexpr int64_t kFrames = 3;  // latents per DiT call

// Head size of the tiny CLIP tower (width 32, 2 heads).
constexpr int64_t kTinyClipHeadDim = 16;

std::vector<float> to_f32(Backend& be, const Tensor& t) {
  OwnedTensor c(DType::F32, t.shape);
  be.copy(t, c.t);
  return {c.t.ptr<float>(), c.t.ptr<float>() + t.numel()};
}

// A DiT with its action modules, loaded for one golden mode.
struct Model {
  std::unique_ptr<WanDit> dit;
  std::vector<WanActionModule> actions;
};

Expected<Model> load_model(const WeightView& model, Precision precision, Backend& backend,
                           const WanDitShape& shape) {
  Model m;
  FLICK_ASSIGN_OR_RETURN(WanDit dit,
                         WanDit::load(model, backend, precision, shape, kMg2TinyDitHeadDim));
  m.dit = std::make_unique<WanDit>(std::move(dit));
  const WanDitConfig& c = m.dit->config();
  for (int64_t i = 0; i < c.action_blocks; ++i) {
    FLICK_ASSIGN_OR_RETURN(
        WanActionModule a,
        WanActionModule::load(model.sub("blocks." + std::to_string(i) + ".action_model"), backend,
                              precision, c.dim, shape.frames, shape.frame_tokens(),
                              shape.local_attn_frames,
                              m.actions.empty() ? nullptr : &m.actions.front()));
    m.actions.push_back(std::move(a));
  }
  return m;
}

}  // namespace

std::string mg2_golden_checkpoint(const std::string& golden_dir, const Mg2ModeSpec& mode) {
  return golden_dir + "/weights/" + std::string(mode.checkpoint);
}

Expected<std::vector<std::vector<float>>> mg2_dit_flows(const std::string& golden_dir,
                                                        const Mg2ModeSpec& mode,
                                                        const WeightView& model,
                                                        Precision precision, Backend& backend) {
  const std::string dir = golden_dir + "/";
  const std::string golden_path = dir + "pipeline_" + std::string(mode.name) + ".safetensors";
  FLICK_ASSIGN_OR_RETURN(WeightStore golden, WeightStore::open({golden_path}));
  FLICK_ASSIGN_OR_RETURN(WeightStore consts, WeightStore::open({dir + "constants.safetensors"}));
  const bool templerun = std::string_view(mode.name) == "templerun";
  FLICK_ASSIGN_OR_RETURN(
      Tensor steps,
      consts.get(templerun ? "sampler.templerun.t" : "sampler.universal_gta.t", DType::F32));
  FLICK_ASSIGN_OR_RETURN(Tensor img_cond, golden.get("ref.img_cond"));            // [1,16,N,h,w]
  FLICK_ASSIGN_OR_RETURN(Tensor visual, golden.get("ref.visual_context"));        // [1, Tc, C]
  FLICK_ASSIGN_OR_RETURN(Tensor noise, golden.get("noise.initial", DType::F32));  // [1,16,N,h,w]
  FLICK_ASSIGN_OR_RETURN(Tensor kb_in, golden.get("inputs.keyboard"));            // [1, T, K]
  if (img_cond.ndim() != 5 || visual.ndim() != 3 || kb_in.ndim() != 3 ||
      noise.shape != img_cond.shape)
    return invalid_input(golden_path + ": unexpected golden shapes (img_cond " + img_cond.str() +
                         ", noise " + noise.str() + ")");
  const Tensor keyboard = kb_in.reshape({kb_in.dim(1), kb_in.dim(2)});
  Tensor mouse;  // templerun has none
  if (golden.has("inputs.mouse")) {
    FLICK_ASSIGN_OR_RETURN(Tensor m, golden.get("inputs.mouse"));
    mouse = m.reshape({m.dim(1), m.dim(2)});
  }

  const int64_t lh = img_cond.dim(3), lw = img_cond.dim(4), blocks = img_cond.dim(2) / kFrames;
  const WanDitShape shape{lh, lw, kFrames, visual.dim(1), mode.local_attn_frames};
  FLICK_ASSIGN_OR_RETURN(Model m, load_model(model, precision, backend, shape));
  WanDit& dit = *m.dit;
  FLICK_TRY(dit.set_context(visual));

  const DType act = dit.activation_dtype();
  OwnedTensor noisy(act, {1, 16, kFrames, lh, lw}), cond(act, {1, 20, kFrames, lh, lw});
  OwnedTensor cond_f32(DType::F32, {1, 20, kFrames, lh, lw}), t(DType::F32, {kFrames});
  // One call on latents [3b, 3b + 3) at time `time`.
  auto call = [&](int64_t b, const Tensor& x_in, float time) -> Expected<std::vector<float>> {
    backend.copy(x_in, noisy.t);
    float* p = cond_f32.t.ptr<float>();
    const int64_t plane = lh * lw;
    for (int64_t ch = 0; ch < 4; ++ch)  // the mask: 1 for latent 0 of the video
      for (int64_t f = 0; f < kFrames; ++f)
        std::fill_n(p + (ch * kFrames + f) * plane, plane, b == 0 && f == 0 ? 1.f : 0.f);
    Tensor img_part = cond_f32.t.slice(1, 4, 16);
    backend.copy(img_cond.slice(2, b * kFrames, kFrames), img_part);
    backend.copy(cond_f32.t, cond.t);
    std::fill_n(t.t.ptr<float>(), kFrames, time);
    FLICK_TRY(dit.embed(noisy.t, cond.t, t.t));
    Tensor x = dit.tokens();
    const int64_t start = b * kFrames;
    for (int64_t i = 0; i < dit.config().layers; ++i) {
      if (i < dit.config().action_blocks) {
        dit.attention(i, start);
        FLICK_TRY(m.actions[static_cast<size_t>(i)].forward(x, keyboard, mouse, start));
        dit.feed_forward(i);
      } else {
        dit.block(i, start);
      }
    }
    return to_f32(backend, dit.head());
  };

  std::vector<std::vector<float>> flows;
  const int64_t n_steps = steps.dim(0);
  for (int64_t b = 0; b < blocks; ++b) {
    const std::string pb = "ref.b" + std::to_string(b) + ".s";
    for (int64_t k = 0; k < n_steps; ++k) {
      Tensor x_in = noise.slice(2, b * kFrames, kFrames);
      if (k > 0) {
        FLICK_ASSIGN_OR_RETURN(x_in, golden.get(pb + std::to_string(k) + ".x"));
      }
      FLICK_ASSIGN_OR_RETURN(std::vector<float> flow, call(b, x_in, steps.ptr<float>()[k]));
      flows.push_back(std::move(flow));
    }
    FLICK_ASSIGN_OR_RETURN(Tensor x0, golden.get(pb + std::to_string(n_steps - 1) + ".x0"));
    FLICK_ASSIGN_OR_RETURN(std::vector<float> flow, call(b, x0, 0.f));
    flows.push_back(std::move(flow));
  }
  return flows;
}

FlowAgreement compare_flows(const std::vector<std::vector<float>>& ref,
                            const std::vector<std::vector<float>>& got) {
  FLICK_CHECK(ref.size() == got.size(), "compare_flows: different call counts");
  FlowAgreement a;
  a.calls = static_cast<int>(ref.size());
  double all_rg = 0, all_rr = 0, all_gg = 0;
  for (size_t c = 0; c < ref.size(); ++c) {
    FLICK_CHECK(ref[c].size() == got[c].size(), "compare_flows: different flow sizes");
    double rg = 0, rr = 0, gg = 0, dd = 0;
    for (size_t i = 0; i < ref[c].size(); ++i) {
      const double r = ref[c][i], g = got[c][i];
      rg += r * g;
      rr += r * r;
      gg += g * g;
      dd += (g - r) * (g - r);
    }
    a.min_cosine = std::min(a.min_cosine, rg / std::sqrt(rr * gg));
    a.max_rel_l2 = std::max(a.max_rel_l2, std::sqrt(dd / rr));
    all_rg += rg;
    all_rr += rr;
    all_gg += gg;
  }
  a.cosine = all_rg / std::sqrt(all_rr * all_gg);
  return a;
}

namespace {

class CollectingSink final : public FrameSink {
 public:
  Status begin(int, int, double, int64_t) override { return ok_status(); }
  Status write(const FrameView& f) override {
    for (int y = 0; y < f.height; ++y)
      video.insert(video.end(), f.rgb + y * f.stride, f.rgb + y * f.stride + 3LL * f.width);
    return ok_status();
  }
  Status finish() override { return ok_status(); }
  std::vector<uint8_t> video;  // [T, H, W, 3]
};

std::vector<float> track(const Tensor& t) {
  std::vector<float> v(static_cast<size_t>(t.numel()));
  convert(t.dtype, t.data, DType::F32, v.data(), t.numel());
  return v;
}

}  // namespace

Expected<std::vector<uint8_t>> mg2_pipeline_video(const std::string& golden_dir,
                                                  const std::string& weights_dir,
                                                  const Mg2ModeSpec& mode, Precision precision,
                                                  Backend& backend, Precision vae_precision,
                                                  const Mg2Pipeline::Tap& tap) {
  const std::string golden_path =
      golden_dir + "/pipeline_" + std::string(mode.name) + ".safetensors";
  FLICK_ASSIGN_OR_RETURN(WeightStore golden, WeightStore::open({golden_path}));
  FLICK_ASSIGN_OR_RETURN(Tensor img, golden.get("inputs.image_u8", DType::U8));  // [3, H, W]
  FLICK_ASSIGN_OR_RETURN(Tensor noise, golden.get("noise.initial"));
  FLICK_ASSIGN_OR_RETURN(Tensor keyboard, golden.get("inputs.keyboard"));
  if (img.ndim() != 3 || img.dim(0) != 3 || noise.ndim() != 5)
    return invalid_input(golden_path + ": unexpected image " + img.str() + " or noise " +
                         noise.str());
  Mg2Input in;
  in.image.height = static_cast<int>(img.dim(1));
  in.image.width = static_cast<int>(img.dim(2));
  in.image.rgb.resize(static_cast<size_t>(img.numel()));
  const int64_t plane = img.dim(1) * img.dim(2);
  for (int64_t c = 0; c < 3; ++c)  // CHW -> HWC
    for (int64_t i = 0; i < plane; ++i)
      in.image.rgb[static_cast<size_t>(i * 3 + c)] = img.ptr<uint8_t>()[c * plane + i];
  in.seed = 42;  // the goldens' (manifest seeds)
  in.latent_frames = noise.dim(2);
  in.keyboard = track(keyboard);
  if (golden.has("inputs.mouse")) {
    FLICK_ASSIGN_OR_RETURN(Tensor mouse, golden.get("inputs.mouse"));
    in.mouse = track(mouse);
  }

  Mg2Options o;
  o.weights = weights_dir;
  o.mode = mode.mode;
  o.precision = precision;
  o.vae_precision = vae_precision;
  o.width = in.image.width;
  o.height = in.image.height;
  o.dit_head_dim = kMg2TinyDitHeadDim;
  o.clip_head_dim = kTinyClipHeadDim;
  FLICK_ASSIGN_OR_RETURN(std::unique_ptr<Mg2Pipeline> p, Mg2Pipeline::load(o, backend));
  CollectingSink sink;
  FLICK_TRY(p->run(in, sink, RunContext{}, tap));
  return std::move(sink.video);
}

double psnr_u8(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
  FLICK_CHECK(a.size() == b.size() && !a.empty(), "psnr_u8: sizes differ");
  double se = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = static_cast<double>(a[i]) - b[i];
    se += d * d;
  }
  if (se == 0) return std::numeric_limits<double>::infinity();
  return 10 * std::log10(255.0 * 255.0 * static_cast<double>(a.size()) / se);
}

Expected<std::vector<Mg2QualityRow>> run_mg2_quality(const std::string& golden_dir,
                                                     std::span<const Precision> precisions) {
  std::unique_ptr<Backend> backend = make_cpu_backend();
  std::vector<Mg2QualityRow> rows;
  const std::string weights = golden_dir + "/weights";
  for (const Mg2ModeSpec& mode : mg2_modes()) {
    FLICK_ASSIGN_OR_RETURN(WeightStore store,
                           WeightStore::open({mg2_golden_checkpoint(golden_dir, mode)}));
    const WeightView model = store.view("model.");
    FLICK_ASSIGN_OR_RETURN(auto ref,
                           mg2_dit_flows(golden_dir, mode, model, Precision::BF16, *backend));
    FLICK_ASSIGN_OR_RETURN(
        auto ref_video, mg2_pipeline_video(golden_dir, weights, mode, Precision::BF16, *backend));
    for (Precision p : precisions) {
      FLICK_ASSIGN_OR_RETURN(auto got, mg2_dit_flows(golden_dir, mode, model, p, *backend));
      FLICK_ASSIGN_OR_RETURN(auto video,
                             mg2_pipeline_video(golden_dir, weights, mode, p, *backend));
      rows.push_back(
          {std::string(mode.name), p, compare_flows(ref, got), psnr_u8(ref_video, video)});
    }
  }
  return rows;
}

void print_mg2_quality(const std::vector<Mg2QualityRow>& rows, std::FILE* out) {
  std::fprintf(out,
               "Matrix-Game vs BF16 on the golden job (tiny model: DiT dim 64, 4 blocks). DiT: "
               "flows of every sampler call on the same inputs; video: the whole pipeline's u8 "
               "frames\n");
  std::fprintf(out, "%-10s %-9s %5s %12s %12s %12s %14s\n", "mode", "precision", "calls", "cos min",
               "cos all", "rel_l2 max", "video PSNR dB");
  for (const Mg2QualityRow& r : rows)
    std::fprintf(out, "%-10s %-9s %5d %12.6f %12.6f %12.4g %14.2f\n", r.mode.c_str(),
                 precision_name(r.precision), r.dit.calls, r.dit.min_cosine, r.dit.cosine,
                 r.dit.max_rel_l2, r.video_psnr_db);
  std::fflush(out);
}

Status run_quality_report(const std::string& golden_dir) {
  const std::string dir = golden_dir.empty() ? std::string(FLICK_MG2_GOLDENS) : golden_dir;
  std::vector<Precision> precisions = {Precision::F32, Precision::FP8};
  if (cpu::cpu_supports(Precision::INT8)) {
    precisions.insert(precisions.begin() + 1, Precision::INT8);
  } else {
    std::printf("int8: not supported on this CPU (needs AVX-512 VNNI or AMX)\n");
  }
  FLICK_ASSIGN_OR_RETURN(std::vector<Mg2QualityRow> rows, run_mg2_quality(dir, precisions));
  print_mg2_quality(rows, stdout);
  return ok_status();
}

}  // namespace flick::bench
