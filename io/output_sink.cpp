#include "io/output_sink.h"

#include <algorithm>
#include <cstdio>
#include <optional>

#include "io/contact_sheet.h"
#include "io/frame_archive.h"
#include "io/image.h"
#include "io/video.h"
#include "runtime/file_util.h"

namespace flick {
namespace {

// The contact sheet is one small image: compress it well.
constexpr int kContactSheetPngLevel = 6;

class OutputSink final : public FrameSink {
 public:
  OutputSink(OutputSpec spec, std::string dir, FrameAnnotator annotate)
      : spec_(std::move(spec)), dir_(std::move(dir)), annotate_(std::move(annotate)) {}

  Status begin(int width, int height, double fps, int64_t total_frames) override {
    FLICK_CHECK(!begun_, "begin called twice");
    begun_ = true;
    width_ = width;
    height_ = height;
    return remember(open_writers(fps, total_frames));
  }

  Status write(const FrameView& frame) override {
    FLICK_CHECK(begun_ && !finished_, "write outside begin/finish");
    if (!failed_.ok()) return failed_;
    return remember(write_frame(frame));
  }

  Status finish() override {
    FLICK_CHECK(begun_ && !finished_, "finish outside begin or twice");
    if (!failed_.ok()) return failed_;
    finished_ = true;
    return remember(finish_all());
  }

  std::vector<OutputFile> outputs() const override { return outputs_; }

  Status write_side_file(const std::string& name, const void* data, size_t size) override {
    FLICK_CHECK(begun_ && !finished_, "write_side_file outside begin/finish");
    if (!failed_.ok()) return failed_;
    return remember(write_side(name, data, size));
  }

  Status append_side_file(const std::string& name, const void* data, size_t size) override {
    FLICK_CHECK(begun_ && !finished_, "append_side_file outside begin/finish");
    if (!failed_.ok()) return failed_;
    return remember(append_side(name, data, size));
  }

 private:
  Status remember(Status s) {
    if (!s.ok() && failed_.ok()) failed_ = s;
    return s;
  }

  Status open_writers(double fps, int64_t total_frames) {
    if (width_ <= 0 || height_ <= 0) {
      return invalid_input("frame size " + std::to_string(width_) + "x" + std::to_string(height_) +
                           " is invalid");
    }
    if (spec_.video) {
      VideoSpec video = *spec_.video;
      if (video.fps <= 0) video.fps = fps;
      FLICK_ASSIGN_OR_RETURN(
          video_, VideoWriter::create(join_path(dir_, video.file), video, width_, height_));
    }
    if (spec_.overlay) {
      VideoSpec overlay = *spec_.overlay;
      if (overlay.fps <= 0) overlay.fps = fps;
      FLICK_ASSIGN_OR_RETURN(
          overlay_, VideoWriter::create(join_path(dir_, overlay.file), overlay, width_, height_));
      annotated_.width = width_;
      annotated_.height = height_;
      annotated_.rgb.resize(static_cast<size_t>(width_) * height_ * 3);
    }
    switch (spec_.frames.format) {
      case FrameFormat::Zst: {
        FLICK_ASSIGN_OR_RETURN(
            archive_, FrameArchiveWriter::create(join_path(dir_, kFrameArchiveName), width_,
                                                 height_, fps, spec_.frames.zstd_level));
        break;
      }
      case FrameFormat::Jpeg: {
        FLICK_ASSIGN_OR_RETURN(JpegEncoder enc, JpegEncoder::create());
        jpeg_.emplace(std::move(enc));
        break;
      }
      case FrameFormat::Png:
      case FrameFormat::None: break;
    }
    if (spec_.contact_sheet) {
      FLICK_ASSIGN_OR_RETURN(ContactSheet sheet,
                             ContactSheet::create(width_, height_, total_frames));
      sheet_.emplace(std::move(sheet));
    }
    return ok_status();
  }

  Status write_frame(const FrameView& frame) {
    if (frame.width != width_ || frame.height != height_) {
      return invalid_input("frame " + std::to_string(frames_) + " is " +
                           std::to_string(frame.width) + "x" + std::to_string(frame.height) +
                           ", expected " + std::to_string(width_) + "x" + std::to_string(height_));
    }
    const FrameFormat format = spec_.frames.format;
    if (format == FrameFormat::Png || format == FrameFormat::Jpeg) {
      const std::string name = frame_file_name(frames_, format);
      const std::string path = join_path(dir_, name);
      if (format == FrameFormat::Png) {
        FLICK_TRY(encode_png(frame, spec_.frames.png_level, &encoded_).with_context(path));
      } else {
        FLICK_TRY(jpeg_->encode(frame, spec_.frames.jpeg_quality, &encoded_).with_context(path));
      }
      FLICK_TRY(write_file_atomic(path, encoded_.data(), encoded_.size()));
      outputs_.push_back({name, static_cast<int64_t>(encoded_.size())});
    }
    if (archive_) FLICK_TRY(archive_->write(frame));
    if (video_) FLICK_TRY(video_->write(frame));
    if (sheet_) FLICK_TRY(sheet_->add(frame));
    if (overlay_) {
      for (int y = 0; y < height_; ++y) {
        std::copy_n(frame.rgb + y * frame.stride, 3 * width_,
                    annotated_.rgb.data() + static_cast<size_t>(y) * 3 * width_);
      }
      annotate_(frames_, annotated_);
      FLICK_TRY(overlay_->write(annotated_.view()));
    }
    ++frames_;
    return ok_status();
  }

  Status check_side_name(const std::string& name) const {
    if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos) {
      return internal_error("side file name \"" + name + "\" is not a plain file name");
    }
    for (const auto* video : {&spec_.video, &spec_.overlay}) {
      if (*video && (*video)->file == name) {
        return invalid_input("output file \"" + name + "\" is also the name of a video output");
      }
    }
    return ok_status();
  }

  Status append_side(const std::string& name, const void* data, size_t size) {
    auto it = std::find_if(streams_.begin(), streams_.end(),
                           [&](const auto& s) { return s.first == name; });
    if (it == streams_.end()) {
      FLICK_TRY(check_side_name(name));
      FLICK_ASSIGN_OR_RETURN(AtomicFile f, AtomicFile::create(join_path(dir_, name)));
      streams_.emplace_back(name, std::move(f));
      it = streams_.end() - 1;
    }
    return it->second.write(data, size);
  }

  Status write_side(const std::string& name, const void* data, size_t size) {
    FLICK_TRY(check_side_name(name));
    if (std::any_of(streams_.begin(), streams_.end(),
                    [&](const auto& s) { return s.first == name; })) {
      return internal_error("side file \"" + name + "\" is already being appended to");
    }
    const std::string path = join_path(dir_, name);
    FLICK_TRY(write_file_atomic(path, data, size));
    outputs_.push_back({name, static_cast<int64_t>(size)});
    return ok_status();
  }

  Status finish_all() {
    for (auto& [name, file] : streams_) {
      FLICK_TRY(file.commit());
      FLICK_TRY(record(name));
    }
    if (archive_) {
      FLICK_TRY(archive_->finish());
      FLICK_TRY(record(kFrameArchiveName));
    }
    if (video_) {
      FLICK_TRY(video_->finish());
      FLICK_TRY(record(spec_.video->file));
    }
    if (overlay_) {
      FLICK_TRY(overlay_->finish());
      FLICK_TRY(record(spec_.overlay->file));
    }
    if (sheet_ && frames_ > 0) {
      Frame sheet = sheet_->render();
      FLICK_TRY(write_png(join_path(dir_, kContactSheetName), sheet.view(), kContactSheetPngLevel));
      FLICK_TRY(record(kContactSheetName));
    }
    return fsync_dir(dir_);
  }

  Status record(const std::string& name) {
    FLICK_ASSIGN_OR_RETURN(int64_t bytes, file_size(join_path(dir_, name)));
    outputs_.push_back({name, bytes});
    return ok_status();
  }

  const OutputSpec spec_;
  const std::string dir_;
  const FrameAnnotator annotate_;
  bool begun_ = false;
  bool finished_ = false;
  Status failed_;  // the first error; every later call returns it
  int width_ = 0, height_ = 0;
  int64_t frames_ = 0;
  std::unique_ptr<VideoWriter> video_;
  std::unique_ptr<VideoWriter> overlay_;
  Frame annotated_;  // the copy of the current frame the annotator draws on
  std::unique_ptr<FrameArchiveWriter> archive_;
  std::optional<JpegEncoder> jpeg_;
  std::optional<ContactSheet> sheet_;
  std::vector<uint8_t> encoded_;  // reused PNG / JPEG buffer
  std::vector<OutputFile> outputs_;
  // Appended side files, in order of their first append; an uncommitted one
  // is removed with the sink.
  std::vector<std::pair<std::string, AtomicFile>> streams_;
};

}  // namespace

std::string frame_file_name(int64_t index, FrameFormat format) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "frame_%06lld.%s", static_cast<long long>(index),
                format == FrameFormat::Jpeg ? "jpg" : "png");
  return buf;
}

Status validate_output_spec(const OutputSpec& spec) {
  const FramesSpec& f = spec.frames;
  if (f.format == FrameFormat::Jpeg && (f.jpeg_quality < 1 || f.jpeg_quality > 100)) {
    return invalid_input("output.frames.quality must be 1..100, got " +
                         std::to_string(f.jpeg_quality));
  }
  if (f.format == FrameFormat::Png && (f.png_level < 0 || f.png_level > 9)) {
    return invalid_input("output.frames.level must be 0..9 (zlib), got " +
                         std::to_string(f.png_level));
  }
  if (f.format == FrameFormat::Zst && (f.zstd_level < 1 || f.zstd_level > 19)) {
    return invalid_input("output.frames.level must be 1..19 (zstd), got " +
                         std::to_string(f.zstd_level));
  }
  for (const auto& [key, video] :
       {std::pair{"video", &spec.video}, std::pair{"overlay", &spec.overlay}}) {
    if (!*video) continue;
    FLICK_TRY(validate_video_spec(**video).with_context(std::string("output.") + key));
    const std::string& name = (*video)->file;
    if (name == kContactSheetName || name == kFrameArchiveName || name.rfind("frame_", 0) == 0) {
      return invalid_input("output." + std::string(key) + ".file \"" + name +
                           "\" clashes with the names of the frame / contact sheet outputs");
    }
  }
  if (spec.video && spec.overlay && spec.video->file == spec.overlay->file) {
    return invalid_input("output.overlay.file \"" + spec.overlay->file +
                         "\" is also output.video.file: the overlay needs a name of its own");
  }
  return ok_status();
}

Expected<std::unique_ptr<FrameSink>> make_output_sink(const OutputSpec& spec,
                                                      const std::string& dir,
                                                      FrameAnnotator annotate) {
  FLICK_TRY(validate_output_spec(spec));
  if (spec.overlay && !annotate) {
    return invalid_input("output.overlay: this pipeline draws no overlay");
  }
  FLICK_TRY(ensure_dir(dir));
  return std::unique_ptr<FrameSink>(new OutputSink(spec, dir, std::move(annotate)));
}

}  // namespace flick
