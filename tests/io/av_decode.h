// Decodes a video file with libavformat / libavcodec, the oracle for the
// writers (no ffprobe needed).
#pragma once

extern "C" {
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libswscale/swscale.h>
}

#include <string>
#include <vector>

#include "io/frame.h"

namespace flick::testing {

struct DecodedVideo {
  std::string error;  // empty on success
  std::string codec;  // "h264", "ffv1"
  std::string container;
  int width = 0, height = 0;
  AVPixelFormat pix_fmt = AV_PIX_FMT_NONE;
  AVColorPrimaries primaries = AVCOL_PRI_UNSPECIFIED;
  AVColorTransferCharacteristic trc = AVCOL_TRC_UNSPECIFIED;
  AVColorSpace colorspace = AVCOL_SPC_UNSPECIFIED;
  AVColorRange range = AVCOL_RANGE_UNSPECIFIED;
  AVRational avg_frame_rate{0, 1};
  AVRational time_base{0, 1};
  std::vector<int64_t> pts;             // of the decoded frames, in stream time base
  std::vector<Frame> rgb;               // decoded frames converted to RGB8
  std::vector<std::vector<uint8_t>> y;  // the luma plane (yuv formats), width*height
};

// Converts yuv420p with BT.709 limited-range coefficients (what the stream
// says it holds), or bgr0, to RGB8.
inline DecodedVideo decode_video(const std::string& path) {
  DecodedVideo out;
  AVFormatContext* fmt = nullptr;
  if (avformat_open_input(&fmt, path.c_str(), nullptr, nullptr) < 0) {
    out.error = "cannot open " + path;
    return out;
  }
  avformat_find_stream_info(fmt, nullptr);
  const int si = av_find_best_stream(fmt, AVMEDIA_TYPE_VIDEO, -1, -1, nullptr, 0);
  if (si < 0) {
    out.error = "no video stream";
    avformat_close_input(&fmt);
    return out;
  }
  AVStream* st = fmt->streams[si];
  const AVCodecParameters* par = st->codecpar;
  out.container = fmt->iformat->name;
  out.codec = avcodec_get_name(par->codec_id);
  out.width = par->width;
  out.height = par->height;
  out.pix_fmt = static_cast<AVPixelFormat>(par->format);
  out.primaries = par->color_primaries;
  out.trc = par->color_trc;
  out.colorspace = par->color_space;
  out.range = par->color_range;
  out.avg_frame_rate = st->avg_frame_rate;
  out.time_base = st->time_base;

  const AVCodec* codec = avcodec_find_decoder(par->codec_id);
  AVCodecContext* dec = avcodec_alloc_context3(codec);
  avcodec_parameters_to_context(dec, par);
  avcodec_open2(dec, codec, nullptr);
  AVPacket* pkt = av_packet_alloc();
  AVFrame* frame = av_frame_alloc();
  SwsContext* sws = nullptr;
  auto take = [&]() {
    while (avcodec_receive_frame(dec, frame) == 0) {
      out.pts.push_back(frame->best_effort_timestamp);
      Frame rgb{frame->width, frame->height,
                std::vector<uint8_t>(size_t{3} * frame->width * frame->height)};
      if (frame->format == AV_PIX_FMT_YUV420P) {
        std::vector<uint8_t> y(size_t(frame->width) * frame->height);
        for (int r = 0; r < frame->height; ++r) {
          std::copy_n(frame->data[0] + r * frame->linesize[0], frame->width,
                      y.data() + r * frame->width);
        }
        out.y.push_back(std::move(y));
      }
      if (frame->format == AV_PIX_FMT_BGR0) {  // exact by hand
        for (int r = 0; r < frame->height; ++r) {
          const uint8_t* src = frame->data[0] + r * frame->linesize[0];
          uint8_t* dst = rgb.rgb.data() + size_t(r) * 3 * frame->width;
          for (int x = 0; x < frame->width; ++x) {
            dst[3 * x] = src[4 * x + 2];
            dst[3 * x + 1] = src[4 * x + 1];
            dst[3 * x + 2] = src[4 * x];
          }
        }
      } else {
        sws = sws_getCachedContext(
            sws, frame->width, frame->height, static_cast<AVPixelFormat>(frame->format),
            frame->width, frame->height, AV_PIX_FMT_RGB24,
            SWS_BILINEAR | SWS_ACCURATE_RND | SWS_FULL_CHR_H_INT, nullptr, nullptr, nullptr);
        const int* bt709 = sws_getCoefficients(SWS_CS_ITU709);
        sws_setColorspaceDetails(sws, bt709, 0, bt709, 1, 0, 1 << 16, 1 << 16);
        uint8_t* dst = rgb.rgb.data();
        const int dst_stride = 3 * frame->width;
        sws_scale(sws, frame->data, frame->linesize, 0, frame->height, &dst, &dst_stride);
      }
      out.rgb.push_back(std::move(rgb));
    }
  };
  while (av_read_frame(fmt, pkt) >= 0) {
    if (pkt->stream_index == si) {
      avcodec_send_packet(dec, pkt);
      take();
    }
    av_packet_unref(pkt);
  }
  avcodec_send_packet(dec, nullptr);
  take();
  sws_freeContext(sws);
  av_frame_free(&frame);
  av_packet_free(&pkt);
  avcodec_free_context(&dec);
  avformat_close_input(&fmt);
  return out;
}

}  // namespace flick::testing
