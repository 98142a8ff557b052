#include "models/pipelines/sam3_segment.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <utility>

#include "io/frame_archive.h"
#include "io/image.h"

namespace flick {
namespace {

constexpr double kMaxFps = 1000;
constexpr int kLabelPngLevel = 1;

std::string size_str(int w, int h) { return std::to_string(w) + "x" + std::to_string(h); }

Expected<int> open_input(const Sam3SegmentInput& in, const std::string& path) {
  if (in.open) return in.open(path);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return errno_status("cannot open", path, errno);
  return fd;
}

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const { return fd_; }
  int release() { return std::exchange(fd_, -1); }

 private:
  int fd_;
};

Status check_source_shape(const Sam3SegmentInput& in) {
  const int sources =
      int(!in.frame_files.empty()) + int(!in.archive.empty()) + int(!in.video.empty());
  if (sources != 1) {
    return invalid_input(sources == 0 ? "input: no frames (no files, archive or video given)"
                                      : "input: give exactly one of frames or video");
  }
  if (!std::isfinite(in.fps) || in.fps < 0 || in.fps > kMaxFps) {
    return invalid_input("input.fps must be in (0, " + std::to_string(int(kMaxFps)) + "], got " +
                         std::to_string(in.fps));
  }
  return ok_status();
}

// The frames to process, in order: files and archives skip what every_n
// leaves out without decoding it; a video decodes every frame.
class FrameSource {
 public:
  static Expected<std::unique_ptr<FrameSource>> open(const Sam3SegmentInput& in) {
    auto s = std::unique_ptr<FrameSource>(new FrameSource(in));
    if (!in.archive.empty()) {
      FLICK_ASSIGN_OR_RETURN(int fd, open_input(in, in.archive));
      FLICK_ASSIGN_OR_RETURN(FrameArchiveReader r, FrameArchiveReader::open_fd(fd, in.archive));
      s->archive_.emplace(std::move(r));
      const ArchiveInfo& a = s->archive_->info();
      s->width_ = a.width;
      s->height_ = a.height;
      s->rate_ = in.fps > 0 ? in.fps : a.fps;
      s->source_frames_ = a.frame_count;
    } else if (!in.video.empty()) {
      FLICK_ASSIGN_OR_RETURN(int fd, open_input(in, in.video));
      FLICK_ASSIGN_OR_RETURN(s->video_, VideoReader::open_fd(fd, in.video, in.video_limits));
      const VideoInfo& v = s->video_->info();
      s->width_ = v.width;
      s->height_ = v.height;
      s->rate_ = in.fps > 0 ? in.fps : v.fps > 0 ? v.fps : kSam3DefaultFps;
      s->source_frames_ = v.frame_count;  // 0: unknown
    } else {
      FLICK_ASSIGN_OR_RETURN(int fd, open_input(in, in.frame_files[0]));
      Fd f(fd);
      FLICK_ASSIGN_OR_RETURN(ImageInfo info, read_image_info_fd(f.get(), in.frame_files[0]));
      s->width_ = info.width;
      s->height_ = info.height;
      s->rate_ = in.fps > 0 ? in.fps : kSam3DefaultFps;
      s->source_frames_ = static_cast<int64_t>(in.frame_files.size());
    }
    if (!(s->rate_ > 0) || s->rate_ > kMaxFps) s->rate_ = kSam3DefaultFps;  // a broken header
    return s;
  }

  int width() const { return width_; }
  int height() const { return height_; }
  double rate() const { return rate_; }
  // Processed frames, 0 when the length is not known.
  int64_t total(int64_t every_n) const {
    return source_frames_ > 0 ? (source_frames_ + every_n - 1) / every_n : 0;
  }

  // The next processed frame into *out and its source index; false at the end.
  Expected<bool> next(int64_t every_n, Frame* out, int64_t* source_index) {
    if (video_) {
      for (;;) {
        FLICK_ASSIGN_OR_RETURN(bool more, video_->read(out));
        if (!more) return false;
        const int64_t i = video_->frames_read() - 1;
        if (i % every_n != 0) continue;
        *source_index = i;
        return check_size(*out, in_.video + " frame " + std::to_string(i));
      }
    }
    const int64_t i = next_ * every_n;
    if (i >= source_frames_) return false;
    ++next_;
    *source_index = i;
    if (archive_) {
      FLICK_TRY(archive_->read_frame(i, out));
      return true;
    }
    const std::string& path = in_.frame_files[static_cast<size_t>(i)];
    FLICK_ASSIGN_OR_RETURN(int fd, open_input(in_, path));
    Fd f(fd);
    FLICK_ASSIGN_OR_RETURN(*out, read_image_fd(f.get(), path));
    return check_size(*out, path);
  }

 private:
  explicit FrameSource(const Sam3SegmentInput& in) : in_(in) {}

  Expected<bool> check_size(const Frame& f, const std::string& what) const {
    if (f.width != width_ || f.height != height_) {
      return invalid_input(what + " is " + size_str(f.width, f.height) + ", the first is " +
                           size_str(width_, height_) + " (all frames must share one size)");
    }
    return true;
  }

  const Sam3SegmentInput& in_;
  std::optional<FrameArchiveReader> archive_;
  std::unique_ptr<VideoReader> video_;
  int width_ = 0, height_ = 0;
  double rate_ = 0;
  int64_t source_frames_ = 0;
  int64_t next_ = 0;
};

// Detections of one prompt as tracker objects (masks binarised at 0.5,
// sam3/model/sam3_image_processor.py: masks = masks_logits > 0.5 on the
// sigmoid; sam3_postprocess does it).
Expected<std::vector<Sam3Object>> to_objects(Sam3Detections& d, int prompt, int width, int height) {
  const size_t n = d.query.size();
  if (d.score.size() != n || d.box_xyxy.size() != n || d.masks.size() != n) {
    return internal_error("sam3 detections: inconsistent counts");
  }
  std::vector<Sam3Object> out;
  for (size_t q = 0; q < n; ++q) {
    if (d.masks[q].width != width || d.masks[q].height != height) {
      return internal_error("sam3 detections: a mask is " + std::to_string(d.masks[q].width) + "x" +
                            std::to_string(d.masks[q].height) + ", the frame " +
                            size_str(width, height));
    }
    Sam3Object o;
    o.prompt = prompt;
    o.score = d.score[q];
    o.box_xyxy = d.box_xyxy[q];
    o.mask = std::move(d.masks[q]);
    out.push_back(std::move(o));
  }
  return out;
}

}  // namespace

std::string sam3_label_file_name(int64_t frame) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "label_%06lld.png", static_cast<long long>(frame));
  return buf;
}

Status validate_sam3_segment_input(const Sam3SegmentInput& in) {
  if (in.prompts.empty()) return invalid_input("input.prompts is empty: give at least one prompt");
  if (in.prompts.size() > kSam3MaxPrompts) {
    return invalid_input("input.prompts has " + std::to_string(in.prompts.size()) +
                         " prompts, more than " + std::to_string(kSam3MaxPrompts));
  }
  for (size_t i = 0; i < in.prompts.size(); ++i) {
    const std::string& p = in.prompts[i];
    const std::string key = "input.prompts[" + std::to_string(i) + "]";
    if (p.find_first_not_of(" \t\r\n") == std::string::npos) {
      return invalid_input(key + " is empty");
    }
    if (p.size() > kSam3MaxPromptBytes) {
      return invalid_input(key + " is " + std::to_string(p.size()) + " bytes, more than " +
                           std::to_string(kSam3MaxPromptBytes));
    }
  }
  if (!(in.threshold >= 0 && in.threshold < 1)) {
    return invalid_input("input.threshold must be in [0, 1), got " + std::to_string(in.threshold));
  }
  if (in.every_n < 1) {
    return invalid_input("input.every_n must be >= 1, got " + std::to_string(in.every_n));
  }
  FLICK_TRY(check_source_shape(in));
  if (!in.archive.empty()) {
    FLICK_ASSIGN_OR_RETURN(auto source, FrameSource::open(in));
    if (source->total(1) == 0) return invalid_input(in.archive + ": the archive has no frames");
    return ok_status();
  }
  if (!in.video.empty()) {
    FLICK_ASSIGN_OR_RETURN(auto source, FrameSource::open(in));
    return ok_status();
  }
  ImageInfo first;
  for (size_t i = 0; i < in.frame_files.size(); ++i) {
    FLICK_ASSIGN_OR_RETURN(int fd, open_input(in, in.frame_files[i]));
    Fd f(fd);
    FLICK_ASSIGN_OR_RETURN(ImageInfo info, read_image_info_fd(f.get(), in.frame_files[i]));
    if (i == 0) {
      first = info;
    } else if (info.width != first.width || info.height != first.height) {
      return invalid_input(in.frame_files[i] + " is " + size_str(info.width, info.height) +
                           " but " + in.frame_files[0] + " is " +
                           size_str(first.width, first.height) +
                           " (all frames must share one size)");
    }
  }
  return ok_status();
}

FrameAnnotator sam3_overlay_annotator(std::shared_ptr<const Sam3OverlayState> state) {
  return [state = std::move(state)](int64_t index, Frame& frame) {
    // The sink draws frame `index` right after the pipeline set its objects.
    if (state->frame == index) draw_sam3_overlay(frame, state->objects, state->prompts);
  };
}

Status run_sam3_segment(Sam3FrameModel& model, const Sam3SegmentInput& in, FrameSink& sink,
                        const RunContext& ctx, const std::shared_ptr<Sam3OverlayState>& overlay,
                        const Sam3FrameModel::Tap& tap, Sam3SegmentStats* stats) {
  FLICK_TRY(check_source_shape(in));
  if (in.prompts.empty() || in.every_n < 1) return invalid_input("sam3-segment: invalid input");
  FLICK_ASSIGN_OR_RETURN(std::unique_ptr<FrameSource> source, FrameSource::open(in));
  const int64_t total = source->total(in.every_n);
  const int width = source->width(), height = source->height();
  FLICK_TRY(sink.begin(width, height, source->rate() / double(in.every_n), total));

  Sam3Tracker tracker;
  std::string line;
  std::vector<uint8_t> png;
  Sam3SegmentStats st;
  Frame frame;
  int64_t source_index = 0;
  for (int64_t k = 0;; ++k) {
    if (ctx.stop_requested()) {
      return interrupted("sam3-segment stopped after " + std::to_string(k) + " frames");
    }
    FLICK_ASSIGN_OR_RETURN(bool more, source->next(in.every_n, &frame, &source_index));
    if (!more) break;

    const bool dump = tap && k < kSam3DumpFrames;
    const std::string fk = "f" + std::to_string(k) + ".";
    Sam3FrameModel::Tap image_tap;
    if (dump) {
      image_tap = [&](std::string_view name, const Tensor& t) { tap(fk + std::string(name), t); };
    }
    FLICK_TRY(model.encode_image(frame.view(), image_tap)
                  .with_context("frame " + std::to_string(source_index)));
    std::vector<Sam3Object> objects;
    for (size_t j = 0; j < in.prompts.size(); ++j) {
      Sam3FrameModel::Tap prompt_tap;
      const std::string pj = fk + "p" + std::to_string(j) + ".";
      if (dump) {
        prompt_tap = [&](std::string_view name, const Tensor& t) {
          tap(pj + std::string(name), t);
        };
      }
      FLICK_ASSIGN_OR_RETURN(Sam3Detections d,
                             model.detect(in.prompts[j], in.threshold, prompt_tap));
      FLICK_ASSIGN_OR_RETURN(std::vector<Sam3Object> objs,
                             to_objects(d, static_cast<int>(j), width, height));
      for (Sam3Object& o : objs) objects.push_back(std::move(o));
    }
    FLICK_TRY(tracker.assign(objects));
    st.detections += static_cast<int64_t>(objects.size());

    FLICK_ASSIGN_OR_RETURN(LabelMap labels, sam3_label_map(objects, width, height));
    FLICK_TRY(encode_label_png(labels, kLabelPngLevel, &png));
    FLICK_TRY(sink.write_side_file(sam3_label_file_name(k), png.data(), png.size()));
    line = sam3_json_line(k, source_index, objects, in.prompts, width, height);
    line += '\n';
    FLICK_TRY(sink.append_side_file(kSam3DetectionsName, line.data(), line.size()));

    if (overlay) {
      overlay->frame = k;
      overlay->prompts = in.prompts;
      overlay->objects = std::move(objects);
    }
    FLICK_TRY(sink.write(frame.view()));
    ++st.frames;
    if (ctx.progress) ctx.progress(k + 1, total);
  }
  if (st.frames == 0) return invalid_input("sam3-segment: the input has no frames");
  st.ids = tracker.ids_issued();
  if (stats != nullptr) *stats = st;
  return sink.finish();
}

}  // namespace flick
