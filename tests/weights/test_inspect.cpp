// `flick inspect` as a black box.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>

#include "runtime/weights/safetensors.h"
#include "tests/weights/weights_test_util.h"

namespace flick {
namespace {

struct CommandResult {
  int exit_code;
  std::string output;  // stdout and stderr
};

CommandResult run_flick(const std::string& args) {
  const std::string cmd = std::string(FLICK_BINARY) + " " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  EXPECT_NE(p, nullptr);
  CommandResult r{-1, ""};
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.output.append(buf, n);
  int status = pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

TEST(Inspect, ListsTensorsTotalsAndMetadataOfSafetensors) {
  const std::string path = testing::data_path("state_dict.safetensors");
  CommandResult r = run_flick("inspect " + path);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, path + ": safetensors, 1 file, 26 tensors")) << r.output;
  EXPECT_TRUE(contains(r.output, "  writer: gen_weight_fixtures.py\n")) << r.output;
  // name, dtype, shape, bytes
  EXPECT_TRUE(contains(r.output, "view.transposed    F32      [6, 4]                    96"))
      << r.output;
  EXPECT_TRUE(contains(r.output,
                       "misc.position_ids  I64      [5]                       40  "
                       "(dtype not loadable by flick)"))
      << r.output;
  EXPECT_TRUE(contains(r.output,
                       "  BF16               2 tensors             27 elements       "
                       "       54 bytes (54 B)"))
      << r.output;
  EXPECT_TRUE(contains(r.output, "  all               26 tensors"));
}

TEST(Inspect, ShowsPthScalarsAndStridedTensors) {
  CommandResult r = run_flick("inspect " + testing::data_path("nested_p4.pth"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, ": pytorch, 1 file, 6 tensors")) << r.output;
  EXPECT_TRUE(contains(r.output, "  epoch: 7\n")) << r.output;
  EXPECT_TRUE(contains(r.output, "state_dict.dec.weight  F32    [2, 3]     24  (stored strided)"))
      << r.output;
}

TEST(Inspect, ShowsTheShardOfEachTensorAndFilters) {
  testing::TempDir dir;
  float v[4] = {1, 2, 3, 4};
  const StoredType* f32 = stored_type_by_name("F32");
  ASSERT_TRUE(write_safetensors(dir.file("a.safetensors"), {{"enc.w", f32, {4}, v}}).ok());
  ASSERT_TRUE(write_safetensors(dir.file("b.safetensors"), {{"dec.w", f32, {2, 2}, v}}).ok());
  const std::string index = dir.file("m.safetensors.index.json");
  testing::write_text(index, R"({"metadata": {"total_size": 32},
      "weight_map": {"enc.w": "a.safetensors", "dec.w": "b.safetensors"}})");
  CommandResult r = run_flick("inspect " + index);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, index + ": sharded safetensors, 2 files, 2 tensors")) << r.output;
  EXPECT_TRUE(contains(r.output, "  total_size: 32\n")) << r.output;
  EXPECT_TRUE(contains(r.output, "dec.w  F32    [2, 2]     16  b.safetensors")) << r.output;
  EXPECT_TRUE(contains(r.output, "enc.w  F32    [4]        16  a.safetensors")) << r.output;
  CommandResult f = run_flick("inspect --prefix enc. " + index);
  ASSERT_EQ(f.exit_code, 0) << f.output;
  EXPECT_FALSE(contains(f.output, "dec.w")) << f.output;
  EXPECT_TRUE(contains(f.output, "enc.w")) << f.output;
}

TEST(Inspect, BadInputExitsWith65AndTheMessage) {
  const std::string evil = testing::data_path("evil_system.pth");
  CommandResult r = run_flick("inspect " + evil);
  EXPECT_EQ(r.exit_code, 65) << r.output;
  EXPECT_TRUE(contains(r.output, evil + ": evil_system/data.pkl: pickle byte ")) << r.output;
  EXPECT_TRUE(contains(r.output, "refusing global posix.system")) << r.output;
  CommandResult missing = run_flick("inspect /nonexistent.safetensors");
  EXPECT_EQ(missing.exit_code, 65) << missing.output;
  EXPECT_TRUE(contains(missing.output, "/nonexistent.safetensors")) << missing.output;
  CommandResult usage = run_flick("inspect");
  EXPECT_EQ(usage.exit_code, 64) << usage.output;
}

}  // namespace
}  // namespace flick
