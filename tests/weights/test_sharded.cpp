#include <gtest/gtest.h>

#include <filesystem>

#include "runtime/weights/sharded.h"
#include "runtime/weights/weight_store.h"
#include "tests/weights/weights_test_util.h"

namespace flick {
namespace {

using testing::TempDir;

const float kA[4] = {1, 2, 3, 4};
const float kB[2] = {5, 6};
const float kC[3] = {7, 8, 9};

// Two shards: a, b in shard 1; c in shard 2.
void write_shards(const TempDir& dir) {
  const StoredType* f32 = stored_type_by_name("F32");
  ASSERT_TRUE(write_safetensors(dir.file("model-00001-of-00002.safetensors"),
                                {{"a", f32, {2, 2}, kA}, {"b", f32, {2}, kB}})
                  .ok());
  ASSERT_TRUE(
      write_safetensors(dir.file("model-00002-of-00002.safetensors"), {{"c", f32, {3}, kC}}).ok());
}

std::string index_json(const std::string& weight_map) {
  return R"({"metadata": {"total_size": 36, "format": "pt"}, "weight_map": {)" + weight_map + "}}";
}

const char* kGoodMap =
    R"("a": "model-00001-of-00002.safetensors", "b": "model-00001-of-00002.safetensors",)"
    R"( "c": "model-00002-of-00002.safetensors")";

TEST(Sharded, OpensAndCrossChecksAGoodIndex) {
  TempDir dir;
  write_shards(dir);
  const std::string index = dir.file("model.safetensors.index.json");
  testing::write_text(index, index_json(kGoodMap));
  auto store = WeightStore::open({index});
  ASSERT_TRUE(store.ok()) << store.status().message();
  EXPECT_EQ(store->names(), (std::vector<std::string>{"a", "b", "c"}));
  ASSERT_EQ(store->sources().size(), 1u);
  EXPECT_EQ(store->sources()[0].format, "sharded safetensors");
  EXPECT_EQ(store->sources()[0].files.size(), 2u);
  EXPECT_EQ(store->sources()[0].metadata.at("total_size"), "36");
  EXPECT_EQ(store->sources()[0].metadata.at("format"), "pt");
  auto c = store->get("c", DType::F32, {3});
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->ptr<float>()[2], 9.0f);
}

struct BadIndex {
  const char* what;
  std::string weight_map;
  const char* message;
};

TEST(Sharded, RefusesIndexesThatDisagreeWithTheirShards) {
  const std::string s1 = "model-00001-of-00002.safetensors";
  const std::string s2 = "model-00002-of-00002.safetensors";
  const std::vector<BadIndex> cases = {
      {"missing tensor",
       R"("a": ")" + s1 + R"(", "b": ")" + s1 + R"(", "c": ")" + s2 + R"(", "d": ")" + s2 + "\"",
       "tensor 'd' is mapped to model-00002-of-00002.safetensors, which does not contain it"},
      {"extra tensor", R"("a": ")" + s1 + R"(", "c": ")" + s2 + "\"",
       "tensor 'b' of model-00001-of-00002.safetensors is not in the weight_map"},
      {"wrong shard", R"("a": ")" + s1 + R"(", "b": ")" + s2 + R"(", "c": ")" + s2 + "\"",
       "tensor 'b' is in model-00001-of-00002.safetensors but the weight_map puts it in "
       "model-00002-of-00002.safetensors"},
      {"parent escape", R"("a": "../model-00001-of-00002.safetensors")",
       "tensor 'a': shard path '../model-00001-of-00002.safetensors' leaves the index's directory"},
      {"inner escape", R"("a": "sub/../../x.safetensors")", "leaves the index's directory"},
      {"absolute", R"("a": "/etc/passwd")", "shard path '/etc/passwd' leaves"},
      {"dot", R"("a": "./model-00001-of-00002.safetensors")", "leaves the index's directory"},
      {"empty", R"("a": "")", "leaves the index's directory"},
      {"not a string", R"("a": 1)", "tensor 'a': shard must be a file name"},
      {"missing shard", R"("a": "model-00003-of-00003.safetensors")", "No such file or directory"},
  };
  TempDir dir;
  write_shards(dir);
  const std::string index = dir.file("model.safetensors.index.json");
  for (const BadIndex& c : cases) {
    testing::write_text(index, index_json(c.weight_map));
    auto ck = open_sharded(index);
    ASSERT_FALSE(ck.ok()) << c.what;
    const std::string& m = ck.status().message();
    EXPECT_NE(m.find(index), std::string::npos) << c.what << ": " << m;
    EXPECT_NE(m.find(c.message), std::string::npos) << c.what << ": " << m;
  }
}

TEST(Sharded, RefusesATensorInTwoShards) {
  TempDir dir;
  write_shards(dir);
  const StoredType* f32 = stored_type_by_name("F32");
  ASSERT_TRUE(write_safetensors(dir.file("model-00002-of-00002.safetensors"),
                                {{"c", f32, {3}, kC}, {"b", f32, {2}, kB}})
                  .ok());
  const std::string index = dir.file("model.safetensors.index.json");
  testing::write_text(index, index_json(kGoodMap));
  auto ck = open_sharded(index);
  ASSERT_FALSE(ck.ok());
  EXPECT_NE(ck.status().message().find("tensor 'b' is in model-00002-of-00002.safetensors but the "
                                       "weight_map puts it in model-00001-of-00002.safetensors"),
            std::string::npos)
      << ck.status().message();
}

TEST(Sharded, RefusesMalformedIndexFiles) {
  TempDir dir;
  write_shards(dir);
  const std::string index = dir.file("m.safetensors.index.json");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"{", "not valid JSON"},
      {"[]", "not a JSON object"},
      {R"({"metadata": {}})", "missing the 'weight_map' object"},
      {R"({"weight_map": []})", "missing the 'weight_map' object"},
      {R"({"metadata": 3, "weight_map": {}})", "'metadata' must be an object"},
  };
  for (const auto& [text, message] : cases) {
    testing::write_text(index, text);
    auto ck = open_sharded(index);
    ASSERT_FALSE(ck.ok()) << text;
    EXPECT_NE(ck.status().message().find(message), std::string::npos) << ck.status().message();
  }
  // A corrupt shard is reported with the index and the shard.
  testing::write_text(dir.file("model-00002-of-00002.safetensors"), "garbage");
  testing::write_text(index, index_json(kGoodMap));
  auto ck = open_sharded(index);
  ASSERT_FALSE(ck.ok());
  EXPECT_NE(ck.status().message().find(index + ": " + dir.file("model-00002-of-00002.safetensors") +
                                       ": file is 7 bytes"),
            std::string::npos)
      << ck.status().message();
}

TEST(Sharded, ShardsMayLiveInASubdirectory) {
  TempDir dir;
  std::filesystem::create_directory(dir.file("shards"));
  ASSERT_TRUE(write_safetensors(dir.file("shards/s.safetensors"),
                                {{"a", stored_type_by_name("F32"), {2, 2}, kA}})
                  .ok());
  const std::string index = dir.file("x.safetensors.index.json");
  testing::write_text(index, R"({"weight_map": {"a": "shards/s.safetensors"}})");
  auto ck = open_sharded(index);
  ASSERT_TRUE(ck.ok()) << ck.status().message();
  EXPECT_EQ(ck->shards.size(), 1u);
}

}  // namespace
}  // namespace flick
