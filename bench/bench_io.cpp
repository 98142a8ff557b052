#include "bench/bench_io.h"

#include <stdlib.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <functional>

#include "io/frame_archive.h"
#include "io/image.h"
#include "io/output_sink.h"
#include "io/video.h"
#include "runtime/log.h"

namespace flick::bench {
namespace {

constexpr int kWidth = 640;
constexpr int kHeight = 352;

// Rendered-looking frames: smooth moving gradients, a moving medium-frequency
// texture and +-2 levels of grain, so the encoders do real work (flat
// synthetic frames would flatter them; per-pixel noise would not be a render).
std::vector<Frame> make_clip(int n) {
  std::vector<Frame> clip;
  uint32_t seed = 12345;
  for (int t = 0; t < n; ++t) {
    Frame f{kWidth, kHeight, std::vector<uint8_t>(size_t{3} * kWidth * kHeight)};
    for (int y = 0; y < kHeight; ++y) {
      for (int x = 0; x < kWidth; ++x) {
        const double u = double(x) / kWidth, v = double(y) / kHeight;
        const double texture = 18 * std::sin(0.35 * x + 0.5 * t) * std::sin(0.27 * y - 0.3 * t);
        const double base[3] = {60 + 120 * u + 30 * std::sin(7 * v + 0.2 * t),
                                70 + 110 * v + 30 * std::cos(9 * u - 0.15 * t),
                                120 + 80 * std::sin(4 * (u + v) + 0.1 * t)};
        for (int c = 0; c < 3; ++c) {
          seed = seed * 1664525u + 1013904223u;
          const double grain = double(seed >> 30) - 1.5;
          f.rgb[(size_t(y) * kWidth + x) * 3 + c] =
              static_cast<uint8_t>(std::clamp(base[c] + texture + grain, 0.0, 255.0));
        }
      }
    }
    clip.push_back(std::move(f));
  }
  return clip;
}

class ScratchDir {
 public:
  ScratchDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "flick-bench-io-XXXXXX").string();
    if (mkdtemp(tmpl.data()) != nullptr) path_ = tmpl;
  }
  ~ScratchDir() {
    if (!path_.empty()) std::filesystem::remove_all(path_);
  }
  bool ok() const { return !path_.empty(); }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// Best wall time of `reps` runs of `body` (which processes `frames` frames);
// a failed run is logged and yields no result.
void measure(const std::string& name, int frames, int reps, const std::function<Status()>& body,
             std::vector<BenchResult>* out) {
  double best = INFINITY;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    Status s = body();
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!s.ok()) {
      log_error("bench " + name + ": " + s.message());
      return;
    }
    best = std::min(best, dt);
  }
  out->push_back({name, best, frames / best, "frames/s", 0, ""});
}

}  // namespace

std::vector<BenchResult> run_io_benches(const BenchOptions& options) {
  std::vector<BenchResult> results;
  const std::string size = std::to_string(kWidth) + "x" + std::to_string(kHeight);
  auto wanted = [&](const std::string& name) {
    return options.filter.empty() || name.find(options.filter) != std::string::npos;
  };
  const int n = options.quick ? 24 : 96;
  const int reps = options.quick ? 1 : 3;
  ScratchDir dir;
  if (!dir.ok()) {
    log_error("bench io: cannot create a scratch directory");
    return results;
  }
  const std::vector<Frame> clip = make_clip(options.quick ? 8 : 24);
  auto frame = [&](int i) { return clip[i % clip.size()].view(); };

  auto video = [&](const std::string& name, VideoSpec spec) {
    if (!wanted(name)) return;
    measure(
        name, n, reps,
        [&]() -> Status {
          FLICK_ASSIGN_OR_RETURN(auto w,
                                 VideoWriter::create(dir.file(spec.file), spec, kWidth, kHeight));
          for (int i = 0; i < n; ++i) FLICK_TRY(w->write(frame(i)));
          return w->finish();
        },
        &results);
  };
  VideoSpec h264;
  h264.file = "bench.mp4";
  h264.crf = 18;
  h264.fps = 25;
  h264.preset = "veryfast";
  video("io mp4 h264 veryfast crf18 " + size, h264);
  VideoSpec ffv1;
  ffv1.file = "bench.mkv";
  ffv1.codec = "ffv1";
  ffv1.fps = 25;
  video("io mkv ffv1 " + size, ffv1);

  std::vector<uint8_t> buf;
  const std::string png_name = "io png write level 1 " + size;
  if (wanted(png_name)) {
    measure(
        png_name, n, reps,
        [&]() -> Status {
          for (int i = 0; i < n; ++i) {
            FLICK_TRY(encode_png(frame(i), 1, &buf));
            FLICK_TRY(write_file_atomic(dir.file(frame_file_name(i, FrameFormat::Png)), buf.data(),
                                        buf.size()));
          }
          return ok_status();
        },
        &results);
  }
  const std::string jpeg_name = "io jpeg write q92 " + size;
  if (wanted(jpeg_name)) {
    measure(
        jpeg_name, n, reps,
        [&]() -> Status {
          FLICK_ASSIGN_OR_RETURN(JpegEncoder enc, JpegEncoder::create());
          for (int i = 0; i < n; ++i) {
            FLICK_TRY(enc.encode(frame(i), 92, &buf));
            FLICK_TRY(write_file_atomic(dir.file(frame_file_name(i, FrameFormat::Jpeg)), buf.data(),
                                        buf.size()));
          }
          return ok_status();
        },
        &results);
  }
  const std::string zst_name = "io zst archive level 3 " + size;
  if (wanted(zst_name)) {
    measure(
        zst_name, n, reps,
        [&]() -> Status {
          FLICK_ASSIGN_OR_RETURN(
              auto w, FrameArchiveWriter::create(dir.file("frames.zst"), kWidth, kHeight, 25, 3));
          for (int i = 0; i < n; ++i) FLICK_TRY(w->write(frame(i)));
          return w->finish();
        },
        &results);
  }
  return results;
}

}  // namespace flick::bench
