// Helpers shared by the io tests: synthetic frames, PSNR, temp directories.
#pragma once

#include <dirent.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "io/frame.h"

namespace flick::testing {

// A smooth, colourful image that moves with `t` (gradients + low-frequency
// waves): what video codecs and JPEG reproduce well.
inline Frame smooth_frame(int width, int height, int t = 0) {
  Frame f{width, height, std::vector<uint8_t>(size_t{3} * width * height)};
  for (int y = 0; y < height; ++y) {
    for (int x = 0; x < width; ++x) {
      const double u = double(x) / width, v = double(y) / height;
      uint8_t* p = &f.rgb[(size_t(y) * width + x) * 3];
      p[0] = static_cast<uint8_t>(std::lround(40 + 170 * u + 20 * std::sin(6.0 * v + 0.2 * t)));
      p[1] = static_cast<uint8_t>(std::lround(50 + 150 * v + 25 * std::cos(5.0 * u - 0.15 * t)));
      p[2] = static_cast<uint8_t>(std::lround(128 + 90 * std::sin(3.0 * (u + v) + 0.1 * t)));
    }
  }
  return f;
}

// Uniform noise from a fixed LCG: incompressible, exercises exact paths.
inline Frame noise_frame(int width, int height, uint32_t seed) {
  Frame f{width, height, std::vector<uint8_t>(size_t{3} * width * height)};
  uint32_t s = seed * 2654435761u + 1;
  for (auto& b : f.rgb) {
    s = s * 1664525u + 1013904223u;
    b = static_cast<uint8_t>(s >> 24);
  }
  return f;
}

inline double psnr(const uint8_t* a, const uint8_t* b, size_t n) {
  double se = 0;
  for (size_t i = 0; i < n; ++i) {
    const double d = double(a[i]) - double(b[i]);
    se += d * d;
  }
  if (se == 0) return INFINITY;
  return 10.0 * std::log10(255.0 * 255.0 / (se / double(n)));
}

inline double psnr(const Frame& a, const Frame& b) {
  if (a.width != b.width || a.height != b.height) return -INFINITY;
  return psnr(a.rgb.data(), b.rgb.data(), a.rgb.size());
}

// A fresh directory under TMPDIR, removed with everything in it.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "flick-io-test-XXXXXX").string();
    path_ = mkdtemp(tmpl.data());
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }
  // Names of all entries, hidden ones included (leftover temporaries).
  std::vector<std::string> entries(const std::string& sub = "") const {
    std::vector<std::string> names;
    for (const auto& e : std::filesystem::directory_iterator(sub.empty() ? path_ : file(sub))) {
      names.push_back(e.path().filename().string());
    }
    return names;
  }

 private:
  std::string path_;
};

}  // namespace flick::testing
