#include "io/video_reader.h"

extern "C" {
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/pixdesc.h>
#include <libswscale/swscale.h>
}

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <type_traits>

namespace flick {
namespace {

constexpr int kAvioBufferSize = 1 << 16;

std::string av_error(int err) {
  char buf[AV_ERROR_MAX_STRING_SIZE] = {};
  av_strerror(err, buf, sizeof(buf));
  return buf;
}

// AVIOContext callbacks over a plain descriptor: libavformat reads only
// through the descriptor the caller opened (beneath an input root).
int read_fd(void* opaque, uint8_t* buf, int size) {
  const int fd = *static_cast<int*>(opaque);
  for (;;) {
    const ssize_t n = ::read(fd, buf, static_cast<size_t>(size));
    if (n > 0) return static_cast<int>(n);
    if (n == 0) return AVERROR_EOF;
    if (errno != EINTR) return AVERROR(errno);
  }
}

int64_t seek_fd(void* opaque, int64_t offset, int whence) {
  const int fd = *static_cast<int*>(opaque);
  if (whence & AVSEEK_SIZE) {
    struct stat st;
    return ::fstat(fd, &st) == 0 ? static_cast<int64_t>(st.st_size) : AVERROR(errno);
  }
  whence &= ~AVSEEK_FORCE;
  const off_t r = ::lseek(fd, offset, whence);
  return r < 0 ? AVERROR(errno) : static_cast<int64_t>(r);
}

// An enum field as FFmpeg stored it. Decoders copy colour tags from the
// bitstream unchecked, so a hostile file can leave a value outside the enum
// (254 for AVColorSpace, found by fuzz_video); reading such a field as its
// enum type is undefined behaviour, reading its bytes as the integer is not.
template <typename E>
int raw_enum(const E& field) {
  std::underlying_type_t<E> v;
  std::memcpy(&v, &field, sizeof v);
  return static_cast<int>(v);
}

// The YUV -> RGB matrix swscale should use: what the frame says, else what
// the stream says, else BT.601 (FFmpeg's own default for untagged video).
int sws_colorspace(int cs) {
  switch (cs) {
    case AVCOL_SPC_BT709: return SWS_CS_ITU709;
    case AVCOL_SPC_FCC: return SWS_CS_FCC;
    case AVCOL_SPC_SMPTE240M: return SWS_CS_SMPTE240M;
    case AVCOL_SPC_BT2020_NCL:
    case AVCOL_SPC_BT2020_CL: return SWS_CS_BT2020;
    default: return SWS_CS_ITU601;
  }
}

bool full_range(const AVFrame* f) {
  if (raw_enum(f->color_range) == AVCOL_RANGE_JPEG) return true;
  // The deprecated yuvj formats carry full range in the format itself.
  const auto fmt = static_cast<AVPixelFormat>(f->format);
  return fmt == AV_PIX_FMT_YUVJ420P || fmt == AV_PIX_FMT_YUVJ422P || fmt == AV_PIX_FMT_YUVJ444P;
}

}  // namespace

struct VideoReader::Impl {
  ~Impl() {
    sws_freeContext(sws);
    av_frame_free(&frame);
    av_packet_free(&pkt);
    avcodec_free_context(&dec);
    if (fmt != nullptr) avformat_close_input(&fmt);
    if (avio != nullptr) {
      av_freep(&avio->buffer);
      avio_context_free(&avio);
    }
    if (fd >= 0) ::close(fd);
  }

  Status error(const std::string& what) const { return invalid_input(name + ": " + what); }
  Status av_fail(const std::string& what, int err) const {
    // Read errors of the file itself are worth retrying; the rest is the
    // file's content.
    if (err == AVERROR(EIO) || err == AVERROR(ENOMEM)) {
      return io_error(name + ": " + what + ": " + av_error(err));
    }
    return invalid_input(name + ": " + what + ": " + av_error(err));
  }

  Status open(const VideoReaderLimits& lim);
  Status check_size(int w, int h, const std::string& where) const;
  Status convert(Frame* out);
  Expected<bool> read(Frame* out);

  std::string name;
  VideoReaderLimits limits;
  int fd = -1;
  AVIOContext* avio = nullptr;
  AVFormatContext* fmt = nullptr;
  AVCodecContext* dec = nullptr;
  AVPacket* pkt = nullptr;
  AVFrame* frame = nullptr;
  SwsContext* sws = nullptr;
  int stream = -1;
  VideoInfo info;
  int64_t frames = 0;
  bool flushed = false;  // the end of the packets was sent to the decoder
  bool done = false;
};

Status VideoReader::Impl::check_size(int w, int h, const std::string& where) const {
  if (w <= 0 || h <= 0) {
    return error(where + " has no valid size (" + std::to_string(w) + "x" + std::to_string(h) +
                 ")");
  }
  if (w > limits.max_side || h > limits.max_side || int64_t{w} * h > limits.max_pixels) {
    return error(where + " is " + std::to_string(w) + "x" + std::to_string(h) +
                 ", larger than the limit (" + std::to_string(limits.max_side) + " per side, " +
                 std::to_string(limits.max_pixels) + " pixels)");
  }
  return ok_status();
}

Status VideoReader::Impl::open(const VideoReaderLimits& lim) {
  limits = lim;
  struct stat st;
  if (::fstat(fd, &st) != 0) return errno_status("stat", name, errno);
  if (!S_ISREG(st.st_mode)) return error("not a regular file");
  if (st.st_size == 0) return error("the file is empty");
  if (st.st_size > limits.max_file_bytes) {
    return error("the file is " + std::to_string(st.st_size) + " bytes, more than the limit " +
                 std::to_string(limits.max_file_bytes));
  }
  auto* buffer = static_cast<uint8_t*>(av_malloc(kAvioBufferSize));
  if (buffer == nullptr) return io_error(name + ": out of memory");
  avio = avio_alloc_context(buffer, kAvioBufferSize, 0, &fd, &read_fd, nullptr, &seek_fd);
  if (avio == nullptr) {
    av_free(buffer);
    return io_error(name + ": out of memory");
  }
  fmt = avformat_alloc_context();
  if (fmt == nullptr) return io_error(name + ": out of memory");
  fmt->pb = avio;
  fmt->flags |= AVFMT_FLAG_CUSTOM_IO;
  int err = avformat_open_input(&fmt, name.c_str(), nullptr, nullptr);
  if (err < 0) {
    fmt = nullptr;  // freed by avformat_open_input on failure
    return av_fail("not a readable video file", err);
  }
  if ((err = avformat_find_stream_info(fmt, nullptr)) < 0) {
    return av_fail("cannot read the stream information", err);
  }
  stream = av_find_best_stream(fmt, AVMEDIA_TYPE_VIDEO, -1, -1, nullptr, 0);
  if (stream < 0) return error("has no video stream");
  AVStream* s = fmt->streams[stream];
  for (unsigned i = 0; i < fmt->nb_streams; ++i) {
    if (static_cast<int>(i) != stream) fmt->streams[i]->discard = AVDISCARD_ALL;
  }
  const AVCodecParameters* par = s->codecpar;
  FLICK_TRY(check_size(par->width, par->height, "the video stream"));
  const AVCodec* codec = avcodec_find_decoder(par->codec_id);
  if (codec == nullptr) {
    return error(std::string("no decoder for its codec (") + avcodec_get_name(par->codec_id) + ")");
  }
  dec = avcodec_alloc_context3(codec);
  if (dec == nullptr) return io_error(name + ": out of memory");
  if ((err = avcodec_parameters_to_context(dec, par)) < 0) {
    return av_fail("bad codec parameters", err);
  }
  // Corrupt data is an error, not something to conceal.
  dec->err_recognition |= AV_EF_EXPLODE | AV_EF_CRCCHECK;
  // One thread: with frame threads a corrupt packet's error may surface on a
  // later call or not at all (measured: the corrupt-stream test flaked).
  dec->thread_count = 1;
  if ((err = avcodec_open2(dec, codec, nullptr)) < 0)
    return av_fail("cannot open the decoder", err);
  pkt = av_packet_alloc();
  frame = av_frame_alloc();
  if (pkt == nullptr || frame == nullptr) return io_error(name + ": out of memory");

  info.width = par->width;
  info.height = par->height;
  const AVRational rate = s->avg_frame_rate.num > 0 ? s->avg_frame_rate : s->r_frame_rate;
  info.fps = rate.num > 0 && rate.den > 0 ? av_q2d(rate) : 0;
  info.frame_count = std::max<int64_t>(s->nb_frames, 0);
  info.codec = avcodec_get_name(par->codec_id);
  return ok_status();
}

Status VideoReader::Impl::convert(Frame* out) {
  const std::string where = "frame " + std::to_string(frames);
  FLICK_TRY(check_size(frame->width, frame->height, where));
  if (frame->width != info.width || frame->height != info.height) {
    return error(where + " is " + std::to_string(frame->width) + "x" +
                 std::to_string(frame->height) + ", the stream's size is " +
                 std::to_string(info.width) + "x" + std::to_string(info.height) +
                 " (size changes are not supported)");
  }
  // Decoders that conceal damage (FFV1 on a slice CRC mismatch, H.264 on
  // missing slices) still return the frame, flagged.
  if (frame->decode_error_flags != 0 || (frame->flags & AV_FRAME_FLAG_CORRUPT) != 0) {
    return error(where + " is corrupt (the decoder had to conceal damaged data)");
  }
  const auto pix = static_cast<AVPixelFormat>(frame->format);
  if (pix == AV_PIX_FMT_NONE || av_pix_fmt_desc_get(pix) == nullptr) {
    return error(where + " has no pixel format");
  }
  out->width = frame->width;
  out->height = frame->height;
  out->rgb.resize(size_t{3} * frame->width * frame->height);
  // No scaling, only the colour conversion; full chroma interpolation, so
  // 4:2:0 chroma is upsampled, not replicated (what tests/io/av_decode.h does).
  sws = sws_getCachedContext(sws, frame->width, frame->height, pix, frame->width, frame->height,
                             AV_PIX_FMT_RGB24, SWS_BILINEAR | SWS_ACCURATE_RND | SWS_FULL_CHR_H_INT,
                             nullptr, nullptr, nullptr);
  if (sws == nullptr) {
    return error(where + ": cannot convert pixel format " + std::string(av_get_pix_fmt_name(pix)) +
                 " to RGB");
  }
  const int cs = raw_enum(frame->colorspace) != AVCOL_SPC_UNSPECIFIED ? raw_enum(frame->colorspace)
                                                                      : raw_enum(dec->colorspace);
  const int* coeffs = sws_getCoefficients(sws_colorspace(cs));
  // Output RGB is full range; the input range is what the frame says. RGB
  // inputs ignore this (swscale returns an error we do not need).
  sws_setColorspaceDetails(sws, coeffs, full_range(frame) ? 1 : 0, coeffs, 1, 0, 1 << 16, 1 << 16);
  uint8_t* dst = out->rgb.data();
  const int dst_stride = 3 * frame->width;
  const int rows =
      sws_scale(sws, frame->data, frame->linesize, 0, frame->height, &dst, &dst_stride);
  if (rows != frame->height) return error(where + ": colour conversion failed");
  ++frames;
  return ok_status();
}

Expected<bool> VideoReader::Impl::read(Frame* out) {
  if (done) return false;
  for (;;) {
    int err = avcodec_receive_frame(dec, frame);
    if (err == 0) {
      if (frames >= limits.max_frames) {
        done = true;
        return error("has more than " + std::to_string(limits.max_frames) + " frames (the limit)");
      }
      Status s = convert(out);
      av_frame_unref(frame);
      if (!s.ok()) {
        done = true;
        return s;
      }
      return true;
    }
    if (err == AVERROR_EOF) {
      done = true;
      // The container's index promised more than the stream held: cut off.
      if (info.frame_count > 0 && frames < info.frame_count) {
        return error("truncated: the container lists " + std::to_string(info.frame_count) +
                     " frames, only " + std::to_string(frames) + " could be decoded");
      }
      return false;
    }
    if (err != AVERROR(EAGAIN)) {
      done = true;
      return av_fail("corrupt video data at frame " + std::to_string(frames), err);
    }
    if (flushed) {  // EAGAIN after the flush: should not happen
      done = true;
      return false;
    }
    // The decoder wants more input.
    err = av_read_frame(fmt, pkt);
    if (err == AVERROR_EOF) {
      flushed = true;
      avcodec_send_packet(dec, nullptr);
      continue;
    }
    if (err < 0) {
      done = true;
      return av_fail("cannot read the video at frame " + std::to_string(frames), err);
    }
    if (pkt->stream_index == stream) {
      err = avcodec_send_packet(dec, pkt);
      av_packet_unref(pkt);
      if (err < 0 && err != AVERROR(EAGAIN)) {
        done = true;
        return av_fail("corrupt video data at frame " + std::to_string(frames), err);
      }
    } else {
      av_packet_unref(pkt);
    }
  }
}

VideoReader::VideoReader(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
VideoReader::~VideoReader() = default;

Expected<std::unique_ptr<VideoReader>> VideoReader::open(const std::string& path,
                                                         const VideoReaderLimits& limits) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno_status("opening", path, errno);
  return open_fd(fd, path, limits);
}

Expected<std::unique_ptr<VideoReader>> VideoReader::open_fd(int fd, const std::string& name,
                                                            const VideoReaderLimits& limits) {
  auto impl = std::make_unique<Impl>();
  impl->fd = fd;
  impl->name = name;
  FLICK_TRY(impl->open(limits));
  return std::unique_ptr<VideoReader>(new VideoReader(std::move(impl)));
}

const VideoInfo& VideoReader::info() const { return impl_->info; }
const std::string& VideoReader::name() const { return impl_->name; }
Expected<bool> VideoReader::read(Frame* out) { return impl_->read(out); }
int64_t VideoReader::frames_read() const { return impl_->frames; }

}  // namespace flick
