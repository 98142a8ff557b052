// EfficientSAM3 preprocessing (models/sam3/sam3_preprocess.h) bit for bit
// against torch: tests/data/sam3/preprocess_resize.safetensors holds
// torchvision.transforms.v2.functional.resize of uint8 images (bilinear,
// antialias=True, torch 2.15's CPU uint8 kernel) over varied sizes, and the
// processor's whole v2.Compose at a small resolution
// (tools/sam3_image_goldens.py preprocess). Every comparison is exact: the
// resize is integer arithmetic and the normalisation two fp32 roundings.
#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "models/sam3/sam3_preprocess.h"
#include "runtime/dtype.h"
#include "runtime/weights/weight_store.h"

namespace flick {
namespace {

std::string fixture() {
  return std::string(FLICK_TEST_DATA) + "/sam3/preprocess_resize.safetensors";
}

FrameView frame_of(const Tensor& hwc) {  // U8 [H, W, 3]
  return {static_cast<int>(hwc.dim(1)), static_cast<int>(hwc.dim(0)), 3 * hwc.dim(1),
          hwc.ptr<uint8_t>()};
}

TEST(Sam3Preprocess, ResizeIsBitExactWithTorch) {
  auto store = WeightStore::open({fixture()});
  ASSERT_TRUE(store.ok()) << store.status().message();
  int cases = 0;
  for (int i = 0; store->has("case" + std::to_string(i) + ".input"); ++i, ++cases) {
    const std::string c = "case" + std::to_string(i);
    auto in = store->get(c + ".input", DType::U8);
    auto want = store->get(c + ".output", DType::U8);
    ASSERT_TRUE(in.ok() && want.ok()) << c;
    const int w = static_cast<int>(want->dim(1)), h = static_cast<int>(want->dim(0));
    const Frame got = sam3_resize(frame_of(*in), w, h);
    ASSERT_EQ(got.width, w);
    ASSERT_EQ(got.height, h);
    const uint8_t* ref = want->ptr<uint8_t>();
    int64_t wrong = 0, first = -1;
    for (size_t k = 0; k < got.rgb.size(); ++k) {
      if (got.rgb[k] != ref[k]) {
        if (first < 0) first = static_cast<int64_t>(k);
        ++wrong;
      }
    }
    EXPECT_EQ(wrong, 0) << c << ": " << in->dim(1) << "x" << in->dim(0) << " -> " << w << "x" << h
                        << ", first at byte " << first << " (got "
                        << (first >= 0 ? int(got.rgb[size_t(first)]) : 0) << ", torch "
                        << (first >= 0 ? int(ref[first]) : 0) << ")";
  }
  EXPECT_GE(cases, 10);
}

TEST(Sam3Preprocess, StridedSourceRows) {
  // A frame whose rows are padded gives the same result as a packed one.
  auto store = WeightStore::open({fixture()});
  ASSERT_TRUE(store.ok()) << store.status().message();
  auto in = store->get("case0.input", DType::U8);
  auto want = store->get("case0.output", DType::U8);
  ASSERT_TRUE(in.ok() && want.ok());
  const FrameView packed = frame_of(*in);
  const int64_t stride = 3 * packed.width + 5;
  std::vector<uint8_t> padded(size_t(stride * packed.height), 0xAB);
  for (int y = 0; y < packed.height; ++y)
    std::memcpy(padded.data() + y * stride, packed.rgb + y * packed.stride,
                size_t(3 * packed.width));
  const Frame got = sam3_resize({packed.width, packed.height, stride, padded.data()},
                                int(want->dim(1)), int(want->dim(0)));
  EXPECT_EQ(0, std::memcmp(got.rgb.data(), want->ptr<uint8_t>(), got.rgb.size()));
}

TEST(Sam3Preprocess, NormalizeEveryValueAsTorch) {
  auto store = WeightStore::open({fixture()});
  ASSERT_TRUE(store.ok()) << store.status().message();
  auto want = store->get("values.pixels", DType::F32);
  ASSERT_TRUE(want.ok());
  ASSERT_EQ(want->numel(), 256);
  for (int v = 0; v < 256; ++v) {
    const float got = sam3_normalize(static_cast<uint8_t>(v));
    uint32_t a, b;
    std::memcpy(&a, &got, 4);
    std::memcpy(&b, want->ptr<float>() + v, 4);
    EXPECT_EQ(a, b) << "value " << v << ": " << got << " vs " << want->ptr<float>()[v];
  }
}

TEST(Sam3Preprocess, WholeTransformAsTheProcessor) {
  auto store = WeightStore::open({fixture()});
  ASSERT_TRUE(store.ok()) << store.status().message();
  auto in = store->get("pipeline.input", DType::U8);
  auto want = store->get("pipeline.pixels", DType::F32);
  ASSERT_TRUE(in.ok() && want.ok());
  OwnedTensor f32(DType::F32, want->shape), bf16(DType::BF16, want->shape);
  sam3_preprocess(frame_of(*in), f32.t);
  sam3_preprocess(frame_of(*in), bf16.t);
  const float* w = want->ptr<float>();
  for (int64_t i = 0; i < want->numel(); ++i) {
    ASSERT_EQ(f32.t.ptr<float>()[i], w[i]) << "pixel " << i;
    // BF16: the fp32 value rounded to nearest even, as .to(torch.bfloat16).
    ASSERT_EQ(bf16.t.ptr<uint16_t>()[i], f32_to_bf16(w[i])) << "pixel " << i;
  }
}

}  // namespace
}  // namespace flick
