// Helpers for the jobs unit tests: scratch directories, files, PNG frames.
#pragma once

#include <png.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace flick::testing {

// A fresh directory under $TMPDIR, removed with everything in it.
class ScratchDir {
 public:
  ScratchDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "flick-test-XXXXXX").string();
    path_ = ::mkdtemp(tmpl.data());
    // mkdtemp may return a path through a symlinked /tmp: use the real one.
    path_ = std::filesystem::canonical(path_).string();
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;

  const std::string& path() const { return path_; }
  std::string operator/(const std::string& rel) const { return path_ + "/" + rel; }

 private:
  std::string path_;
};

inline void write_text(const std::string& path, const std::string& text) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream out(path, std::ios::binary);
  out << text;
}

inline std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// A deterministic RGB8 test pattern; `seed` varies it from frame to frame.
inline std::vector<uint8_t> pattern(int w, int h, int seed) {
  std::vector<uint8_t> rgb(static_cast<size_t>(w) * h * 3);
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      uint8_t* p = &rgb[(static_cast<size_t>(y) * w + x) * 3];
      p[0] = static_cast<uint8_t>(x * 4 + seed * 16);
      p[1] = static_cast<uint8_t>(y * 4 + seed * 8);
      p[2] = static_cast<uint8_t>((x ^ y) + seed * 32);
    }
  }
  return rgb;
}

// Writes an RGB8 PNG with libpng (independent of flick's own writer).
inline bool write_png_file(const std::string& path, int w, int h, const std::vector<uint8_t>& rgb) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  png_image img{};
  img.version = PNG_IMAGE_VERSION;
  img.width = static_cast<png_uint_32>(w);
  img.height = static_cast<png_uint_32>(h);
  img.format = PNG_FORMAT_RGB;
  return png_image_write_to_file(&img, path.c_str(), 0, rgb.data(), 0, nullptr) != 0;
}

// Decodes any PNG to RGB8 with libpng; empty on failure.
inline std::vector<uint8_t> read_png_file(const std::string& path, int* w, int* h) {
  png_image img{};
  img.version = PNG_IMAGE_VERSION;
  if (!png_image_begin_read_from_file(&img, path.c_str())) return {};
  img.format = PNG_FORMAT_RGB;
  std::vector<uint8_t> rgb(PNG_IMAGE_SIZE(img));
  if (!png_image_finish_read(&img, nullptr, rgb.data(), 0, nullptr)) return {};
  *w = static_cast<int>(img.width);
  *h = static_cast<int>(img.height);
  return rgb;
}

}  // namespace flick::testing
