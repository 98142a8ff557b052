#include "models/hunyuan/framepack_dit_teacache.h"

#include <cmath>
#include <string>

#include "runtime/dtype.h"

namespace flick::hunyuan {
namespace {

// mean(|t|) as a tensor of t's dtype: an fp32 mean, rounded to the dtype
// (torch's bf16 mean accumulates in fp32).
float mean_abs(const DitRun& run, const Tensor& t) {
  OwnedTensor f(DType::F32, t.shape);
  run.be->copy(t, f.t);
  double sum = 0;
  const float* p = f.t.ptr<float>();
  for (int64_t i = 0; i < f.t.numel(); ++i) sum += std::abs(p[i]);
  const auto m = static_cast<float>(sum / static_cast<double>(f.t.numel()));
  return run.bf16() ? round_bf16(m) : m;
}

// np.poly1d([...]) of the reference (:829): Horner in float64.
double rescale(double x) {
  static constexpr double kCoef[] = {7.33226126e+02, -4.01131952e+02, 6.75869174e+01,
                                     -3.14987800e+00, 9.61237896e-02};
  double y = 0;
  for (double c : kCoef) y = y * x + c;
  return y;
}

}  // namespace

DitTeaCache::DitTeaCache(int64_t num_steps, double rel_l1_thresh)
    : num_steps_(num_steps), thresh_(rel_l1_thresh) {}

Expected<bool> DitTeaCache::should_calc(const DitRun& run, const Tensor& modulated) {
  bool calc = true;
  if (cnt_ == 0 || cnt_ == num_steps_ - 1) {
    acc_ = 0;
  } else {
    if (prev_.t.shape != modulated.shape || prev_.t.dtype != modulated.dtype)
      return invalid_input("FramePack DiT TeaCache: the call's image tokens " + modulated.str() +
                           " differ from the previous call's " + prev_.t.str() +
                           " (one cache per section, initialised per section)");
    // (mod - prev).abs().mean() / prev.abs().mean(), each a run-dtype tensor.
    OwnedTensor diff(run.act(), modulated.shape);
    run.be->affine(prev_.t, -1.f, 0.f, diff.t);  // exact negation
    run.be->add(modulated, diff.t, diff.t);
    const float num = mean_abs(run, diff.t), den = mean_abs(run, prev_.t);
    float rel = num / den;
    if (run.bf16()) rel = round_bf16(rel);
    last_rel_ = rel;
    acc_ += rescale(rel);
    calc = acc_ >= thresh_;
    if (calc) acc_ = 0;
  }
  if (prev_.t.shape != modulated.shape || prev_.t.dtype != modulated.dtype)
    prev_ = OwnedTensor(modulated.dtype, modulated.shape);
  run.be->copy(modulated, prev_.t);
  if (++cnt_ == num_steps_) cnt_ = 0;
  if (!calc && residual_.t.shape != modulated.shape)
    return invalid_input("FramePack DiT TeaCache: no residual of a full call to reuse");
  return calc;
}

void DitTeaCache::store_residual(const DitRun& run, const Tensor& x_out, const Tensor& x_in) {
  if (residual_.t.shape != x_out.shape || residual_.t.dtype != x_out.dtype)
    residual_ = OwnedTensor(x_out.dtype, x_out.shape);
  run.be->affine(x_in, -1.f, 0.f, residual_.t);
  run.be->add(x_out, residual_.t, residual_.t);
}

void DitTeaCache::apply_residual(const DitRun& run, Tensor& x) const {
  run.be->add(x, residual_.t, x);
}

}  // namespace flick::hunyuan
