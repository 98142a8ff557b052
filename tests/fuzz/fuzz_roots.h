// The fixed input and output roots the job and config targets validate
// against: /tmp/flick-fuzz-roots/{in,out}, made once at start-up with a start
// image (PNG, JPEG), an action CSV per Matrix-Game mode, PNG frames, a
// frame archive and a short H.264 video, written with flick's own writers. The path is fixed so the
// committed seed jobs (tests/fuzz/corpus/fuzz_job) name real files.
// Validation only reads them; nothing is written while fuzzing.
#pragma once

#include <sys/stat.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "io/frame_archive.h"
#include "io/image.h"
#include "io/video.h"
#include "runtime/file_util.h"

namespace flick::fuzz {

inline constexpr const char* kRoots = "/tmp/flick-fuzz-roots";
inline constexpr const char* kInputRoot = "/tmp/flick-fuzz-roots/in";
inline constexpr const char* kOutputRoot = "/tmp/flick-fuzz-roots/out";

inline void check(const Status& s) {
  if (!s.ok()) {
    std::fprintf(stderr, "fuzz fixture: %s\n", s.message().c_str());
    std::abort();
  }
}

inline Frame gradient(int width, int height) {
  Frame f;
  f.width = width;
  f.height = height;
  f.rgb.resize(size_t(3) * width * height);
  for (size_t i = 0; i < f.rgb.size(); ++i) f.rgb[i] = static_cast<uint8_t>(i * 7);
  return f;
}

// An action CSV of `frames` rows for a mode with these columns.
inline std::string actions_csv(const std::string& header, const std::string& row, int frames) {
  std::string s = header + "\n";
  for (int i = 0; i < frames; ++i) s += row + "\n";
  return s;
}

inline void make_roots() {
  const std::string in = kInputRoot;
  for (const std::string& d : {std::string(kRoots), in, in + "/frames", std::string(kOutputRoot)}) {
    check(ensure_dir(d));
  }
  check(write_png(in + "/start.png", gradient(96, 64).view(), 1));
  check(write_jpeg(in + "/start.jpg", gradient(64, 48).view(), 90));
  check(write_png(in + "/frames/0001.png", gradient(16, 8).view(), 1));
  check(write_png(in + "/frames/0002.png", gradient(16, 8).view(), 1));
  // latent_frames = 3: 9 video frames.
  const std::string csvs[][2] = {
      {"universal.csv", actions_csv("w,s,a,d,pitch,yaw", "1,0,0,0,0,0.1", 9)},
      {"gta_drive.csv", actions_csv("w,s,pitch,yaw", "1,0,0,-0.1", 9)},
      {"templerun.csv",
       actions_csv("nomove,jump,slide,turnleft,turnright,leftside,rightside", "1,0,0,0,0,0,0", 9)},
  };
  for (const auto& [name, text] : csvs) {
    check(write_file_atomic(in + "/" + name, text.data(), text.size()));
  }
  auto archive = FrameArchiveWriter::create(in + "/clip.zst", 16, 8, 25, 1);
  check(archive.status());
  for (int i = 0; i < 2; ++i) check((*archive)->write(gradient(16, 8).view()));
  check((*archive)->finish());
  VideoSpec spec;
  spec.file = "clip.mp4";
  spec.fps = 25;
  auto video = VideoWriter::create(in + "/clip.mp4", spec, 16, 8);
  check(video.status());
  for (int i = 0; i < 2; ++i) check((*video)->write(gradient(16, 8).view()));
  check((*video)->finish());
}

}  // namespace flick::fuzz
