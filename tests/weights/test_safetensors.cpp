#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <random>

#include "runtime/weights/safetensors.h"
#include "runtime/weights/weight_store.h"
#include "tests/weights/weights_test_util.h"

namespace flick {
namespace {

using testing::safetensors_bytes;
using testing::TempDir;

// Fills a buffer with a pattern that differs per tensor and per byte.
void fill_pattern(void* p, size_t n, uint8_t seed) {
  auto* b = static_cast<uint8_t*>(p);
  for (size_t i = 0; i < n; ++i) b[i] = static_cast<uint8_t>(seed * 31 + i * 7 + 1);
}

TEST(SafetensorsWriter, RoundTripsEveryDTypeWithMetadata) {
  TempDir dir;
  std::vector<OwnedTensor> owned;
  std::vector<SafetensorsTensor> tensors;
  uint8_t seed = 0;
  for (DType t : kAllDTypes) {
    owned.emplace_back(t, Shape{3, 5});
    fill_pattern(owned.back().t.data, owned.back().t.nbytes(), ++seed);
  }
  for (size_t i = 0; i < owned.size(); ++i)
    tensors.push_back(
        SafetensorsTensor::from_tensor("t." + std::string(dtype_name(kAllDTypes[i])), owned[i].t));
  // Types flick does not compute in are written from raw bytes.
  std::vector<uint8_t> i64(4 * 8), boolean(3);
  fill_pattern(i64.data(), i64.size(), 99);
  boolean = {1, 0, 1};
  tensors.push_back({"raw.i64", stored_type_by_name("I64"), {2, 2}, i64.data()});
  tensors.push_back({"raw.bool", stored_type_by_name("BOOL"), {3}, boolean.data()});
  tensors.push_back({"raw.empty", stored_type_by_name("F32"), {0, 4}, nullptr});
  tensors.push_back({"raw.scalar", stored_type_by_name("F32"), {}, owned[0].t.data});

  const std::string path = dir.file("rt.safetensors");
  const std::map<std::string, std::string> meta = {{"format", "pt"}, {"note", "ünïcode"}};
  ASSERT_TRUE(write_safetensors(path, tensors, meta).ok());

  // Nothing but the file is left in the directory (the temp file was renamed).
  size_t entries = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir.path())) {
    (void)e;
    ++entries;
  }
  EXPECT_EQ(entries, 1u);

  auto f = SafetensorsFile::open(path);
  ASSERT_TRUE(f.ok()) << f.status().message();
  EXPECT_EQ((*f)->metadata(), meta);
  ASSERT_EQ((*f)->tensors().size(), tensors.size());
  for (const SafetensorsTensor& w : tensors) {
    int64_t i = (*f)->find(w.name);
    ASSERT_GE(i, 0) << w.name;
    const TensorInfo& info = (*f)->tensors()[static_cast<size_t>(i)];
    EXPECT_EQ(info.type, w.type) << w.name;
    EXPECT_EQ(info.shape, w.shape) << w.name;
    auto data = (*f)->data(static_cast<size_t>(i));
    ASSERT_TRUE(data.ok());
    if (info.nbytes) {
      EXPECT_EQ(std::memcmp(*data, w.data, info.nbytes), 0) << w.name;
    }
    // Every tensor is aligned to its element size inside the mapping.
    EXPECT_EQ(reinterpret_cast<uintptr_t>(*data) % static_cast<uintptr_t>(w.type->bits / 8), 0u);
  }

  // The header is padded to a multiple of 8, and the data start as the reference
  // writer lays them out: larger elements first.
  auto bytes = testing::read_bytes(path);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | bytes[static_cast<size_t>(i)];
  EXPECT_EQ((8 + n) % 8, 0u);
  auto header = parse_safetensors(bytes.data(), bytes.size(), path);
  ASSERT_TRUE(header.ok());
  std::vector<SafetensorsHeader::Entry> by_offset = header->entries;
  std::sort(by_offset.begin(), by_offset.end(),
            [](const auto& a, const auto& b) { return a.begin < b.begin; });
  for (size_t i = 1; i < by_offset.size(); ++i)
    EXPECT_GE(by_offset[i - 1].info.type->bits, by_offset[i].info.type->bits);
}

TEST(SafetensorsWriter, ReplacesAnExistingFileAtomically) {
  TempDir dir;
  const std::string path = dir.file("w.safetensors");
  float a[2] = {1, 2}, b[3] = {3, 4, 5};
  ASSERT_TRUE(write_safetensors(path, {{"a", stored_type_by_name("F32"), {2}, a}}).ok());
  // A reader holding the old mapping keeps seeing the old file (new inode).
  auto old_file = SafetensorsFile::open(path);
  ASSERT_TRUE(old_file.ok());
  ASSERT_TRUE(write_safetensors(path, {{"b", stored_type_by_name("F32"), {3}, b}}).ok());
  auto new_file = SafetensorsFile::open(path);
  ASSERT_TRUE(new_file.ok());
  EXPECT_EQ((*new_file)->find("a"), -1);
  EXPECT_EQ((*new_file)->find("b"), 0);
  auto old_data = (*old_file)->data(0);
  ASSERT_TRUE(old_data.ok());
  EXPECT_EQ(reinterpret_cast<const float*>(*old_data)[1], 2.0f);
}

TEST(SafetensorsWriter, RefusesBadTensors) {
  TempDir dir;
  float a[2] = {1, 2};
  const StoredType* f32 = stored_type_by_name("F32");
  Status dup = write_safetensors(dir.file("x"), {{"a", f32, {2}, a}, {"a", f32, {2}, a}});
  EXPECT_NE(dup.message().find("'a' appears twice"), std::string::npos) << dup.message();
  Status reserved = write_safetensors(dir.file("x"), {{"__metadata__", f32, {2}, a}});
  EXPECT_NE(reserved.message().find("reserved"), std::string::npos);
  Status neg = write_safetensors(dir.file("x"), {{"a", f32, {-2}, a}});
  EXPECT_NE(neg.message().find("invalid shape [-2]"), std::string::npos) << neg.message();
  Status half = write_safetensors(dir.file("x"), {{"a", stored_type_by_name("F4"), {3}, a}});
  EXPECT_NE(half.message().find("do not fill whole bytes"), std::string::npos);
  Status missing_dir = write_safetensors(dir.file("no/such/dir/x"), {{"a", f32, {2}, a}});
  EXPECT_EQ(missing_dir.code(), StatusCode::kNotFound) << missing_dir.message();
  EXPECT_FALSE(std::filesystem::exists(dir.file("x")));
}

// The python safetensors package wrote this file; torch computed the values.
TEST(SafetensorsReader, ReadsFilesOfTheReferenceWriter) {
  auto expected = testing::expected_json()["all_dtypes"];
  auto store = WeightStore::open({testing::data_path("all_dtypes.safetensors")});
  ASSERT_TRUE(store.ok()) << store.status().message();
  EXPECT_EQ(store->size(), expected.size());
  EXPECT_EQ(store->sources()[0].metadata.at("format"), "pt");
  for (const auto& [name, e] : expected.items()) {
    DType dtype = *dtype_from_name(e["dtype"].get<std::string>());
    auto t = store->get(name, dtype, Shape::from_vector(e["shape"].get<std::vector<int64_t>>()));
    ASSERT_TRUE(t.ok()) << t.status().message();
    const auto& values = e["values"];
    ASSERT_EQ(static_cast<size_t>(t->numel()), values.size());
    for (size_t i = 0; i < values.size(); ++i)
      EXPECT_EQ(testing::element(*t, static_cast<int64_t>(i)), values[i].get<double>())
          << name << "[" << i << "]";
  }
  EXPECT_TRUE(store->check_all_used().ok());
}

// Old or third-party writers may leave tensors misaligned for their type.
TEST(SafetensorsReader, CopiesMisalignedTensorsToAlignedMemory) {
  TempDir dir;
  const float values[3] = {1.5f, -2.25f, 1e-3f};
  // Header of odd length: the data buffer starts at an odd file offset.
  std::string header = R"({"x":{"dtype":"F32","shape":[3],"data_offsets":[0,12]}})";
  if ((8 + header.size()) % 2 == 0) header += " ";
  std::vector<uint8_t> data(12);
  std::memcpy(data.data(), values, 12);
  const std::string path = dir.file("odd.safetensors");
  testing::write_bytes(path, safetensors_bytes(header, data));
  auto store = WeightStore::open({path});
  ASSERT_TRUE(store.ok()) << store.status().message();
  auto t = store->get("x", DType::F32, {3});
  ASSERT_TRUE(t.ok()) << t.status().message();
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t->data) % 4, 0u);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(t->ptr<float>()[i], values[i]);
}

struct Corruption {
  const char* what;
  std::vector<uint8_t> bytes;
  const char* message;  // a fragment the error must contain
};

std::vector<uint8_t> le_u64(uint64_t v) {
  std::vector<uint8_t> b(8);
  for (int i = 0; i < 8; ++i) b[static_cast<size_t>(i)] = static_cast<uint8_t>(v >> (8 * i));
  return b;
}

std::vector<uint8_t> zeros(size_t n) { return std::vector<uint8_t>(n, 0); }

std::vector<Corruption> corruptions() {
  auto st = [](const std::string& h, size_t data_bytes) {
    return safetensors_bytes(h, zeros(data_bytes));
  };
  const std::string ok_entry = R"("a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})";
  return {
      {"empty file", {}, "0 bytes, too short"},
      {"7 bytes", {1, 0, 0, 0, 0, 0, 0}, "7 bytes, too short"},
      {"header over 100 MB", le_u64(100'000'001), "exceeds the limit of 100000000"},
      {"header past end", safetensors_bytes("{}", {}, 50), "runs past the end of the file"},
      {"empty header", safetensors_bytes("", {}), "does not start with '{'"},
      {"array header", st("[1, 2]", 0), "does not start with '{'"},
      {"not JSON", st("{\"a\": ", 0), "not valid JSON"},
      {"garbage after JSON", st("{} xx", 0), "not valid JSON"},
      {"NUL padding", st(std::string("{}\0\0", 4), 0), "header has a NUL byte at offset 10"},
      {"NUL then garbage", st(std::string("{}\0{\"x", 5), 0), "header has a NUL byte"},
      {"invalid UTF-8", st("{\"\xff\": 1}", 0), "not valid JSON"},
      {"duplicate tensor", st("{" + ok_entry + "," + ok_entry + "}", 8), "key 'a' appears twice"},
      {"duplicate field", st(R"({"a":{"dtype":"F32","dtype":"F32"}})", 0), "'dtype' appears twice"},
      {"too deep", st(R"({"a":{"x":[[[[[[[[[1]]]]]]]]]}})", 0), "nested more than 8"},
      {"entry not object", st(R"({"a":[1]})", 0), "tensor 'a': entry must be an object"},
      {"missing dtype", st(R"({"a":{"shape":[2],"data_offsets":[0,8]}})", 8),
       "tensor 'a': missing 'dtype'"},
      {"missing shape", st(R"({"a":{"dtype":"F32","data_offsets":[0,8]}})", 8),
       "tensor 'a': missing 'shape'"},
      {"missing offsets", st(R"({"a":{"dtype":"F32","shape":[2]}})", 8),
       "tensor 'a': missing 'data_offsets'"},
      {"dtype not string", st(R"({"a":{"dtype":5,"shape":[2],"data_offsets":[0,8]}})", 8),
       "'dtype' must be a string, not an integer"},
      {"unknown dtype", st(R"({"a":{"dtype":"F17","shape":[2],"data_offsets":[0,8]}})", 8),
       "tensor 'a': unknown dtype 'F17'"},
      {"shape not array", st(R"({"a":{"dtype":"F32","shape":"2","data_offsets":[0,8]}})", 8),
       "'shape' must be an array, not a string"},
      {"fractional dim", st(R"({"a":{"dtype":"F32","shape":[1.5],"data_offsets":[0,8]}})", 8),
       "shape entries must be integers"},
      {"negative dim", st(R"({"a":{"dtype":"F32","shape":[-1,2],"data_offsets":[0,8]}})", 8),
       "tensor 'a': negative dimension -1"},
      {"huge dim",
       st(R"({"a":{"dtype":"F32","shape":[9223372036854775808],"data_offsets":[0,8]}})", 8),
       "dimension 9223372036854775808 is too large"},
      {"numel overflow",
       st(R"({"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,8]}})", 8),
       "has too many elements"},
      {"bytes overflow",
       st(R"({"a":{"dtype":"F32","shape":[4611686018427387904],"data_offsets":[0,8]}})", 8),
       "byte size of [4611686018427387904] overflows"},
      {"partial byte", st(R"({"a":{"dtype":"F4","shape":[3],"data_offsets":[0,2]}})", 2),
       "3 elements of F4 do not fill whole bytes"},
      {"offsets one value", st(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[8]}})", 8),
       "'data_offsets' must be [begin, end]"},
      {"offsets negative", st(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[-8,0]}})", 8),
       "'data_offsets' must be [begin, end]"},
      {"offsets strings", st(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":["0","8"]}})", 8),
       "'data_offsets' must be [begin, end]"},
      {"offsets reversed", st(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", 8),
       "end before they begin"},
      {"size mismatch", st(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})", 4),
       "hold 4 bytes but F32 [2] needs 8"},
      {"gap at start", st(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})", 12),
       "tensor 'a' starts at data offset 4, leaving a gap of 4 bytes after the header"},
      {"gap between",
       st(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
          R"("b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})",
          12),
       "tensor 'b' starts at data offset 8, leaving a gap of 4 bytes after tensor 'a'"},
      {"overlap",
       st(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
          R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
          12),
       "tensor 'b' at data offsets [4, 12) overlaps tensor 'a' ending at 8"},
      {"trailing bytes", st("{" + ok_entry + "}", 12), "trailing bytes"},
      {"truncated data", st("{" + ok_entry + "}", 5), "file is truncated"},
      {"no tensors but data", st("{}", 3), "trailing bytes"},
      {"metadata not object", st(R"({"__metadata__":[1]})", 0), "__metadata__ must be an object"},
      {"metadata value not string", st(R"({"__metadata__":{"k":1}})", 0),
       "__metadata__ value 'k' must be a string, not an integer"},
  };
}

TEST(SafetensorsReader, EveryCorruptionGivesAnErrorNamingFileAndTensor) {
  TempDir dir;
  for (const Corruption& c : corruptions()) {
    const std::string path = dir.file("bad.safetensors");
    testing::write_bytes(path, c.bytes);
    auto f = SafetensorsFile::open(path);
    ASSERT_FALSE(f.ok()) << c.what;
    EXPECT_EQ(f.status().code(), StatusCode::kInvalidInput) << c.what;
    const std::string& m = f.status().message();
    EXPECT_EQ(m.rfind(path + ": ", 0), 0u) << c.what << ": " << m;
    EXPECT_NE(m.find(c.message), std::string::npos) << c.what << ": " << m;
  }
}

TEST(SafetensorsReader, AcceptsTheCornerCasesTheFormatAllows) {
  // No tensors at all; zero-size tensors sharing an offset; 0-d tensors;
  // unknown entry fields (ignored, as the reference reader does).
  auto empty = safetensors_bytes("{}", {});
  EXPECT_TRUE(parse_safetensors(empty.data(), empty.size(), "e").ok());
  auto corner =
      safetensors_bytes(R"({"z1":{"dtype":"F32","shape":[0],"data_offsets":[0,0]},)"
                        R"("s":{"dtype":"I32","shape":[],"data_offsets":[0,4],"extra":{"k":[1]}},)"
                        R"("z2":{"dtype":"BF16","shape":[3,0],"data_offsets":[4,4]}})",
                        zeros(4));
  auto h = parse_safetensors(corner.data(), corner.size(), "c");
  ASSERT_TRUE(h.ok()) << h.status().message();
  ASSERT_EQ(h->entries.size(), 3u);
  EXPECT_EQ(h->entries[0].info.name, "s");
  EXPECT_EQ(h->entries[0].info.numel, 1u);
}

std::vector<uint8_t> valid_file() {
  return safetensors_bytes(
      R"({"__metadata__":{"format":"pt"},"a":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]},)"
      R"("b":{"dtype":"BF16","shape":[3],"data_offsets":[16,22]},)"
      R"("c":{"dtype":"U8","shape":[2],"data_offsets":[22,24]}})",
      zeros(24));
}

TEST(SafetensorsReader, EveryTruncationIsAnError) {
  const std::vector<uint8_t> full = valid_file();
  ASSERT_TRUE(parse_safetensors(full.data(), full.size(), "f").ok());
  for (size_t len = 0; len < full.size(); ++len) {
    // A copy of exactly len bytes, so reading past it is caught by ASan.
    std::vector<uint8_t> cut(full.begin(), full.begin() + static_cast<ptrdiff_t>(len));
    auto h = parse_safetensors(cut.data(), cut.size(), "f");
    EXPECT_FALSE(h.ok()) << "truncated to " << len << " bytes";
  }
}

// Mini fuzz loop: random byte changes in the length and header never crash;
// whatever still parses must describe tensors inside the file.
TEST(SafetensorsReader, RandomHeaderMutationsNeverCrash) {
  const std::vector<uint8_t> full = valid_file();
  uint64_t header_end = 8;
  for (int i = 7; i >= 0; --i)
    header_end += static_cast<uint64_t>(full[static_cast<size_t>(i)]) << (8 * i);
  std::mt19937 rng(20240607);
  int accepted = 0;
  const char interesting[] = "{}[]\",:0123456789-. eE\\u";
  for (int iter = 0; iter < 20000; ++iter) {
    std::vector<uint8_t> m = full;
    const int flips = 1 + static_cast<int>(rng() % 3);
    for (int k = 0; k < flips; ++k) {
      size_t pos = rng() % header_end;
      m[pos] = (rng() & 1) ? static_cast<uint8_t>(rng())
                           : static_cast<uint8_t>(interesting[rng() % (sizeof interesting - 1)]);
    }
    auto h = parse_safetensors(m.data(), m.size(), "fuzz");
    if (!h.ok()) {
      EXPECT_FALSE(h.status().message().empty());
      continue;
    }
    ++accepted;
    for (const auto& e : h->entries) {
      EXPECT_LE(e.begin, e.end);
      EXPECT_LE(h->data_start + e.end, m.size());
      EXPECT_EQ(e.end - e.begin, e.info.nbytes);
    }
  }
  // Changes inside the metadata string or the padding keep the file valid.
  EXPECT_GT(accepted, 0);
}

}  // namespace
}  // namespace flick
