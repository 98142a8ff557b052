#include "models/pipelines/encode.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <utility>

#include "io/frame_archive.h"
#include "io/image.h"

namespace flick {
namespace {

constexpr double kMaxFps = 1000;

std::string size_str(int w, int h) { return std::to_string(w) + "x" + std::to_string(h); }

Status check_shape(const EncodeInput& in) {
  const bool files = !in.frame_files.empty();
  const bool archive = !in.archive.empty();
  if (files == archive) {
    return invalid_input(files ? "input: give frame files or an archive, not both"
                               : "input: no frames (the frame list is empty and no archive given)");
  }
  const bool fps_ok = in.fps > 0 ? in.fps <= kMaxFps : (archive && in.fps == 0);
  if (!fps_ok || !std::isfinite(in.fps)) {
    return invalid_input("input.fps must be in (0, " + std::to_string(int(kMaxFps)) + "], got " +
                         std::to_string(in.fps));
  }
  return ok_status();
}

// An input file open for reading, closed when it goes.
class InputFile {
 public:
  static Expected<InputFile> open(const EncodeInput& in, const std::string& path) {
    if (in.open) {
      FLICK_ASSIGN_OR_RETURN(int fd, in.open(path));
      return InputFile(fd);
    }
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return errno_status("cannot open", path, errno);
    return InputFile(fd);
  }
  InputFile(InputFile&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;
  InputFile& operator=(InputFile&&) = delete;
  ~InputFile() {
    if (fd_ >= 0) ::close(fd_);
  }
  int fd() const { return fd_; }
  int release() { return std::exchange(fd_, -1); }

 private:
  explicit InputFile(int fd) : fd_(fd) {}
  int fd_;
};

Expected<Frame> read_frame_file(const EncodeInput& in, const std::string& path) {
  FLICK_ASSIGN_OR_RETURN(InputFile f, InputFile::open(in, path));
  return read_image_fd(f.fd(), path);
}

Expected<ImageInfo> read_frame_info(const EncodeInput& in, const std::string& path) {
  FLICK_ASSIGN_OR_RETURN(InputFile f, InputFile::open(in, path));
  return read_image_info_fd(f.fd(), path);
}

Expected<FrameArchiveReader> open_archive(const EncodeInput& in) {
  FLICK_ASSIGN_OR_RETURN(InputFile f, InputFile::open(in, in.archive));
  return FrameArchiveReader::open_fd(f.release(), in.archive);
}

Status stopped(int64_t done, int64_t total) {
  return interrupted("encode stopped after " + std::to_string(done) + " of " +
                     std::to_string(total) + " frames");
}

void report(const RunContext& ctx, int64_t done, int64_t total) {
  if (ctx.progress) ctx.progress(done, total);
}

Status run_files(const EncodeInput& in, FrameSink& sink, const RunContext& ctx) {
  const int64_t total = static_cast<int64_t>(in.frame_files.size());
  int width = 0, height = 0;
  for (int64_t i = 0; i < total; ++i) {
    if (ctx.stop_requested()) return stopped(i, total);
    const std::string& path = in.frame_files[i];
    FLICK_ASSIGN_OR_RETURN(Frame frame, read_frame_file(in, path));
    if (i == 0) {
      width = frame.width;
      height = frame.height;
      FLICK_TRY(sink.begin(width, height, in.fps, total));
    } else if (frame.width != width || frame.height != height) {
      return invalid_input(path + " is " + size_str(frame.width, frame.height) + " but " +
                           in.frame_files[0] + " is " + size_str(width, height));
    }
    FLICK_TRY(sink.write(frame.view()));
    report(ctx, i + 1, total);
  }
  return sink.finish();
}

Status run_archive(const EncodeInput& in, FrameSink& sink, const RunContext& ctx) {
  FLICK_ASSIGN_OR_RETURN(FrameArchiveReader reader, open_archive(in));
  const ArchiveInfo info = reader.info();
  FLICK_TRY(sink.begin(info.width, info.height, in.fps > 0 ? in.fps : info.fps, info.frame_count));
  Frame frame;  // one buffer, reused
  for (int64_t i = 0; i < info.frame_count; ++i) {
    if (ctx.stop_requested()) return stopped(i, info.frame_count);
    FLICK_TRY(reader.read_frame(i, &frame));
    FLICK_TRY(sink.write(frame.view()));
    report(ctx, i + 1, info.frame_count);
  }
  return sink.finish();
}

}  // namespace

Status EncodePipeline::validate(const EncodeInput& in) const {
  FLICK_TRY(check_shape(in));
  if (!in.archive.empty()) {
    FLICK_ASSIGN_OR_RETURN(FrameArchiveReader reader, open_archive(in));
    if (reader.info().frame_count == 0)
      return invalid_input(in.archive + ": the archive has no frames");
    return ok_status();
  }
  ImageInfo first;
  for (size_t i = 0; i < in.frame_files.size(); ++i) {
    FLICK_ASSIGN_OR_RETURN(ImageInfo info, read_frame_info(in, in.frame_files[i]));
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

Status EncodePipeline::run(const EncodeInput& in, FrameSink& sink, const RunContext& ctx) const {
  FLICK_TRY(check_shape(in));
  return in.archive.empty() ? run_files(in, sink, ctx) : run_archive(in, sink, ctx);
}

}  // namespace flick
