// PyTorch .pth files written by real torch (tools/gen_weight_fixtures.py),
// checked against the values torch wrote to expected.json and against the same
// tensors written by the safetensors package.
#include <gtest/gtest.h>
#include <zip.h>

#include <algorithm>
#include <cstring>
#include <random>

#include "runtime/weights/pth.h"
#include "runtime/weights/safetensors.h"
#include "runtime/weights/weight_store.h"
#include "tests/weights/weights_test_util.h"

namespace flick {
namespace {

using testing::data_path;
using testing::TempDir;

// Every tensor of `expected` must be in the .pth with the same type, shape
// and bytes as in the oracle safetensors file, and (where flick can load it)
// the values torch computed.
void check_against_oracles(const std::string& pth, const std::string& oracle,
                           const nlohmann::json& expected) {
  auto file = PthFile::open(data_path(pth));
  ASSERT_TRUE(file.ok()) << file.status().message();
  auto ref = SafetensorsFile::open(data_path(oracle));
  ASSERT_TRUE(ref.ok()) << ref.status().message();
  ASSERT_EQ((*file)->tensors().size(), expected.size());
  ASSERT_EQ((*ref)->tensors().size(), expected.size());
  auto store = WeightStore::open({data_path(pth)});
  ASSERT_TRUE(store.ok()) << store.status().message();

  for (const auto& [name, e] : expected.items()) {
    SCOPED_TRACE(pth + ": " + name);
    const int64_t i = (*file)->find(name);
    const int64_t r = (*ref)->find(name);
    ASSERT_GE(i, 0);
    ASSERT_GE(r, 0);
    const TensorInfo& info = (*file)->tensors()[static_cast<size_t>(i)];
    EXPECT_EQ(info.type->name, e["dtype"].get<std::string>());
    EXPECT_EQ(info.shape, e["shape"].get<std::vector<int64_t>>());
    EXPECT_EQ(info.shape, (*ref)->tensors()[static_cast<size_t>(r)].shape);
    ASSERT_EQ(info.nbytes, (*ref)->tensors()[static_cast<size_t>(r)].nbytes);
    auto bytes = (*file)->data(static_cast<size_t>(i));
    auto ref_bytes = (*ref)->data(static_cast<size_t>(r));
    ASSERT_TRUE(bytes.ok()) << bytes.status().message();
    ASSERT_TRUE(ref_bytes.ok());
    if (info.nbytes) {
      EXPECT_EQ(std::memcmp(*bytes, *ref_bytes, info.nbytes), 0);
    }

    if (!info.type->dtype || info.shape.size() > kMaxDims) continue;
    auto t = store->get(name, *info.type->dtype, Shape::from_vector(info.shape));
    ASSERT_TRUE(t.ok()) << t.status().message();
    const auto& values = e["values"];
    ASSERT_EQ(static_cast<size_t>(t->numel()), values.size());
    for (size_t k = 0; k < values.size(); ++k)
      EXPECT_EQ(testing::element(*t, static_cast<int64_t>(k)), values[k].get<double>()) << k;
  }
}

TEST(Pth, StateDictMatchesTorchAndSafetensors) {
  check_against_oracles("state_dict.pth", "state_dict.safetensors",
                        testing::expected_json()["state_dict"]);
}

TEST(Pth, NestedContainersFlattenLikeTorchNames) {
  const auto expected = testing::expected_json();
  for (const char* f : {"nested_p4.pth", "nested_p5.pth"}) {
    check_against_oracles(f, "nested.safetensors", expected["nested"]);
    auto file = PthFile::open(data_path(f));
    ASSERT_TRUE(file.ok());
    std::map<std::string, std::string> scalars = expected["nested_scalars"];
    EXPECT_EQ((*file)->metadata(), scalars) << f;
  }
}

TEST(Pth, ReportsHowTensorsAreStored) {
  auto file = PthFile::open(data_path("state_dict.pth"));
  ASSERT_TRUE(file.ok());
  auto strided = [&](const std::string& n) {
    return (*file)->tensors()[static_cast<size_t>((*file)->find(n))].strided;
  };
  EXPECT_TRUE(strided("view.transposed"));
  EXPECT_TRUE(strided("view.sliced"));
  EXPECT_TRUE(strided("view.expanded"));  // stride 0
  EXPECT_TRUE(strided("view.bf16_t"));
  EXPECT_FALSE(strided("view.row"));  // contiguous at an offset: zero copy
  EXPECT_FALSE(strided("tied.a"));
  // Tied tensors share one storage and so one buffer.
  auto a = (*file)->data(static_cast<size_t>((*file)->find("tied.a")));
  auto b = (*file)->data(static_cast<size_t>((*file)->find("tied.b")));
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(*a, *b);
  // A view at an offset points into its base's storage.
  auto base = (*file)->data(static_cast<size_t>((*file)->find("view.base")));
  auto row = (*file)->data(static_cast<size_t>((*file)->find("view.row")));
  ASSERT_TRUE(base.ok() && row.ok());
  EXPECT_EQ(*row, *base + 12 * sizeof(float));
}

TEST(Pth, TypesAndRanksFlickCannotLoadAreRefusedByName) {
  const std::string path = data_path("state_dict.pth");
  auto store = WeightStore::open({path});
  ASSERT_TRUE(store.ok());
  auto ids = store->get("misc.position_ids");
  ASSERT_FALSE(ids.ok());
  EXPECT_EQ(ids.status().message(),
            "misc.position_ids: dtype I64 is not one flick computes in (" + path + ")");
  auto seven = store->get("misc.seven_d", DType::F32);
  ASSERT_FALSE(seven.ok());
  EXPECT_EQ(seven.status().message(),
            "misc.seven_d: 7 dimensions, flick tensors have at most 6 (" + path + ")");
}

TEST(Pth, RefusesPicklesThatRunCode) {
  struct Case {
    const char* file;
    const char* global;
  };
  for (const Case& c :
       {Case{"evil_system.pth", "refusing global posix.system"},
        Case{"evil_eval.pth", "refusing global __builtin__.eval"},
        Case{"evil_module.pth", "refusing global torch.nn.modules.linear.Linear"}}) {
    const std::string path = data_path(c.file);
    auto store = WeightStore::open({path});
    ASSERT_FALSE(store.ok()) << c.file;
    EXPECT_EQ(store.status().code(), StatusCode::kInvalidInput);
    EXPECT_EQ(store.status().message().rfind(path + ": ", 0), 0u) << store.status().message();
    EXPECT_NE(store.status().message().find(c.global), std::string::npos)
        << store.status().message();
  }
}

TEST(Pth, RefusesLegacyAndTruncatedFiles) {
  auto legacy = WeightStore::open({data_path("legacy.pth")});
  ASSERT_FALSE(legacy.ok());
  EXPECT_NE(legacy.status().message().find("legacy format of torch < 1.6"), std::string::npos)
      << legacy.status().message();
  for (const char* f : {"truncated_tail.pth", "truncated_half.pth"}) {
    auto t = WeightStore::open({data_path(f)});
    ASSERT_FALSE(t.ok()) << f;
    EXPECT_NE(t.status().message().find(data_path(f) + ": "), std::string::npos);
    EXPECT_NE(t.status().message().find("truncated"), std::string::npos) << t.status().message();
  }
}

TEST(Pth, EveryTruncationIsAnError) {
  const std::vector<uint8_t> full = testing::read_bytes(data_path("state_dict.pth"));
  for (size_t len = 0; len < full.size(); ++len) {
    std::vector<uint8_t> cut(full.begin(), full.begin() + static_cast<ptrdiff_t>(len));
    auto f = PthFile::open_memory(std::move(cut), "cut.pth");
    EXPECT_FALSE(f.ok()) << "truncated to " << len;
  }
}

// A damaged storage is caught by the zip CRC when it is first read.
TEST(Pth, DetectsCorruptStorageBytes) {
  std::vector<uint8_t> bytes = testing::read_bytes(data_path("state_dict.pth"));
  auto ref = SafetensorsFile::open(data_path("state_dict.safetensors"));
  ASSERT_TRUE(ref.ok());
  const size_t r = static_cast<size_t>((*ref)->find("view.base"));
  auto ref_bytes = (*ref)->data(r);
  ASSERT_TRUE(ref_bytes.ok());
  auto at =
      std::search(bytes.begin(), bytes.end(), *ref_bytes, *ref_bytes + (*ref)->tensors()[r].nbytes);
  ASSERT_NE(at, bytes.end());
  at[17] ^= 0x40;
  auto f = PthFile::open_memory(std::move(bytes), "crc.pth");
  ASSERT_TRUE(f.ok()) << f.status().message();
  auto d = (*f)->data(static_cast<size_t>((*f)->find("view.base")));
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("CRC"), std::string::npos) << d.status().message();
}

// ---- archives rebuilt with changed entries ----

std::vector<std::pair<std::string, std::string>> read_archive(const std::string& path) {
  std::vector<std::pair<std::string, std::string>> entries;
  int err = 0;
  zip_t* z = zip_open(path.c_str(), ZIP_RDONLY, &err);
  EXPECT_NE(z, nullptr);
  if (!z) return entries;
  for (zip_int64_t i = 0; i < zip_get_num_entries(z, 0); ++i) {
    zip_stat_t st;
    zip_stat_index(z, static_cast<zip_uint64_t>(i), 0, &st);
    std::string data(st.size, '\0');
    zip_file_t* f = zip_fopen_index(z, static_cast<zip_uint64_t>(i), 0);
    EXPECT_EQ(zip_fread(f, data.data(), st.size), static_cast<zip_int64_t>(st.size));
    zip_fclose(f);
    entries.emplace_back(st.name, std::move(data));
  }
  zip_discard(z);
  return entries;
}

void write_archive(const std::string& path,
                   const std::vector<std::pair<std::string, std::string>>& entries) {
  int err = 0;
  zip_t* z = zip_open(path.c_str(), ZIP_CREATE | ZIP_TRUNCATE, &err);
  ASSERT_NE(z, nullptr);
  for (const auto& [name, data] : entries) {
    zip_source_t* s = zip_source_buffer(z, data.data(), data.size(), 0);
    zip_int64_t i = zip_file_add(z, name.c_str(), s, ZIP_FL_OVERWRITE);
    ASSERT_GE(i, 0);
    zip_set_file_compression(z, static_cast<zip_uint64_t>(i), ZIP_CM_STORE, 0);
  }
  ASSERT_EQ(zip_close(z), 0);
}

std::string& entry(std::vector<std::pair<std::string, std::string>>& entries,
                   const std::string& name) {
  for (auto& e : entries)
    if (e.first == name) return e.second;
  ADD_FAILURE() << "no entry " << name;
  static std::string none;
  return none;
}

TEST(Pth, ChecksStoragesAndByteOrderAgainstThePickle) {
  TempDir dir;
  const auto original = read_archive(data_path("nested_p4.pth"));
  const std::string path = dir.file("x.pth");
  auto open_error = [&](std::vector<std::pair<std::string, std::string>> entries) {
    write_archive(path, entries);
    auto s = WeightStore::open({path});
    return s.ok() ? std::string("opened") : s.status().message();
  };

  auto missing = original;
  missing.erase(std::remove_if(missing.begin(), missing.end(),
                               [](const auto& e) { return e.first == "nested_p4/data/0"; }),
                missing.end());
  EXPECT_NE(open_error(missing).find("storage nested_p4/data/0 is missing from the archive"),
            std::string::npos)
      << open_error(missing);

  auto short_storage = original;
  entry(short_storage, "nested_p4/data/0").resize(4);
  EXPECT_NE(open_error(short_storage).find("nested_p4/data/0 is 4 bytes but the pickle declares"),
            std::string::npos)
      << open_error(short_storage);

  auto big_endian = original;
  entry(big_endian, "nested_p4/byteorder") = "big";
  EXPECT_NE(open_error(big_endian).find("byte order 'big' is not supported"), std::string::npos);

  auto no_pickle = original;
  no_pickle.erase(std::remove_if(no_pickle.begin(), no_pickle.end(),
                                 [](const auto& e) { return e.first == "nested_p4/data.pkl"; }),
                  no_pickle.end());
  EXPECT_NE(open_error(no_pickle).find("no nested_p4/data.pkl, not a PyTorch checkpoint"),
            std::string::npos);

  // Without byteorder (torch before 1.10 did not write it) the file is read.
  auto no_order = original;
  no_order.erase(std::remove_if(no_order.begin(), no_order.end(),
                                [](const auto& e) { return e.first == "nested_p4/byteorder"; }),
                 no_order.end());
  EXPECT_EQ(open_error(no_order), "opened");
}

// Mutations of a real torch pickle, repacked into a valid archive, reach the
// storage checks and the loader: each is an error or a successful load.
TEST(Pth, MutatedPicklesNeverCrash) {
  TempDir dir;
  auto entries = read_archive(data_path("state_dict.pth"));
  const std::string pkl = entry(entries, "state_dict/data.pkl");
  const std::string path = dir.file("m.pth");
  std::mt19937 rng(99);
  int opened = 0;
  for (int iter = 0; iter < 300; ++iter) {
    std::string m = pkl;
    for (int e = 0, n = 1 + static_cast<int>(rng() % 3); e < n; ++e)
      m[rng() % m.size()] = static_cast<char>(rng());
    entry(entries, "state_dict/data.pkl") = m;
    write_archive(path, entries);
    auto f = PthFile::open(path);
    if (!f.ok()) continue;
    ++opened;
    for (size_t i = 0; i < (*f)->tensors().size(); ++i) {
      auto d = (*f)->data(i);
      ASSERT_TRUE(d.ok()) << d.status().message();  // the storages themselves are intact
    }
  }
  EXPECT_GT(opened, 0);
}

// Byte changes anywhere in the file: the zip layer, CRCs, the pickle.
TEST(Pth, RandomFileMutationsNeverCrash) {
  const std::vector<uint8_t> full = testing::read_bytes(data_path("nested_p4.pth"));
  std::mt19937 rng(1234);
  for (int iter = 0; iter < 3000; ++iter) {
    std::vector<uint8_t> m = full;
    for (int e = 0, n = 1 + static_cast<int>(rng() % 4); e < n; ++e)
      m[rng() % m.size()] = static_cast<uint8_t>(rng());
    auto f = PthFile::open_memory(std::move(m), "mut.pth");
    if (!f.ok()) continue;
    for (size_t i = 0; i < (*f)->tensors().size(); ++i) {
      auto d = (*f)->data(i);
      if (!d.ok()) {
        EXPECT_FALSE(d.status().message().empty());
      }
    }
  }
}

}  // namespace
}  // namespace flick
