// `flick convert` end to end: the test writes a small synthetic checkpoint in
// Wan's key layout with the safetensors writer, runs the flick binary on it,
// reads the output back and checks it against the originals: dtypes, shapes,
// scales recomputed here in double, dequantized values within the
// quantizer's bound, kept tensors byte for byte, exit codes of bad runs.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/wait.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "runtime/weights/safetensors.h"

extern char** environ;

namespace flick {
namespace {

namespace fs = std::filesystem;

struct RunResult {
  int exit_code = -1;
  std::string out, err;
};

std::string slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

// Runs the flick binary with args (no shell), capturing stdout and stderr.
RunResult run_flick(const std::vector<std::string>& args, const fs::path& dir) {
  std::vector<std::string> argv_s = {FLICK_BINARY};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  const std::string out_path = (dir / "stdout.txt").string(),
                    err_path = (dir / "stderr.txt").string();
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&fa, 2, err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  pid_t pid;
  RunResult r;
  if (posix_spawn(&pid, argv[0], &fa, nullptr, argv.data(), environ) == 0) {
    int status = 0;
    waitpid(pid, &status, 0);
    r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }
  posix_spawn_file_actions_destroy(&fa);
  r.out = slurp(out_path);
  r.err = slurp(err_path);
  return r;
}

// One tensor of the synthetic checkpoint.
struct Original {
  std::string type;  // safetensors dtype name
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
  float at(int64_t i) const { return load_as_f32(*dtype_from_name(type), bytes.data(), i); }
};

Original make_float(const std::string& type, std::vector<int64_t> shape, std::mt19937& rng,
                    float sigma) {
  Original o{type, std::move(shape), {}};
  const DType dt = *dtype_from_name(type);
  std::normal_distribution<float> normal(0.f, sigma);
  std::uniform_real_distribution<float> row_mag(0.1f, 3.f);  // rows of different magnitude
  std::vector<float> v(static_cast<size_t>(o.numel()));
  const int64_t cols = o.numel() / o.shape[0];
  for (int64_t r = 0; r < o.shape[0]; ++r) {
    const float m = row_mag(rng);
    for (int64_t k = 0; k < cols; ++k) v[static_cast<size_t>(r * cols + k)] = normal(rng) * m;
  }
  o.bytes.resize(v.size() * dtype_size(dt));
  convert(DType::F32, v.data(), dt, o.bytes.data(), o.numel());
  return o;
}

// Wan-like layout: which of these must be quantized is part of the test.
std::map<std::string, Original> synthetic_checkpoint() {
  std::mt19937 rng(42);
  std::map<std::string, Original> m;
  m["blocks.0.self_attn.q.weight"] = make_float("F32", {32, 48}, rng, 0.05f);
  m["blocks.0.self_attn.q.bias"] = make_float("F32", {32}, rng, 0.01f);
  m["blocks.0.self_attn.norm_q.weight"] = make_float("F32", {32}, rng, 1.f);
  m["blocks.0.cross_attn.k.weight"] = make_float("F16", {32, 48}, rng, 0.05f);
  m["blocks.0.ffn.0.weight"] = make_float("BF16", {64, 32}, rng, 0.02f);
  m["blocks.0.norm3.weight"] = make_float("F32", {32}, rng, 1.f);
  m["blocks.0.modulation"] = make_float("F32", {1, 6, 32}, rng, 0.1f);
  m["head.head.weight"] = make_float("BF16", {16, 32}, rng, 0.02f);
  m["patch_embedding.weight"] = make_float("F32", {32, 4, 1, 2, 2}, rng, 0.1f);
  m["text_embedding.0.weight"] = make_float("F32", {32, 24}, rng, 0.02f);
  m["vae.decoder.conv1.weight"] = make_float("F16", {8, 4, 3, 3, 3}, rng, 0.1f);  // conv3d
  Original ids{"I64", {5}, std::vector<uint8_t>(40)};
  for (int i = 0; i < 5; ++i) ids.bytes[static_cast<size_t>(8 * i)] = static_cast<uint8_t>(i * 3);
  m["rope.position_ids"] = ids;
  return m;
}

const std::vector<std::string> kQuantized = {"blocks.0.self_attn.q.weight",
                                             "blocks.0.cross_attn.k.weight",
                                             "blocks.0.ffn.0.weight", "vae.decoder.conv1.weight"};

Status write_checkpoint(const fs::path& path, const std::map<std::string, Original>& m,
                        const std::vector<std::string>& only = {}) {
  std::vector<SafetensorsTensor> ts;
  for (const auto& [name, o] : m) {
    if (!only.empty() && std::find(only.begin(), only.end(), name) == only.end()) continue;
    SafetensorsTensor t;
    t.name = name;
    t.type = stored_type_by_name(o.type);
    t.shape = o.shape;
    t.data = o.bytes.data();
    ts.push_back(t);
  }
  return write_safetensors(path.string(), ts, {{"format", "pt"}});
}

class ConvertTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/flick_convert_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    originals_ = synthetic_checkpoint();
    ASSERT_TRUE(write_checkpoint(dir_ / "in.safetensors", originals_).ok());
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::unique_ptr<SafetensorsFile> open_out(const std::string& name) {
    auto f = SafetensorsFile::open((dir_ / name).string());
    EXPECT_TRUE(f.ok()) << f.status().message();
    return f.ok() ? std::move(f.value()) : nullptr;
  }

  // Tensor bytes and info from an output file.
  static std::pair<const TensorInfo*, const uint8_t*> get(SafetensorsFile& f,
                                                          const std::string& name) {
    const int64_t i = f.find(name);
    if (i < 0) return {nullptr, nullptr};
    auto d = f.data(static_cast<size_t>(i));
    return {&f.tensors()[static_cast<size_t>(i)], d.ok() ? *d : nullptr};
  }

  void expect_unchanged(SafetensorsFile& f, const std::string& name) {
    auto [info, data] = get(f, name);
    ASSERT_NE(info, nullptr) << name << " missing";
    const Original& o = originals_.at(name);
    EXPECT_EQ(info->type->name, o.type) << name;
    EXPECT_EQ(info->shape, o.shape) << name;
    ASSERT_EQ(info->nbytes, o.bytes.size()) << name;
    EXPECT_EQ(std::memcmp(data, o.bytes.data(), o.bytes.size()), 0) << name << " changed";
  }

  // The quantized weight: dtype, shape, scale recomputed in double from the
  // original, dequantized values within the quantizer's error bound.
  void expect_quantized(SafetensorsFile& f, const std::string& name, DType qt, bool per_tensor) {
    auto [info, q] = get(f, name);
    auto [sinfo, sdata] = get(f, name + "_scale");
    ASSERT_NE(info, nullptr) << name;
    ASSERT_NE(sinfo, nullptr) << name << "_scale";
    const Original& o = originals_.at(name);
    EXPECT_EQ(info->type->name, dtype_name(qt)) << name;
    EXPECT_EQ(info->shape, o.shape) << name;
    EXPECT_EQ(sinfo->type->name, "F32");
    const int64_t rows = o.shape[0], cols = o.numel() / rows;
    ASSERT_EQ(sinfo->shape, std::vector<int64_t>{per_tensor ? 1 : rows}) << name;
    const float* scale = reinterpret_cast<const float*>(sdata);
    const double qmax = qt == DType::I8 ? 127.0 : 448.0;
    double tensor_amax = 0;
    for (int64_t i = 0; i < o.numel(); ++i)
      tensor_amax = std::max(tensor_amax, std::fabs(double(o.at(i))));
    for (int64_t r = 0; r < rows; ++r) {
      double amax = per_tensor ? tensor_amax : 0;
      if (!per_tensor)
        for (int64_t k = 0; k < cols; ++k)
          amax = std::max(amax, std::fabs(double(o.at(r * cols + k))));
      const float s = scale[per_tensor ? 0 : r];
      ASSERT_EQ(s, static_cast<float>(amax / qmax)) << name << " row " << r;
      for (int64_t k = 0; k < cols; ++k) {
        const int64_t i = r * cols + k;
        const double w = o.at(i);
        const double deq = double(load_as_f32(qt, q, i)) * s;
        // INT8: half a step plus fp32 rounding (see test_quantize.cpp).
        // E4M3: half an ulp of the scaled value (<= |x|/16, 2^-10 among
        // subnormals) plus fp32 rounding.
        const double bound = qt == DType::I8
                                 ? s * (0.5 + 254 * 0x1p-24)
                                 : s * std::max(std::fabs(w / s) / 16, 0x1p-10) * (1 + 0x1p-20) +
                                       std::fabs(w) * 0x1p-22;
        ASSERT_LE(std::fabs(w - deq), bound) << name << " [" << r << ", " << k << "]";
      }
    }
  }

  fs::path dir_;
  std::map<std::string, Original> originals_;
};

TEST_F(ConvertTest, Int8QuantizesLinearAndConvWeightsKeepsTheRest) {
  RunResult r = run_flick({"convert", (dir_ / "in.safetensors").string(),
                           (dir_ / "out.safetensors").string(), "--precision", "int8"},
                          dir_);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto f = open_out("out.safetensors");
  ASSERT_NE(f, nullptr);
  for (const std::string& n : kQuantized) expect_quantized(*f, n, DType::I8, false);
  for (const auto& [name, o] : originals_)
    if (std::find(kQuantized.begin(), kQuantized.end(), name) == kQuantized.end())
      expect_unchanged(*f, name);
  EXPECT_EQ(f->tensors().size(), originals_.size() + kQuantized.size());  // + the scales
  EXPECT_EQ(f->metadata().at("flick.precision"), "int8");
  EXPECT_EQ(f->metadata().at("format"), "pt");  // input metadata carried over

  // One report line per tensor, with the error of the quantized ones.
  for (const auto& [name, o] : originals_)
    EXPECT_NE(r.out.find(" " + name + " "), std::string::npos) << name << "\n" << r.out;
  EXPECT_NE(r.out.find("int8  F32    blocks.0.self_attn.q.weight [32, 48] cos 0.99"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("keep  BF16   head.head.weight [16, 32] (keep 'head')"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("4 tensors converted to int8, 8 kept"), std::string::npos) << r.out;
}

TEST_F(ConvertTest, Fp8PerTensorAndPerChannel) {
  for (const char* granularity : {"tensor", "channel"}) {
    const std::string out = std::string("fp8_") + granularity + ".safetensors";
    RunResult r = run_flick({"convert", (dir_ / "in.safetensors").string(), (dir_ / out).string(),
                             "--precision", "fp8", "--fp8-scale", granularity, "--quiet"},
                            dir_);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    auto f = open_out(out);
    ASSERT_NE(f, nullptr);
    for (const std::string& n : kQuantized)
      expect_quantized(*f, n, DType::F8_E4M3, std::string(granularity) == "tensor");
    EXPECT_EQ(f->metadata().at("flick.precision"), std::string("fp8-") + granularity);
    EXPECT_EQ(r.out.find("keep "), std::string::npos) << "--quiet prints the summary only";
    EXPECT_NE(r.out.find("4 tensors converted"), std::string::npos) << r.out;
  }
}

TEST_F(ConvertTest, KeepPatternsAndKeepDtypeBf16) {
  // Each --keep takes one pattern, so the positionals may follow one.
  RunResult r = run_flick({"convert", "--keep", "cross_attn", (dir_ / "in.safetensors").string(),
                           (dir_ / "out.safetensors").string(), "--precision", "int8", "--keep",
                           "vae.*.conv?.weight", "--keep-dtype", "bf16"},
                          dir_);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto f = open_out("out.safetensors");
  ASSERT_NE(f, nullptr);
  expect_quantized(*f, "blocks.0.self_attn.q.weight", DType::I8, false);
  expect_quantized(*f, "blocks.0.ffn.0.weight", DType::I8, false);
  // Kept by --keep (substring / glob), and every kept F32/F16 tensor as BF16.
  for (const std::string& name :
       {std::string("blocks.0.cross_attn.k.weight"), std::string("vae.decoder.conv1.weight"),
        std::string("blocks.0.norm3.weight"), std::string("blocks.0.modulation"),
        std::string("patch_embedding.weight"), std::string("blocks.0.self_attn.q.bias")}) {
    auto [info, data] = get(*f, name);
    ASSERT_NE(info, nullptr) << name;
    EXPECT_EQ(f->find(name + "_scale"), -1) << name;
    EXPECT_EQ(info->type->name, "BF16") << name;
    const Original& o = originals_.at(name);
    EXPECT_EQ(info->shape, o.shape);
    for (int64_t i = 0; i < o.numel(); ++i)
      ASSERT_EQ(reinterpret_cast<const uint16_t*>(data)[i], f32_to_bf16(o.at(i)))
          << name << " " << i;
  }
  expect_unchanged(*f, "head.head.weight");   // already BF16
  expect_unchanged(*f, "rope.position_ids");  // I64 is not a float: unchanged
  EXPECT_NE(r.out.find("keep 'cross_attn'"), std::string::npos) << r.out;
}

TEST_F(ConvertTest, NoDefaultKeepQuantizesHeadAndEmbeddings) {
  RunResult r =
      run_flick({"convert", (dir_ / "in.safetensors").string(), (dir_ / "out.safetensors").string(),
                 "--precision", "int8", "--no-default-keep", "-q"},
                dir_);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto f = open_out("out.safetensors");
  ASSERT_NE(f, nullptr);
  for (const char* n : {"head.head.weight", "text_embedding.0.weight", "patch_embedding.weight"})
    expect_quantized(*f, n, DType::I8, false);
  expect_unchanged(*f, "blocks.0.norm3.weight");  // rank 1: never quantized
}

TEST_F(ConvertTest, ShardedInputAndAlreadyQuantizedWeights) {
  // Two shards and an index, as Hugging Face writes them.
  std::vector<std::string> a = {"blocks.0.self_attn.q.weight", "blocks.0.self_attn.q.bias",
                                "head.head.weight"};
  std::vector<std::string> b;
  for (const auto& [name, o] : originals_)
    if (std::find(a.begin(), a.end(), name) == a.end()) b.push_back(name);
  ASSERT_TRUE(write_checkpoint(dir_ / "model-00001-of-00002.safetensors", originals_, a).ok());
  ASSERT_TRUE(write_checkpoint(dir_ / "model-00002-of-00002.safetensors", originals_, b).ok());
  nlohmann::json index;
  index["metadata"]["total_size"] = 0;
  for (const auto& n : a) index["weight_map"][n] = "model-00001-of-00002.safetensors";
  for (const auto& n : b) index["weight_map"][n] = "model-00002-of-00002.safetensors";
  std::ofstream(dir_ / "model.safetensors.index.json") << index.dump(2);

  RunResult r = run_flick({"convert", (dir_ / "model.safetensors.index.json").string(),
                           (dir_ / "int8.safetensors").string(), "--precision", "int8"},
                          dir_);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto f = open_out("int8.safetensors");
  ASSERT_NE(f, nullptr);
  for (const std::string& n : kQuantized) expect_quantized(*f, n, DType::I8, false);
  expect_unchanged(*f, "head.head.weight");

  // Converting the result again leaves quantized weights (they have a scale)
  // alone and changes nothing else.
  r = run_flick({"convert", (dir_ / "int8.safetensors").string(),
                 (dir_ / "again.safetensors").string(), "--precision", "fp8"},
                dir_);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto g = open_out("again.safetensors");
  ASSERT_NE(g, nullptr);
  ASSERT_EQ(g->tensors().size(), f->tensors().size());
  for (size_t i = 0; i < f->tensors().size(); ++i) {
    const TensorInfo& t = f->tensors()[i];
    auto [info, data] = get(*g, t.name);
    ASSERT_NE(info, nullptr) << t.name;
    EXPECT_EQ(info->type->name, t.type->name) << t.name;
    EXPECT_EQ(std::memcmp(data, *f->data(i), t.nbytes), 0) << t.name;
  }
  EXPECT_NE(r.out.find("already quantized"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("0 tensors converted"), std::string::npos) << r.out;
}

TEST_F(ConvertTest, BadInputsExitWithTheBatchContract) {
  const std::string out = (dir_ / "out.safetensors").string();
  // Missing file: 65 (permanent), naming the file.
  RunResult r = run_flick(
      {"convert", (dir_ / "nope.safetensors").string(), out, "--precision", "int8"}, dir_);
  EXPECT_EQ(r.exit_code, 65);
  EXPECT_NE(r.err.find("nope.safetensors"), std::string::npos) << r.err;
  // Not a safetensors file: 65.
  std::ofstream(dir_ / "junk.safetensors") << "this is not a checkpoint";
  r = run_flick({"convert", (dir_ / "junk.safetensors").string(), out, "--precision", "int8"},
                dir_);
  EXPECT_EQ(r.exit_code, 65) << r.err;
  // Usage errors: 64.
  r = run_flick({"convert", (dir_ / "in.safetensors").string(), out, "--precision", "int4"}, dir_);
  EXPECT_EQ(r.exit_code, 64);
  r = run_flick({"convert", (dir_ / "in.safetensors").string(), out}, dir_);
  EXPECT_EQ(r.exit_code, 64);
  // A NaN in a weight: 65, naming the tensor; no output file is left behind.
  originals_["blocks.0.ffn.0.weight"].bytes[2 * 100 + 1] = 0x7F;
  originals_["blocks.0.ffn.0.weight"].bytes[2 * 100] = 0xC1;  // BF16 0x7FC1: NaN in row 3
  ASSERT_TRUE(write_checkpoint(dir_ / "nan.safetensors", originals_).ok());
  r = run_flick({"convert", (dir_ / "nan.safetensors").string(), out, "--precision", "fp8"}, dir_);
  EXPECT_EQ(r.exit_code, 65);
  EXPECT_NE(r.err.find("blocks.0.ffn.0.weight"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("output channel 3"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(out));
  // Unwritable output directory: 75 (I/O, worth retrying) or 65 if it does not exist.
  r = run_flick({"convert", (dir_ / "in.safetensors").string(),
                 (dir_ / "no_such_dir" / "out.safetensors").string(), "--precision", "int8"},
                dir_);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("no_such_dir"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace flick
