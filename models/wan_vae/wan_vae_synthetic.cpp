#include "models/wan_vae/wan_vae_synthetic.h"

#include <algorithm>
#include <cmath>
#include <memory>

#include "runtime/weights/stored_type.h"
#include "runtime/weights/weight_file.h"

namespace flick::wan_vae {
namespace {

using Shape5 = std::vector<int64_t>;

class Layout {
 public:
  std::vector<SyntheticTensor> tensors;

  void add(const std::string& name, Shape5 shape) { tensors.push_back({name, std::move(shape)}); }
  void conv(const std::string& p, int64_t out, int64_t in, Shape5 kernel) {
    Shape5 s{out, in};
    s.insert(s.end(), kernel.begin(), kernel.end());
    add(p + ".weight", s);
    add(p + ".bias", {out});
  }
  void residual(const std::string& p, int64_t in, int64_t out) {
    add(p + ".residual.0.gamma", {in, 1, 1, 1});
    conv(p + ".residual.2", out, in, {3, 3, 3});
    add(p + ".residual.3.gamma", {out, 1, 1, 1});
    conv(p + ".residual.6", out, out, {3, 3, 3});
    if (in != out) conv(p + ".shortcut", out, in, {1, 1, 1});
  }
  void attention(const std::string& p, int64_t c) {
    add(p + ".norm.gamma", {c, 1, 1});
    conv(p + ".to_qkv", 3 * c, c, {1, 1});
    conv(p + ".proj", c, c, {1, 1});
  }
  void middle(const std::string& p, int64_t c) {
    residual(p + ".0", c, c);
    attention(p + ".1", c);
    residual(p + ".2", c, c);
  }
};

// A WeightFile whose tensors are generated on first access.
class SyntheticFile final : public WeightFile {
 public:
  SyntheticFile(std::vector<SyntheticTensor> layout, uint64_t seed) : seed_(seed) {
    path_ = "synthetic:Wan2.1_VAE.pth";
    for (SyntheticTensor& t : layout) {
      TensorInfo info;
      info.name = std::move(t.name);
      info.type = &stored_type_of(DType::F32);
      info.shape = std::move(t.shape);
      info.numel = 1;
      for (int64_t d : info.shape) info.numel *= static_cast<uint64_t>(d);
      info.nbytes = info.numel * 4;
      tensors_.push_back(std::move(info));
    }
    std::sort(tensors_.begin(), tensors_.end(),
              [](const TensorInfo& a, const TensorInfo& b) { return a.name < b.name; });
    data_.resize(tensors_.size());
  }
  std::string_view format() const override { return "synthetic"; }

  Expected<const uint8_t*> data(size_t i) override {
    if (data_[i].empty()) generate(i);
    return reinterpret_cast<const uint8_t*>(data_[i].data());
  }

 private:
  void generate(size_t i) {
    const TensorInfo& t = tensors_[i];
    const std::string& n = t.name;
    float offset = 0, scale = 0;
    if (n.ends_with(".gamma")) {
      offset = 1.f;
      scale = 0.1f;
    } else if (n.ends_with(".bias")) {
      scale = 0.02f;
    } else {
      int64_t fan_in = 1;
      for (size_t d = 1; d < t.shape.size(); ++d) fan_in *= t.shape[d];
      scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(fan_in)));
    }
    // Uniform with the same mean and standard deviation: the statistics a
    // benchmark or an accuracy comparison depends on, at a fraction of the
    // cost of normal samples (126.9 M values at full size).
    uint64_t state = seed_ ^ (0x9E3779B97F4A7C15ull * (std::hash<std::string>{}(n) | 1));
    const float half_width = scale * 1.7320508f;  // sqrt(3): unit variance
    std::vector<float>& v = data_[i];
    v.resize(t.numel);
    for (float& x : v) {
      state = state * 6364136223846793005ull + 1442695040888963407ull;  // PCG's LCG step
      const float u = static_cast<float>(state >> 40) * 0x1p-24f;       // [0, 1)
      x = offset + half_width * (2.f * u - 1.f);
    }
  }

  uint64_t seed_;
  std::vector<std::vector<float>> data_;
};

}  // namespace

std::vector<SyntheticTensor> wan_vae_checkpoint_layout(int64_t dim) {
  Layout l;
  const int64_t z = 16;
  const int64_t mult[4] = {1, 2, 4, 4};
  // Encoder3d: dims [d, d, 2d, 4d, 4d]; per stage 2 residual blocks, then a
  // resampler (downsample2d, downsample3d, downsample3d) except after the last.
  const int64_t enc_dims[5] = {dim, dim * mult[0], dim * mult[1], dim * mult[2], dim * mult[3]};
  l.conv("encoder.conv1", enc_dims[0], 3, {3, 3, 3});
  int idx = 0;
  for (int s = 0; s < 4; ++s) {
    int64_t in = enc_dims[s];
    const int64_t out = enc_dims[s + 1];
    for (int r = 0; r < 2; ++r, in = out)
      l.residual("encoder.downsamples." + std::to_string(idx++), in, out);
    if (s == 3) break;
    const std::string p = "encoder.downsamples." + std::to_string(idx++);
    l.conv(p + ".resample.1", out, out, {3, 3});
    if (s > 0) l.conv(p + ".time_conv", out, out, {3, 1, 1});
  }
  const int64_t top = enc_dims[4];
  l.middle("encoder.middle", top);
  l.add("encoder.head.0.gamma", {top, 1, 1, 1});
  l.conv("encoder.head.2", 2 * z, top, {3, 3, 3});
  l.conv("conv1", 2 * z, 2 * z, {1, 1, 1});
  l.conv("conv2", z, z, {1, 1, 1});
  // Decoder3d: dims [4d, 4d, 4d, 2d, d]; per stage 3 residual blocks (the
  // stage after an upsampler takes half its channels), then upsample3d,
  // upsample3d, upsample2d.
  const int64_t dec_dims[5] = {dim * mult[3], dim * mult[3], dim * mult[2], dim * mult[1],
                               dim * mult[0]};
  l.conv("decoder.conv1", dec_dims[0], z, {3, 3, 3});
  l.middle("decoder.middle", dec_dims[0]);
  idx = 0;
  for (int s = 0; s < 4; ++s) {
    int64_t in = s == 0 ? dec_dims[0] : dec_dims[s] / 2;
    const int64_t out = dec_dims[s + 1];
    for (int r = 0; r < 3; ++r, in = out)
      l.residual("decoder.upsamples." + std::to_string(idx++), in, out);
    if (s == 3) break;
    const std::string p = "decoder.upsamples." + std::to_string(idx++);
    l.conv(p + ".resample.1", out / 2, out, {3, 3});
    if (s < 2) l.conv(p + ".time_conv", 2 * out, out, {3, 1, 1});
  }
  l.add("decoder.head.0.gamma", {dec_dims[4], 1, 1, 1});
  l.conv("decoder.head.2", 3, dec_dims[4], {3, 3, 3});
  return std::move(l.tensors);
}

Expected<WeightStore> make_synthetic_wan_vae(int64_t dim, uint64_t seed) {
  WeightStore store;
  FLICK_TRY(store.add(std::make_unique<SyntheticFile>(wan_vae_checkpoint_layout(dim), seed)));
  return store;
}

}  // namespace flick::wan_vae
