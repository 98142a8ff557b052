#include "io/video.h"

extern "C" {
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/opt.h>
#include <libswscale/swscale.h>
}

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>
#include <mutex>
#include <vector>

#include "runtime/file_util.h"
#include "runtime/log.h"

namespace flick {
namespace {

std::string av_error(int err) {
  char buf[AV_ERROR_MAX_STRING_SIZE] = {};
  av_strerror(err, buf, sizeof(buf));
  return buf;
}

// libav logs from its worker threads; log_line writes whole lines, so this is
// safe to call concurrently. Only warnings and errors are passed on (x264's
// statistics are info).
void av_log_to_flick(void* avcl, int level, const char* fmt, va_list vl) {
  if (level > AV_LOG_WARNING) return;
  char line[1024];
  int print_prefix = 1;
  av_log_format_line2(avcl, level, fmt, vl, line, sizeof(line), &print_prefix);
  size_t n = std::strlen(line);
  while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r')) line[--n] = '\0';
  if (n == 0) return;
  log_line(level <= AV_LOG_ERROR ? LogLevel::kError : LogLevel::kWarning,
           std::string("libav: ") + line);
}

void route_av_log() {
  static std::once_flag once;
  std::call_once(once, [] { av_log_set_callback(av_log_to_flick); });
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool is_x264_preset(const std::string& p) {
  for (const char* name : {"ultrafast", "superfast", "veryfast", "faster", "fast", "medium", "slow",
                           "slower", "veryslow", "placebo"}) {
    if (p == name) return true;
  }
  return false;
}

}  // namespace

Status validate_video_spec(const VideoSpec& spec) {
  if (spec.file.empty()) return invalid_input("video.file is empty");
  if (spec.file.find('/') != std::string::npos || spec.file == "." || spec.file == "..") {
    return invalid_input("video.file must be a plain file name inside the output dir, got \"" +
                         spec.file + "\"");
  }
  const bool mp4 =
      ends_with(spec.file, ".mp4") || ends_with(spec.file, ".mov") || ends_with(spec.file, ".m4v");
  const bool mkv = ends_with(spec.file, ".mkv");
  if (spec.codec == "h264") {
    if (!mp4 && !mkv) {
      return invalid_input("video.file \"" + spec.file +
                           "\": h264 needs a .mp4, .mov or .mkv name");
    }
    if (spec.crf < 0 || spec.crf > 51) {
      return invalid_input("video.crf must be 0..51, got " + std::to_string(spec.crf));
    }
    if (!is_x264_preset(spec.preset)) {
      return invalid_input("video.preset \"" + spec.preset +
                           "\" is not an x264 preset (ultrafast .. veryslow, placebo)");
    }
  } else if (spec.codec == "ffv1") {
    if (!mkv) return invalid_input("video.file \"" + spec.file + "\": ffv1 needs a .mkv name");
  } else {
    return invalid_input("video.codec must be \"h264\" or \"ffv1\", got \"" + spec.codec + "\"");
  }
  if (!(spec.fps >= 0) || spec.fps > 1000) {
    return invalid_input("video.fps must be in (0, 1000] (or 0: the pipeline's rate), got " +
                         std::to_string(spec.fps));
  }
  return ok_status();
}

struct VideoWriter::Impl {
  explicit Impl(AtomicFile f) : file(std::move(f)) {}
  ~Impl() {
    sws_freeContext(sws);
    av_frame_free(&frame);
    av_packet_free(&pkt);
    avcodec_free_context(&enc);
    if (oc != nullptr) {
      if (oc->pb != nullptr) avio_closep(&oc->pb);
      avformat_free_context(oc);
    }
  }

  Status fail(const std::string& what, int err) {
    failed = true;
    return io_error(file.path() + ": " + what + ": " + av_error(err));
  }
  Status drain();

  AtomicFile file;
  bool ffv1 = false;
  int width = 0, height = 0;  // of the frames we get
  int coded_width = 0, coded_height = 0;
  AVFormatContext* oc = nullptr;
  AVCodecContext* enc = nullptr;
  AVStream* stream = nullptr;  // owned by oc
  AVFrame* frame = nullptr;
  AVPacket* pkt = nullptr;
  SwsContext* sws = nullptr;
  std::vector<uint8_t> padded;  // RGB frame grown to even size (h264, odd sizes)
  int64_t next_pts = 0;
  bool failed = false;
  bool finished = false;
};

Status VideoWriter::Impl::drain() {
  for (;;) {
    int err = avcodec_receive_packet(enc, pkt);
    if (err == AVERROR(EAGAIN) || err == AVERROR_EOF) return ok_status();
    if (err < 0) return fail("encoding failed", err);
    // The muxer may have changed the stream time base in write_header (MP4
    // picks a finer timescale), so rescale to the stream's, not the codec's.
    av_packet_rescale_ts(pkt, enc->time_base, stream->time_base);
    pkt->stream_index = stream->index;
    err = av_interleaved_write_frame(oc, pkt);
    if (err < 0) return fail("cannot write a packet", err);
  }
}

VideoWriter::VideoWriter(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
VideoWriter::~VideoWriter() = default;

int64_t VideoWriter::frames_written() const { return impl_->next_pts; }
const std::string& VideoWriter::path() const { return impl_->file.path(); }

Expected<std::unique_ptr<VideoWriter>> VideoWriter::create(const std::string& path,
                                                           const VideoSpec& spec, int width,
                                                           int height) {
  FLICK_TRY(validate_video_spec(spec).with_context(path));
  if (!(spec.fps > 0)) return invalid_input(path + ": video fps is not set");
  if (width <= 0 || height <= 0 || width > 16384 || height > 16384) {
    return invalid_input(path + ": frame size " + std::to_string(width) + "x" +
                         std::to_string(height) + " is out of range for video (1..16384)");
  }
  route_av_log();
  const AVOutputFormat* ofmt = av_guess_format(nullptr, path.c_str(), nullptr);
  if (ofmt == nullptr) return invalid_input(path + ": unknown video container");
  const bool ffv1 = spec.codec == "ffv1";
  const char* encoder_name = ffv1 ? "ffv1" : "libx264";
  const AVCodec* codec = avcodec_find_encoder_by_name(encoder_name);
  if (codec == nullptr) {
    return unavailable(path + ": this FFmpeg build has no " + encoder_name + " encoder");
  }
  if (avformat_query_codec(ofmt, codec->id, FF_COMPLIANCE_NORMAL) != 1) {
    return invalid_input(path + ": the " + ofmt->name + " container cannot hold " + spec.codec);
  }

  FLICK_ASSIGN_OR_RETURN(AtomicFile file, AtomicFile::create(path));
  auto impl = std::make_unique<Impl>(std::move(file));
  Impl& v = *impl;
  v.ffv1 = ffv1;
  v.width = width;
  v.height = height;
  v.coded_width = ffv1 ? width : (width + 1) & ~1;
  v.coded_height = ffv1 ? height : (height + 1) & ~1;
  // "file:" keeps a ':' in the name from being read as a protocol.
  const std::string url = "file:" + v.file.temp_path();
  int err = avformat_alloc_output_context2(&v.oc, ofmt, nullptr, url.c_str());
  if (err < 0) return v.fail("cannot create the muxer", err);
  v.stream = avformat_new_stream(v.oc, nullptr);
  v.enc = avcodec_alloc_context3(codec);
  v.frame = av_frame_alloc();
  v.pkt = av_packet_alloc();
  if (v.stream == nullptr || v.enc == nullptr || v.frame == nullptr || v.pkt == nullptr) {
    return v.fail("cannot allocate the encoder", AVERROR(ENOMEM));
  }

  AVCodecContext* c = v.enc;
  c->width = v.coded_width;
  c->height = v.coded_height;
  const AVRational rate = av_d2q(spec.fps, 100000);
  c->time_base = av_inv_q(rate);
  c->framerate = rate;
  c->thread_count = 0;  // one per core
  AVDictionary* opts = nullptr;
  if (ffv1) {
    c->pix_fmt = AV_PIX_FMT_BGR0;
    c->color_primaries = AVCOL_PRI_BT709;
    c->color_trc = AVCOL_TRC_IEC61966_2_1;  // sRGB
    c->colorspace = AVCOL_SPC_RGB;
    c->color_range = AVCOL_RANGE_JPEG;
    c->level = 3;     // slices (threads) and per-slice CRCs
    c->gop_size = 1;  // every frame decodable on its own
    av_dict_set(&opts, "slicecrc", "1", 0);
  } else {
    c->pix_fmt = AV_PIX_FMT_YUV420P;
    c->color_primaries = AVCOL_PRI_BT709;
    c->color_trc = AVCOL_TRC_BT709;
    c->colorspace = AVCOL_SPC_BT709;
    c->color_range = AVCOL_RANGE_MPEG;
    // bit_rate stays 0: libx264 would pick ABR over CRF otherwise.
    av_dict_set(&opts, "crf", std::to_string(spec.crf).c_str(), 0);
    av_dict_set(&opts, "preset", spec.preset.c_str(), 0);
  }
  if (v.oc->oformat->flags & AVFMT_GLOBALHEADER) c->flags |= AV_CODEC_FLAG_GLOBAL_HEADER;
  err = avcodec_open2(c, codec, &opts);
  const int unused_opts = av_dict_count(opts);
  av_dict_free(&opts);
  if (err < 0) return v.fail(std::string("cannot open the ") + encoder_name + " encoder", err);
  FLICK_CHECK(unused_opts == 0, "encoder options not recognised");

  v.stream->time_base = c->time_base;
  v.stream->avg_frame_rate = rate;
  err = avcodec_parameters_from_context(v.stream->codecpar, c);
  if (err < 0) return v.fail("cannot set the stream parameters", err);

  err = avio_open(&v.oc->pb, url.c_str(), AVIO_FLAG_WRITE);
  if (err < 0) return v.fail("cannot open", err);
  AVDictionary* mux_opts = nullptr;
  // The index (moov) goes first so players can start before the download ends.
  if (std::strcmp(ofmt->name, "mp4") == 0 || std::strcmp(ofmt->name, "mov") == 0) {
    av_dict_set(&mux_opts, "movflags", "+faststart", 0);
  }
  err = avformat_write_header(v.oc, &mux_opts);
  const int unused_mux = av_dict_count(mux_opts);
  av_dict_free(&mux_opts);
  if (err < 0) return v.fail("cannot write the header", err);
  FLICK_CHECK(unused_mux == 0, "muxer options not recognised");

  v.frame->format = c->pix_fmt;
  v.frame->width = c->width;
  v.frame->height = c->height;
  v.frame->color_primaries = c->color_primaries;
  v.frame->color_trc = c->color_trc;
  v.frame->colorspace = c->colorspace;
  v.frame->color_range = c->color_range;
  err = av_frame_get_buffer(v.frame, 0);
  if (err < 0) return v.fail("cannot allocate a frame", err);

  if (!ffv1) {
    v.sws = sws_getContext(v.coded_width, v.coded_height, AV_PIX_FMT_RGB24, v.coded_width,
                           v.coded_height, AV_PIX_FMT_YUV420P, SWS_BILINEAR | SWS_ACCURATE_RND,
                           nullptr, nullptr, nullptr);
    if (v.sws == nullptr) return v.fail("cannot create the colour converter", AVERROR(EINVAL));
    // swscale defaults to BT.601; the stream is tagged BT.709, so convert with
    // BT.709: full-range RGB in, limited-range YUV out.
    const int* bt709 = sws_getCoefficients(SWS_CS_ITU709);
    sws_setColorspaceDetails(v.sws, bt709, 1, bt709, 0, 0, 1 << 16, 1 << 16);
    if (v.coded_width != width || v.coded_height != height) {
      v.padded.resize(size_t{3} * v.coded_width * v.coded_height);
    }
  }
  return std::unique_ptr<VideoWriter>(new VideoWriter(std::move(impl)));
}

Status VideoWriter::write(const FrameView& f) {
  Impl& v = *impl_;
  FLICK_CHECK(!v.failed && !v.finished, "write after an error or finish");
  if (f.width != v.width || f.height != v.height) {
    return invalid_input(v.file.path() + ": frame " + std::to_string(v.next_pts) + " is " +
                         std::to_string(f.width) + "x" + std::to_string(f.height) +
                         ", the video is " + std::to_string(v.width) + "x" +
                         std::to_string(v.height));
  }
  FLICK_CHECK(f.stride >= 3 * f.width && f.stride <= INT_MAX);
  int err = av_frame_make_writable(v.frame);  // the encoder may still hold the last one
  if (err < 0) return v.fail("cannot allocate a frame", err);

  if (v.ffv1) {
    for (int y = 0; y < f.height; ++y) {
      const uint8_t* src = f.rgb + f.stride * y;
      uint8_t* dst = v.frame->data[0] + int64_t{v.frame->linesize[0]} * y;
      for (int x = 0; x < f.width; ++x) {
        dst[4 * x + 0] = src[3 * x + 2];
        dst[4 * x + 1] = src[3 * x + 1];
        dst[4 * x + 2] = src[3 * x + 0];
        dst[4 * x + 3] = 0;
      }
    }
  } else {
    const uint8_t* src = f.rgb;
    int stride = static_cast<int>(f.stride);
    if (!v.padded.empty()) {
      // Repeat the last column / row up to the even size.
      const size_t row = size_t{3} * v.coded_width;
      for (int y = 0; y < v.coded_height; ++y) {
        uint8_t* dst = v.padded.data() + row * y;
        std::memcpy(dst, f.rgb + f.stride * std::min(y, f.height - 1), size_t{3} * f.width);
        if (v.coded_width != f.width) std::memcpy(dst + 3 * f.width, dst + 3 * (f.width - 1), 3);
      }
      src = v.padded.data();
      stride = static_cast<int>(row);
    }
    sws_scale(v.sws, &src, &stride, 0, v.coded_height, v.frame->data, v.frame->linesize);
  }
  v.frame->pts = v.next_pts++;
  err = avcodec_send_frame(v.enc, v.frame);
  if (err < 0) return v.fail("encoding failed", err);
  return v.drain();
}

Status VideoWriter::finish() {
  Impl& v = *impl_;
  FLICK_CHECK(!v.failed && !v.finished, "finish after an error or twice");
  v.finished = true;
  // Flush: x264 holds frames in its lookahead and for B-frames.
  int err = avcodec_send_frame(v.enc, nullptr);
  if (err < 0) return v.fail("flushing the encoder failed", err);
  FLICK_TRY(v.drain());
  err = av_write_trailer(v.oc);  // with +faststart, a second pass moves moov first
  if (err < 0) return v.fail("cannot write the trailer", err);
  err = avio_closep(&v.oc->pb);
  if (err < 0) return v.fail("cannot close", err);
  return v.file.commit();
}

}  // namespace flick
