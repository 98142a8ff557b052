// Black-box helpers: run the flick binary (FLICK_BINARY) on a scratch spool,
// write configs, frames and jobs, and check what it leaves behind with
// independent decoders (libpng, libavformat/libavcodec) and toml11.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

extern "C" {
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
}

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <toml.hpp>
#include <vector>

#include "../jobs/jobs_test_util.h"
#include "jobs/sha256.h"

extern char** environ;

namespace flick::testing {

namespace stdfs = std::filesystem;

// Whether process `pid` runs `program` (its exec is done) and has `sig`
// blocked, from the kernel's view (/proc/PID/status: Name and SigBlk, the
// main thread's mask). Before its exec a posix_spawn child has every signal
// blocked: that is the spawner's doing, not the program's. *exited is set
// when the process is gone or a zombie.
inline bool signal_blocked(pid_t pid, const std::string& program, int sig, bool* exited) {
  *exited = true;
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  const std::string comm = program.substr(program.rfind('/') + 1).substr(0, 15);
  std::string line;
  bool blocked = false, execed = false;
  while (std::getline(in, line)) {
    if (line.starts_with("Name:")) execed = line.substr(line.find_first_not_of(" \t", 5)) == comm;
    if (line.starts_with("State:")) *exited = line.find('Z') != std::string::npos;
    if (line.starts_with("SigBlk:")) {
      const uint64_t mask = std::stoull(line.substr(7), nullptr, 16);
      blocked = (mask >> (sig - 1)) & 1;
    }
  }
  return execed && blocked;
}

// A running (or finished) flick process with stdout/stderr in files.
class Process {
 public:
  Process(const std::vector<std::string>& args, const std::string& log_prefix,
          const std::map<std::string, std::string>& env = {}) {
    out_path_ = log_prefix + ".out";
    err_path_ = log_prefix + ".err";
    std::vector<std::string> argv_s = {FLICK_BINARY};
    argv_s.insert(argv_s.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (std::string& a : argv_s) argv.push_back(a.data());
    argv.push_back(nullptr);
    std::vector<std::string> env_s;
    for (char** e = environ; *e != nullptr; ++e) {
      const std::string kv = *e;
      const std::string key = kv.substr(0, kv.find('='));
      if (env.count(key) == 0 && key != "NOTIFY_SOCKET" && key != "WATCHDOG_USEC" &&
          key != "WATCHDOG_PID" && key != "JOURNAL_STREAM") {
        env_s.push_back(kv);
      }
    }
    for (const auto& [k, v] : env) env_s.push_back(k + "=" + v);
    std::vector<char*> envp;
    for (std::string& e : env_s) envp.push_back(e.data());
    envp.push_back(nullptr);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 1, out_path_.c_str(), O_WRONLY | O_CREAT | O_APPEND,
                                     0644);
    posix_spawn_file_actions_addopen(&fa, 2, err_path_.c_str(), O_WRONLY | O_CREAT | O_APPEND,
                                     0644);
    const int rc = posix_spawn(&pid_, argv[0], &fa, nullptr, argv.data(), envp.data());
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0) pid_ = -1;
  }
  ~Process() {
    if (running()) {
      ::kill(pid_, SIGKILL);
      wait();
    }
  }
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;

  pid_t pid() const { return pid_; }
  // Waits until the process blocks SIGTERM (flick does first thing in
  // main; from then on SIGTERM is a clean stop, before it the default
  // action kills it). False if it exited first or `timeout` passed.
  bool wait_signals_blocked(std::chrono::milliseconds timeout = std::chrono::seconds(60)) const {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      bool exited = false;
      if (pid_ <= 0) return false;
      if (signal_blocked(pid_, FLICK_BINARY, SIGTERM, &exited)) return true;
      if (exited || std::chrono::steady_clock::now() > deadline) return false;
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }
  bool running() const { return pid_ > 0 && !status_; }
  void signal(int sig) const {
    if (running()) ::kill(pid_, sig);
  }
  // Waits for exit; returns the exit code, 128+signal when killed, -1 on timeout.
  int wait(std::chrono::milliseconds timeout = std::chrono::seconds(120)) {
    if (pid_ <= 0) return -1;
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (!status_) {
      int st = 0;
      const pid_t r = ::waitpid(pid_, &st, WNOHANG);
      if (r == pid_) {
        status_ = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        break;
      }
      if (std::chrono::steady_clock::now() > deadline) return -1;
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    return *status_;
  }
  std::string out() const { return read_text(out_path_); }
  std::string err() const { return read_text(err_path_); }

 private:
  pid_t pid_ = -1;
  std::optional<int> status_;
  std::string out_path_, err_path_;
};

struct RunResult {
  int code = -1;
  std::string out, err;
};

inline bool wait_until(const std::function<bool()>& pred,
                       std::chrono::milliseconds timeout = std::chrono::seconds(60)) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!pred()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

inline std::vector<std::string> list(const std::string& dir) {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& e : stdfs::directory_iterator(dir, ec)) names.push_back(e.path().filename());
  std::sort(names.begin(), names.end());
  return names;
}

// Files and directories below `root` whose names say they are unfinished.
inline std::vector<std::string> leftovers(const std::string& root) {
  std::vector<std::string> found;
  std::error_code ec;
  for (auto it = stdfs::recursive_directory_iterator(root, ec);
       it != stdfs::recursive_directory_iterator(); it.increment(ec)) {
    const std::string name = it->path().filename();
    if (name.find(".partial") != std::string::npos || name.find(".tmp") != std::string::npos) {
      found.push_back(it->path());
    }
  }
  return found;
}

inline std::string sha256_of_file(const std::string& path) {
  Sha256 h;
  h.update(read_text(path));
  return h.hex_digest();
}

// Decodes every frame of a video with libavformat/libavcodec.
struct DecodedVideo {
  bool ok = false;
  int frames = 0;
  int width = 0, height = 0;
  std::string codec;
  std::vector<std::vector<uint8_t>>
      rgb;  // filled when keep_rgb (RGB24 via the decoder's bgr0/gbrp)
};

inline DecodedVideo decode_video(const std::string& path) {
  DecodedVideo v;
  AVFormatContext* fmt = nullptr;
  if (avformat_open_input(&fmt, path.c_str(), nullptr, nullptr) < 0) return v;
  if (avformat_find_stream_info(fmt, nullptr) < 0) {
    avformat_close_input(&fmt);
    return v;
  }
  const int stream = av_find_best_stream(fmt, AVMEDIA_TYPE_VIDEO, -1, -1, nullptr, 0);
  if (stream < 0) {
    avformat_close_input(&fmt);
    return v;
  }
  const AVCodecParameters* par = fmt->streams[stream]->codecpar;
  const AVCodec* codec = avcodec_find_decoder(par->codec_id);
  AVCodecContext* ctx = avcodec_alloc_context3(codec);
  avcodec_parameters_to_context(ctx, par);
  ctx->thread_count = 1;
  if (avcodec_open2(ctx, codec, nullptr) < 0) {
    avcodec_free_context(&ctx);
    avformat_close_input(&fmt);
    return v;
  }
  v.codec = codec->name;
  AVPacket* pkt = av_packet_alloc();
  AVFrame* frame = av_frame_alloc();
  auto drain = [&] {
    while (avcodec_receive_frame(ctx, frame) == 0) {
      ++v.frames;
      v.width = frame->width;
      v.height = frame->height;
      // FFV1 of RGB input decodes to planar GBR or packed BGR0: keep RGB24.
      if (frame->format == AV_PIX_FMT_BGR0 || frame->format == AV_PIX_FMT_GBRP) {
        std::vector<uint8_t> rgb(static_cast<size_t>(frame->width) * frame->height * 3);
        for (int y = 0; y < frame->height; ++y) {
          for (int x = 0; x < frame->width; ++x) {
            uint8_t* o = &rgb[(static_cast<size_t>(y) * frame->width + x) * 3];
            if (frame->format == AV_PIX_FMT_BGR0) {
              const uint8_t* p = frame->data[0] + y * frame->linesize[0] + x * 4;
              o[0] = p[2], o[1] = p[1], o[2] = p[0];
            } else {
              o[0] = frame->data[2][y * frame->linesize[2] + x];
              o[1] = frame->data[0][y * frame->linesize[0] + x];
              o[2] = frame->data[1][y * frame->linesize[1] + x];
            }
          }
        }
        v.rgb.push_back(std::move(rgb));
      }
      av_frame_unref(frame);
    }
  };
  bool failed = false;
  while (av_read_frame(fmt, pkt) >= 0) {
    if (pkt->stream_index == stream && avcodec_send_packet(ctx, pkt) < 0) failed = true;
    av_packet_unref(pkt);
    drain();
  }
  avcodec_send_packet(ctx, nullptr);
  drain();
  v.ok = !failed;
  av_frame_free(&frame);
  av_packet_free(&pkt);
  avcodec_free_context(&ctx);
  avformat_close_input(&fmt);
  return v;
}

// A scratch installation: input and output roots, a spool, a config.
class Sandbox {
 public:
  Sandbox() {
    for (const char* d : {"in", "out", "secret", "logs"}) stdfs::create_directories(dir_ / d);
  }

  std::string root() const { return dir_.path(); }
  std::string path(const std::string& rel) const { return dir_ / rel; }
  std::string spool(const std::string& rel = "") const {
    return rel.empty() ? dir_ / "spool" : dir_ / ("spool/" + rel);
  }
  std::string config() const { return dir_ / "flick.toml"; }

  // `daemon_extra` lines go under [daemon]; `pipelines` replaces the default.
  void write_config(
      const std::string& daemon_extra = "",
      const std::string& pipelines = "[[pipeline]]\nname = \"encode\"\nkind = \"encode\"\n",
      const std::string& extra_output_roots = "") {
    std::string outs = "\"" + path("out") + "\"";
    if (!extra_output_roots.empty()) outs += ", \"" + extra_output_roots + "\"";
    // Fast retries and rescans unless daemon_extra sets them.
    std::string defaults;
    if (daemon_extra.find("retry_delay") == std::string::npos) defaults += "retry_delay = 0\n";
    if (daemon_extra.find("rescan_interval") == std::string::npos) {
      defaults += "rescan_interval = 1\n";
    }
    write_text(config(), "[daemon]\nspool = \"" + spool() + "\"\ninput_roots = [\"" + path("in") +
                             "\"]\noutput_roots = [" + outs + "]\n" + defaults + daemon_extra +
                             "\n" + pipelines);
  }

  // `n` PNG frames in in/<name>/; frame i is pattern(w, h, i + seed).
  void make_frames(const std::string& name, int n, int w, int h, int seed = 0) {
    for (int i = 0; i < n; ++i) {
      char file[32];
      std::snprintf(file, sizeof file, "/f%04d.png", i);
      ASSERT_TRUE(write_png_file(path("in/" + name) + file, w, h, pattern(w, h, i + seed)));
    }
  }

  // An encode job text for frames in in/<frames>/ into out/<out>/.
  std::string encode_job(
      const std::string& frames, const std::string& out,
      const std::string& outputs =
          "video = { file = \"v.mp4\", crf = 20 }\nframes = { format = \"png\" }\n",
      const std::string& extra_top = "") const {
    return "version = 1\npipeline = \"encode\"\n" + extra_top + "[input]\nframes = \"" +
           path("in/" + frames) + "/*.png\"\nfps = 25\n[output]\ndir = \"" + path("out/" + out) +
           "\"\n" + outputs;
  }

  // Drops a job into incoming/ the way submitters must: temp name, rename.
  // The temporary's name carries this (live) process's pid, as flick's own
  // do, so a daemon starting meanwhile does not reap it as a dead one's.
  void drop(const std::string& name, const std::string& text) const {
    const std::string tmp =
        spool("incoming/." + name + ".tmp." + std::to_string(::getpid()) + ".drop");
    write_text(tmp, text);
    ::chmod(tmp.c_str(), 0640);
    stdfs::rename(tmp, spool("incoming/" + name));
  }

  RunResult run(const std::vector<std::string>& args, const std::string& log,
                const std::map<std::string, std::string>& env = {}) const {
    Process p(args, dir_ / ("logs/" + log), env);
    RunResult r;
    r.code = p.wait();
    r.out = p.out();
    r.err = p.err();
    return r;
  }
  RunResult flick(const std::string& sub, std::vector<std::string> args = {},
                  const std::string& log = "run") const {
    std::vector<std::string> a = {sub, "--config", config()};
    a.insert(a.end(), args.begin(), args.end());
    return run(a, log + "-" + std::to_string(++runs_));
  }
  RunResult drain() const { return flick("drain", {}, "drain"); }

  // Starts `flick serve`; returns once it has blocked SIGTERM, so a test's
  // SIGTERM is always a clean stop (a signal in the instant between exec
  // and main would kill any program).
  std::unique_ptr<Process> serve(const std::string& log,
                                 const std::map<std::string, std::string>& env = {}) const {
    auto p = std::make_unique<Process>(std::vector<std::string>{"serve", "--config", config()},
                                       dir_ / ("logs/" + log), env);
    p->wait_signals_blocked();
    return p;
  }

  std::optional<toml::value> status(const std::string& dir, const std::string& stem) const {
    const std::string p = spool(dir + "/" + stem + ".status.toml");
    if (!stdfs::exists(p)) return std::nullopt;
    try {
      return toml::parse(p);
    } catch (const std::exception& e) {
      ADD_FAILURE() << p << " does not parse: " << e.what();
      return std::nullopt;
    }
  }

  int count(const std::string& dir, const std::string& suffix = ".status.toml") const {
    int n = 0;
    for (const std::string& name : list(spool(dir))) {
      if (name.size() > suffix.size() && name.ends_with(suffix) && name[0] != '.') ++n;
    }
    return n;
  }

 private:
  ScratchDir dir_;
  mutable int runs_ = 0;
};

// Checks a done job: the status lists exactly the files in its output
// directory, with their sizes and hashes; the video decodes to `frames`
// frames of w x h; the PNG frames equal the inputs pixel for pixel.
inline void expect_done_job(const Sandbox& sb, const std::string& id, int frames, int w, int h,
                            int seed = 0) {
  SCOPED_TRACE("job " + id);
  std::optional<toml::value> st = sb.status("done", id);
  ASSERT_TRUE(st) << "no done/" << id << ".status.toml";
  EXPECT_EQ(toml::find<std::string>(*st, "state"), "done");
  EXPECT_EQ(toml::find<std::string>(*st, "id"), id);
  EXPECT_TRUE(stdfs::exists(sb.spool("done/" + id + ".toml")));
  const auto& outputs = toml::find<toml::array>(*st, "outputs");
  std::set<std::string> listed;
  std::string dir;
  for (const toml::value& o : outputs) {
    const std::string p = toml::find<std::string>(o, "path");
    listed.insert(p);
    dir = p.substr(0, p.rfind('/'));
    ASSERT_TRUE(stdfs::exists(p)) << p;
    EXPECT_EQ(static_cast<int64_t>(stdfs::file_size(p)), toml::find<int64_t>(o, "bytes")) << p;
    EXPECT_EQ(sha256_of_file(p), toml::find<std::string>(o, "sha256")) << p;
  }
  ASSERT_FALSE(dir.empty());
  std::set<std::string> present;
  for (const auto& e : stdfs::recursive_directory_iterator(dir)) {
    if (e.is_regular_file()) present.insert(e.path());
  }
  EXPECT_EQ(listed, present) << "output directory " << dir << " differs from its status";
  int png_frames = 0;
  for (const std::string& p : present) {
    if (p.ends_with(".mp4") || p.ends_with(".mkv")) {
      const DecodedVideo v = decode_video(p);
      EXPECT_TRUE(v.ok) << p;
      EXPECT_EQ(v.frames, frames) << p;
      EXPECT_EQ(v.width, w) << p;
      EXPECT_EQ(v.height, h) << p;
      for (size_t i = 0; i < v.rgb.size(); ++i) {  // lossless FFV1: exact
        EXPECT_TRUE(v.rgb[i] == pattern(w, h, static_cast<int>(i) + seed)) << p << " frame " << i;
      }
    } else if (p.find("/frame_") != std::string::npos && p.ends_with(".png")) {
      int fw = 0, fh = 0;
      const std::vector<uint8_t> rgb = read_png_file(p, &fw, &fh);
      const int index = std::stoi(p.substr(p.rfind("frame_") + 6));
      EXPECT_EQ(fw, w);
      EXPECT_EQ(fh, h);
      EXPECT_TRUE(rgb == pattern(w, h, index + seed)) << p << " differs from its input frame";
      ++png_frames;
    }
  }
  if (png_frames > 0) {
    EXPECT_EQ(png_frames, frames);
  }
}

}  // namespace flick::testing
