#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "runtime/weights/safetensors.h"
#include "runtime/weights/weight_store.h"
#include "tests/weights/weights_test_util.h"

namespace flick {
namespace {

using testing::TempDir;

// A DiT-like layout: model.blocks.{0..11}.self_attn.q.weight etc.
class WeightStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    q_.resize(6 * 4);
    for (size_t i = 0; i < q_.size(); ++i) q_[i] = static_cast<float>(i);
    bias_.assign(6, 0x3F80);  // bf16 1.0
    std::vector<SafetensorsTensor> t;
    const StoredType* f32 = stored_type_by_name("F32");
    const StoredType* bf16 = stored_type_by_name("BF16");
    for (int b = 0; b < 12; ++b) {
      const std::string p = "model.blocks." + std::to_string(b) + ".";
      t.push_back({p + "self_attn.q.weight", f32, {6, 4}, q_.data()});
      t.push_back({p + "self_attn.q.bias", bf16, {6}, bias_.data()});
    }
    t.push_back({"model.head.weight", f32, {4, 6}, q_.data()});
    t.push_back({"model.pos_ids", stored_type_by_name("I64"), {3}, q_.data()});
    path_ = dir_.file("dit.safetensors");
    ASSERT_TRUE(write_safetensors(path_, t, {{"format", "pt"}}).ok());
    auto s = WeightStore::open({path_});
    ASSERT_TRUE(s.ok()) << s.status().message();
    store_ = std::move(*s);
  }

  TempDir dir_;
  std::string path_;
  std::vector<float> q_;
  std::vector<uint16_t> bias_;
  WeightStore store_;
};

TEST_F(WeightStoreTest, GetsTensorsByPrefixWithDTypeAndShapeChecked) {
  WeightView block = store_.view("model.blocks").sub("3");
  EXPECT_EQ(block.prefix(), "model.blocks.3.");
  auto q = block.get("self_attn.q.weight", DType::F32, {6, 4});
  ASSERT_TRUE(q.ok()) << q.status().message();
  EXPECT_EQ(q->dtype, DType::F32);
  EXPECT_EQ(q->shape, (Shape{6, 4}));
  EXPECT_TRUE(q->is_contiguous());
  EXPECT_EQ(q->ptr<float>()[23], 23.0f);
  auto bias = block.get("self_attn.q.bias", {DType::BF16, DType::F32}, {kAnyDim});
  ASSERT_TRUE(bias.ok()) << bias.status().message();
  EXPECT_EQ(load_as_f32(bias->dtype, bias->data, 5), 1.0f);
  EXPECT_TRUE(block.has("self_attn.q.bias"));
  EXPECT_FALSE(block.has("self_attn.k.weight"));
  ASSERT_NE(block.info("self_attn.q.weight"), nullptr);
  EXPECT_EQ(block.info("self_attn.q.weight")->shape, (std::vector<int64_t>{6, 4}));
}

TEST_F(WeightStoreTest, ErrorsNameTheFullTensorAndFile) {
  WeightView block = store_.view("model.blocks.3.");
  auto shape = block.get("self_attn.q.weight", DType::F32, {6, 6});
  EXPECT_EQ(shape.status().message(),
            "model.blocks.3.self_attn.q.weight: expected shape [6, 6], "
            "file has [6, 4] (" +
                path_ + ")");
  auto rank = block.get("self_attn.q.weight", DType::F32, {24});
  EXPECT_EQ(rank.status().message(),
            "model.blocks.3.self_attn.q.weight: expected shape [24], "
            "file has [6, 4] (" +
                path_ + ")");
  auto wildcard = block.get("self_attn.q.weight", DType::F32, {kAnyDim, 5});
  EXPECT_EQ(wildcard.status().message(),
            "model.blocks.3.self_attn.q.weight: expected shape "
            "[*, 5], file has [6, 4] (" +
                path_ + ")");
  auto dtype = block.get("self_attn.q.weight", {DType::BF16, DType::F16});
  EXPECT_EQ(dtype.status().message(),
            "model.blocks.3.self_attn.q.weight: expected dtype BF16 or "
            "F16, file has F32 (" +
                path_ + ")");
  auto missing = block.get("self_attn.k.weight");
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(missing.status().message(),
            "model.blocks.3.self_attn.k.weight: no such tensor in " + path_);
  auto foreign = store_.get("model.pos_ids");
  EXPECT_EQ(foreign.status().message(),
            "model.pos_ids: dtype I64 is not one flick computes in (" + path_ + ")");
}

TEST_F(WeightStoreTest, ListsNamesAndChildrenInOrder) {
  auto names = store_.names();
  EXPECT_EQ(names.size(), 26u);
  EXPECT_TRUE(std::is_sorted(names.begin(), names.end()));
  WeightView blocks = store_.view("model.blocks");
  std::vector<std::string> expected;
  for (int b = 0; b < 12; ++b) expected.push_back(std::to_string(b));
  EXPECT_EQ(blocks.children(), expected);  // numeric order: 2 before 10
  EXPECT_EQ(store_.view("model").children(),
            (std::vector<std::string>{"blocks", "head", "pos_ids"}));
  EXPECT_EQ(blocks.sub("11").names(),
            (std::vector<std::string>{"self_attn.q.bias", "self_attn.q.weight"}));
  // A prefix is a whole name component: "model.blocks.1." excludes block 10.
  EXPECT_EQ(blocks.sub("1").names().size(), 2u);
}

TEST_F(WeightStoreTest, ReportsTensorsNoComponentAskedFor) {
  WeightView blocks = store_.view("model.blocks");
  for (int b = 0; b < 12; ++b) {
    WeightView block = blocks.sub(std::to_string(b));
    ASSERT_TRUE(block.get("self_attn.q.weight", DType::F32, {6, 4}).ok());
    if (b != 7) {
      ASSERT_TRUE(block.get("self_attn.q.bias", DType::BF16, {6}).ok());
    }
  }
  EXPECT_EQ(blocks.unused(), (std::vector<std::string>{"model.blocks.7.self_attn.q.bias"}));
  Status extra = store_.check_all_used();
  EXPECT_EQ(extra.message(), "3 unexpected tensors in " + path_ +
                                 ": model.blocks.7.self_attn.q.bias, model.head.weight, "
                                 "model.pos_ids");
  // A failed get still counts as asked for: the error is reported there.
  EXPECT_FALSE(store_.get("model.pos_ids").ok());
  store_.view("model.blocks.7").mark_used("self_attn.q.bias");
  EXPECT_EQ(store_.unused(), (std::vector<std::string>{"model.head.weight"}));
  EXPECT_EQ(store_.view("model.blocks").check_all_used().ok(), true);
}

TEST_F(WeightStoreTest, ViewsSurviveMovingTheStore) {
  WeightView head = store_.view("model.head");
  WeightStore moved = std::move(store_);
  auto w = head.get("weight", DType::F32, {4, 6});
  ASSERT_TRUE(w.ok()) << w.status().message();
  EXPECT_EQ(moved.unused().size(), 25u);
}

TEST_F(WeightStoreTest, RefusesANameInTwoFilesAndStaysUnchanged) {
  float v[2] = {1, 2};
  const std::string other = dir_.file("other.safetensors");
  ASSERT_TRUE(write_safetensors(other, {{"extra.x", stored_type_by_name("F32"), {2}, v},
                                        {"model.head.weight", stored_type_by_name("F32"), {2}, v}})
                  .ok());
  Status s = store_.add(other);
  EXPECT_EQ(s.message(), "model.head.weight: in both " + path_ + " and " + other);
  EXPECT_EQ(store_.size(), 26u);
  EXPECT_FALSE(store_.has("extra.x"));
  EXPECT_EQ(store_.sources().size(), 1u);
}

TEST(WeightStore, CombinesSafetensorsAndPthFiles) {
  const std::string pth = testing::data_path("nested_p4.pth");
  const std::string st = testing::data_path("all_dtypes.safetensors");
  auto store = WeightStore::open({pth, st});
  ASSERT_TRUE(store.ok()) << store.status().message();
  ASSERT_EQ(store->sources().size(), 2u);
  EXPECT_EQ(store->sources()[0].format, "pytorch");
  EXPECT_EQ(store->sources()[0].metadata.at("epoch"), "7");
  EXPECT_EQ(store->sources()[1].format, "safetensors");
  EXPECT_TRUE(store->has("state_dict.enc.weight"));
  EXPECT_TRUE(store->has("dt.bf16"));
  auto missing = store->get("nope");
  EXPECT_EQ(missing.status().message(), "nope: no such tensor in " + pth + ", " + st);
  auto t = store->view("state_dict").sub("dec").get("weight", DType::F32, {2, 3});
  ASSERT_TRUE(t.ok()) << t.status().message();
}

TEST(WeightStore, ReportsFilesThatCannotBeOpened) {
  auto missing = WeightStore::open({"/nonexistent/dit.safetensors"});
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("/nonexistent/dit.safetensors"), std::string::npos);
  auto dir = WeightStore::open({std::string(FLICK_TEST_DATA)});
  EXPECT_FALSE(dir.ok());
  EXPECT_NE(dir.status().message().find("not a regular file"), std::string::npos)
      << dir.status().message();
}

TEST(DTypeSet, ListsItsMembers) {
  EXPECT_EQ(DTypeSet(DType::BF16).str(), "BF16");
  EXPECT_EQ(DTypeSet({DType::F32, DType::I8}).str(), "F32 or I8");
  EXPECT_TRUE(DTypeSet::any().contains(DType::F8_E5M2));
  EXPECT_FALSE(DTypeSet(DType::BF16).contains(DType::F16));
}

// Resident set size of this process in kB (VmRSS).
int64_t rss_kb() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::stoll(line.substr(6));
  return -1;
}

TEST(WeightStoreRelease, MappedPagesLeaveTheResidentSetAndViewsStayValid) {
  const std::string path = ::testing::TempDir() + "release_pages.safetensors";
  constexpr int64_t kN = 16 << 20;  // 64 MB of f32
  {
    OwnedTensor t(DType::F32, {kN});
    for (int64_t i = 0; i < kN; ++i) t.t.ptr<float>()[i] = static_cast<float>(i % 1000);
    ASSERT_TRUE(write_safetensors(path, {SafetensorsTensor::from_tensor("w", t.t)}).ok());
  }
  Expected<WeightStore> store = WeightStore::open({path});
  ASSERT_TRUE(store.ok()) << store.status().message();
  const Tensor w = *store->get("w");
  auto checksum = [&] {
    double s = 0;
    for (int64_t i = 0; i < kN; i += 1024) s += w.ptr<float>()[i];  // one read per page
    return s;
  };
  const double sum = checksum();
  const int64_t touched = rss_kb();
  store->release_pages();
  const int64_t released = rss_kb();
  EXPECT_LT(released, touched - 48 * 1024) << "kB before " << touched << ", after " << released;
  EXPECT_EQ(checksum(), sum);  // the view faults its pages back in
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace flick
