// flick's .pth writer against torch.save (tests/data/weights/pth_writer_torch.pth,
// written by tools/gen_pth_writer_fixture.py from the same rule as
// fixture_tensors() below) and against flick's own reader (PthFile, which
// checks every CRC through libzip).
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <zip.h>

#include <cstring>
#include <string>
#include <vector>

#include "runtime/weights/pth.h"
#include "runtime/weights/pth_writer.h"
#include "runtime/weights/weight_store.h"
#include "tests/weights/weights_test_util.h"

namespace flick {
namespace {

using testing::data_path;
using testing::TempDir;

// The fixture's state dict (keep in sync with tools/gen_pth_writer_fixture.py).
constexpr int kFixtureCount = 1001;
constexpr DType kFixtureDTypes[] = {DType::F32, DType::BF16, DType::F16,     DType::I8,
                                    DType::U8,  DType::I32,  DType::F8_E4M3, DType::F8_E5M2};
const std::vector<int64_t> kFixtureShapes[] = {{},    {0}, {3}, {2, 3}, {4, 1, 2}, {1, 2, 1, 2, 1},
                                               {0, 5}};

StreamedTensor fixture_tensor(int i) {
  StreamedTensor t;
  t.name = "layer" + std::to_string(i) + ".w";
  if (i == 0) {
    t.dtype = DType::U8;
    t.shape = {70000};
  } else if (i == 1) {
    t.dtype = DType::I32;
    t.shape = {300, 2};
  } else {
    t.dtype = kFixtureDTypes[i % 8];
    t.shape = kFixtureShapes[i % 7];
  }
  t.fill = [i](uint64_t offset, std::span<uint8_t> out) {
    for (size_t j = 0; j < out.size(); ++j)
      out[j] = static_cast<uint8_t>((i * 131 + (offset + j) * 7 + 3) & 0xff);
  };
  return t;
}

std::vector<StreamedTensor> fixture_tensors() {
  std::vector<StreamedTensor> v;
  for (int i = 0; i < kFixtureCount; ++i) v.push_back(fixture_tensor(i));
  return v;
}

// Every entry of a zip archive, in order, as (name, bytes); CRCs checked.
std::vector<std::pair<std::string, std::string>> zip_entries(const std::string& path) {
  std::vector<std::pair<std::string, std::string>> out;
  int err = 0;
  zip_t* z = zip_open(path.c_str(), ZIP_RDONLY | ZIP_CHECKCONS, &err);
  EXPECT_NE(z, nullptr) << path << ": libzip error " << err;
  if (!z) return out;
  const zip_int64_t n = zip_get_num_entries(z, 0);
  for (zip_int64_t i = 0; i < n; ++i) {
    zip_stat_t st;
    EXPECT_EQ(zip_stat_index(z, static_cast<zip_uint64_t>(i), 0, &st), 0);
    EXPECT_EQ(st.comp_method, ZIP_CM_STORE) << st.name;
    std::string bytes(st.size, '\0');
    zip_file_t* f = zip_fopen_index(z, static_cast<zip_uint64_t>(i), 0);
    EXPECT_NE(f, nullptr);
    if (!f) break;
    EXPECT_EQ(zip_fread(f, bytes.data(), st.size), static_cast<zip_int64_t>(st.size)) << st.name;
    char extra;
    EXPECT_EQ(zip_fread(f, &extra, 1), 0) << st.name << ": CRC or length";
    zip_fclose(f);
    out.emplace_back(st.name, std::move(bytes));
  }
  zip_discard(z);
  return out;
}

TEST(PthWriter, WritesWhatTorchSaveWrites) {
  TempDir dir;
  const std::string ours = dir.file("ours.pth");
  ASSERT_TRUE(write_pth(ours, fixture_tensors(), {.archive_name = "pth_writer_torch"}).ok());

  auto torch_entries = zip_entries(data_path("pth_writer_torch.pth"));
  auto our_entries = zip_entries(ours);
  // torch >= 2.4 adds a random serialization id that nothing reads back.
  std::erase_if(torch_entries,
                [](const auto& e) { return e.first.ends_with("/.data/serialization_id"); });
  ASSERT_EQ(our_entries.size(), torch_entries.size());
  ASSERT_EQ(our_entries.size(), static_cast<size_t>(kFixtureCount) + 5);
  for (size_t i = 0; i < our_entries.size(); ++i) {
    SCOPED_TRACE(torch_entries[i].first);
    EXPECT_EQ(our_entries[i].first, torch_entries[i].first);
    // data.pkl included: the same opcodes, memo slots and SETITEMS batches.
    EXPECT_TRUE(our_entries[i].second == torch_entries[i].second)
        << our_entries[i].second.size() << " vs " << torch_entries[i].second.size() << " bytes";
  }
}

// {"model": state_dict}, as released training checkpoints are saved
// (PthWriteOptions::wrap_in): the same bytes as torch.save of that dict
// (tools/gen_pth_writer_fixture.py), read back by flick as "model.<name>".
TEST(PthWriter, WrappedStateDictIsWhatTorchSaveWrites) {
  TempDir dir;
  const std::string ours = dir.file("ours.pth");
  const std::vector<StreamedTensor> tensors = {fixture_tensor(2), fixture_tensor(3),
                                               fixture_tensor(4)};
  ASSERT_TRUE(
      write_pth(ours, tensors, {.archive_name = "pth_writer_torch_wrapped", .wrap_in = "model"})
          .ok());
  auto torch_entries = zip_entries(data_path("pth_writer_torch_wrapped.pth"));
  auto our_entries = zip_entries(ours);
  std::erase_if(torch_entries,
                [](const auto& e) { return e.first.ends_with("/.data/serialization_id"); });
  ASSERT_EQ(our_entries.size(), torch_entries.size());
  for (size_t i = 0; i < our_entries.size(); ++i) {
    SCOPED_TRACE(torch_entries[i].first);
    EXPECT_EQ(our_entries[i].first, torch_entries[i].first);
    EXPECT_TRUE(our_entries[i].second == torch_entries[i].second);
  }
  auto file = PthFile::open(ours);
  ASSERT_TRUE(file.ok()) << file.status().message();
  ASSERT_EQ((*file)->tensors().size(), 3u);
  EXPECT_EQ((*file)->tensors()[0].name, "model.layer2.w");
  EXPECT_EQ((*file)->tensors()[2].name, "model.layer4.w");
}

// The storages start at multiples of 64 in both files (torch pads with an
// "FB" extra field so that torch.load(mmap=True) can map them).
TEST(PthWriter, StoragesAre64ByteAligned) {
  TempDir dir;
  const std::string ours = dir.file("ours.pth");
  ASSERT_TRUE(write_pth(ours, fixture_tensors()).ok());
  for (const std::string& path : {ours, data_path("pth_writer_torch.pth")}) {
    SCOPED_TRACE(path);
    const std::vector<uint8_t> file = testing::read_bytes(path);
    // Every tensor's bytes are a stretch of one 256-periodic sequence, so
    // each is searched after the previous one: tensor 0 (70000 bytes), then
    // tensor 1 (2400) and tensor 2 (6).
    auto from = file.begin();
    for (int i : {0, 1, 2}) {
      const StreamedTensor t = fixture_tensor(i);
      std::vector<uint8_t> want(*t.nbytes());
      t.fill(0, want);
      auto at = std::search(from, file.end(), want.begin(), want.end());
      ASSERT_NE(at, file.end()) << "tensor " << i;
      EXPECT_EQ((at - file.begin()) % 64, 0) << "tensor " << i;
      from = at + static_cast<std::ptrdiff_t>(want.size());
    }
  }
}

TEST(PthWriter, ReadsBackThroughPthFileAndWeightStore) {
  TempDir dir;
  const std::string path = dir.file("model.pth");
  std::vector<float> w(6 * 5);
  for (size_t i = 0; i < w.size(); ++i) w[i] = 0.25f * static_cast<float>(i) - 3.f;
  std::vector<uint16_t> b = {f32_to_bf16(1.5f), f32_to_bf16(-2.f), f32_to_bf16(1e-3f)};
  float scalar = 2.5f;
  std::vector<StreamedTensor> tensors = {
      StreamedTensor::from_tensor("encoder.w", Tensor::view(w.data(), DType::F32, {6, 5})),
      StreamedTensor::from_tensor("encoder.b", Tensor::view(b.data(), DType::BF16, {3})),
      StreamedTensor::from_tensor("scale", Tensor::view(&scalar, DType::F32, {})),
      {"zeros", DType::F16, {1000, 3}, {}},  // a hole, CRC of zeros
      {"empty", DType::I32, {0, 7}, {}},
  };
  ASSERT_TRUE(write_pth(path, tensors).ok());

  auto file = PthFile::open(path);
  ASSERT_TRUE(file.ok()) << file.status().message();
  ASSERT_EQ((*file)->tensors().size(), 5u);
  auto store = WeightStore::open({path});
  ASSERT_TRUE(store.ok()) << store.status().message();

  auto tw = store->get("encoder.w", DType::F32, {6, 5});
  ASSERT_TRUE(tw.ok()) << tw.status().message();
  EXPECT_EQ(std::memcmp(tw->data, w.data(), w.size() * 4), 0);
  auto tb = store->get("encoder.b", DType::BF16, {3});
  ASSERT_TRUE(tb.ok()) << tb.status().message();
  EXPECT_EQ(std::memcmp(tb->data, b.data(), 6), 0);
  auto ts = store->get("scale", DType::F32, Shape{});
  ASSERT_TRUE(ts.ok()) << ts.status().message();
  EXPECT_EQ(*ts->ptr<float>(), 2.5f);
  // Reading a storage to its end makes libzip check its CRC.
  auto tz = store->get("zeros", DType::F16, {1000, 3});
  ASSERT_TRUE(tz.ok()) << tz.status().message();
  const auto* z = tz->ptr<uint16_t>();
  EXPECT_TRUE(std::all_of(z, z + 3000, [](uint16_t v) { return v == 0; }));
  auto te = store->get("empty", DType::I32, {0, 7});
  ASSERT_TRUE(te.ok()) << te.status().message();
  // The root folder is the file's stem, as torch.save names it.
  auto entries = zip_entries(path);
  ASSERT_FALSE(entries.empty());
  EXPECT_EQ(entries[0].first, "model/data.pkl");
  EXPECT_EQ(entries.back().first, "model/version");
  EXPECT_EQ(entries.back().second, "3\n");
}

TEST(PthWriter, ZeroTensorsCostNoDisk) {
  TempDir dir;
  const std::string path = dir.file("sparse.pth");
  ASSERT_TRUE(write_pth(path, {{"big", DType::F32, {16, 1 << 20}, {}}}).ok());
  struct stat st;
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_GT(st.st_size, 64 << 20);
  EXPECT_LT(st.st_blocks * 512, 1 << 20) << "allocated bytes of a 64 MiB zero tensor";
  auto store = WeightStore::open({path});
  ASSERT_TRUE(store.ok()) << store.status().message();
  EXPECT_EQ(store->info("big")->nbytes, uint64_t{64} << 20);
}

// Past 4 GiB: a 4.5 GB entry (zip64 sizes, a LONG1 element count in the
// pickle), an entry starting beyond 4 GiB (zip64 offset) and the zip64 end
// records. Sparse, so it costs neither time nor disk.
TEST(PthWriter, Zip64ArchivesPast4GiB) {
  TempDir dir;
  const std::string path = dir.file("huge.pth");
  const int64_t big = 4'500'000'000;
  std::vector<float> tail = {1.f, -2.f, 3.5f, 1e-20f};
  ASSERT_TRUE(write_pth(path, {{"huge", DType::U8, {big}, {}},
                               StreamedTensor::from_tensor(
                                   "tail", Tensor::view(tail.data(), DType::F32, {4}))})
                  .ok());
  auto store = WeightStore::open({path});
  ASSERT_TRUE(store.ok()) << store.status().message();
  const TensorInfo* info = store->info("huge");
  ASSERT_NE(info, nullptr);
  EXPECT_EQ(info->numel, static_cast<uint64_t>(big));
  auto t = store->get("tail", DType::F32, {4});
  ASSERT_TRUE(t.ok()) << t.status().message();
  EXPECT_EQ(std::memcmp(t->data, tail.data(), 16), 0);
}

TEST(PthWriter, ErrorsNameTheFileAndTensor) {
  TempDir dir;
  const std::string path = dir.file("bad.pth");
  Status s = write_pth(path, {{"a", DType::F32, {2}, {}}, {"a", DType::F32, {3}, {}}});
  EXPECT_EQ(s.code(), StatusCode::kInvalidInput);
  EXPECT_EQ(s.message(), path + ": tensor 'a' appears twice");
  s = write_pth(path, {{"neg", DType::F32, {2, -1}, {}}});
  EXPECT_EQ(s.message(), path + ": tensor 'neg': invalid shape [2, -1]");
  EXPECT_FALSE(std::filesystem::exists(path));
}

}  // namespace
}  // namespace flick
