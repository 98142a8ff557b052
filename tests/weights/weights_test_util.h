// Shared helpers of the weight-loader tests.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "runtime/dtype.h"
#include "runtime/tensor.h"

namespace flick::testing {

inline std::string data_path(const std::string& name) {
  return std::string(FLICK_TEST_DATA) + "/weights/" + name;
}

inline std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  EXPECT_TRUE(f.good()) << path;
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

inline void write_bytes(const std::string& path, const void* data, size_t n) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(static_cast<const char*>(data), static_cast<std::streamsize>(n));
  ASSERT_TRUE(f.good()) << path;
}
inline void write_bytes(const std::string& path, const std::vector<uint8_t>& b) {
  write_bytes(path, b.data(), b.size());
}
inline void write_text(const std::string& path, const std::string& s) {
  write_bytes(path, s.data(), s.size());
}

inline nlohmann::json expected_json() {
  std::ifstream f(data_path("expected.json"));
  return nlohmann::json::parse(f);
}

// A fresh directory under TMPDIR, removed with its contents.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "flick-weights-XXXXXX").string();
    char* p = mkdtemp(tmpl.data());
    EXPECT_NE(p, nullptr);
    path_ = tmpl;
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  std::string file(const std::string& name) const { return path_ + "/" + name; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Element i of a contiguous tensor as a double: exact for every flick dtype
// (I32 does not fit a float, so integers are read as integers).
inline double element(const Tensor& t, int64_t i) {
  switch (t.dtype) {
    case DType::I32: return static_cast<const int32_t*>(t.data)[i];
    case DType::I8: return static_cast<const int8_t*>(t.data)[i];
    case DType::U8: return static_cast<const uint8_t*>(t.data)[i];
    default: return load_as_f32(t.dtype, t.data, i);
  }
}

// safetensors bytes: u64 length, header text, data.
inline std::vector<uint8_t> safetensors_bytes(const std::string& header,
                                              const std::vector<uint8_t>& data,
                                              uint64_t declared_len = UINT64_MAX) {
  uint64_t n = declared_len == UINT64_MAX ? header.size() : declared_len;
  std::vector<uint8_t> out(8 + header.size() + data.size());
  for (size_t i = 0; i < 8; ++i) out[i] = static_cast<uint8_t>(n >> (8 * i));
  std::copy(header.begin(), header.end(), out.begin() + 8);
  std::copy(data.begin(), data.end(), out.begin() + 8 + static_cast<ptrdiff_t>(header.size()));
  return out;
}

}  // namespace flick::testing
