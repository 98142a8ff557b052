// No job can take the daemon down: hostile files dropped into incoming/ of a
// running daemon (the unterminated header that once aborted it, binary
// garbage, a huge line, nesting thousands deep that once overflowed the
// stack, a NUL byte, invalid UTF-8, a symlink, a FIFO, an oversized file)
// are each quarantined with a status file saying why, and a good job queued
// behind them completes. `flick drain` over the same files exits 65.
#include <sys/stat.h>
#include <unistd.h>

#include "integration_util.h"

namespace flick::testing {
namespace {

struct Hostile {
  std::string stem;
  std::string text;  // empty: made by make() below
};

std::vector<Hostile> hostile_texts() {
  std::string garbage;
  for (int r = 0; r < 64; ++r) {
    for (int i = 0; i < 256; ++i) garbage += static_cast<char>((i * 7 + r) & 0xff);
  }
  return {
      {"poison", "version = 1\npipeline = \"encode\"\n["},
      {"garbage", garbage},
      {"hugeline", "version = 1\npipeline = \"encode\"\nid = \"" + std::string(900000, 'x')},
      {"deep", "version = 1\npipeline = \"encode\"\na = " + std::string(100000, '[')},
      {"deepinline",
       [] {
         std::string v = "version = 1\npipeline = \"encode\"\na = ";
         for (int i = 0; i < 20000; ++i) v += "{b=";
         return v + "1" + std::string(20000, '}') + "\n";
       }()},
      {"nul", std::string("version = 1\npipeline = \"enc\0ode\"\n", 33)},
      {"utf8", "version = 1\npipeline = \"\xff\xfe\xc0\xaf\"\n"},
      {"oversize", "version = 1\n# " + std::string(1100000, 'y') + "\n"},
  };
}

// Drops every hostile file into incoming/, in this order, oldest first.
std::vector<std::string> drop_hostile(const Sandbox& sb) {
  std::vector<std::string> stems;
  int64_t t = 1000;
  auto age = [&](const std::string& name) {
    const timespec times[2] = {{t, 0}, {t, 0}};
    ::utimensat(AT_FDCWD, sb.spool("incoming/" + name).c_str(), times, AT_SYMLINK_NOFOLLOW);
    ++t;
  };
  for (const Hostile& h : hostile_texts()) {
    sb.drop(h.stem + ".toml", h.text);
    age(h.stem + ".toml");
    stems.push_back(h.stem);
  }
  // A symlink to a valid job elsewhere, and a FIFO (which would block a
  // plain open): neither is ever opened.
  write_text(sb.path("secret/elsewhere.toml"), sb.encode_job("shot", "from-link"));
  EXPECT_EQ(
      ::symlink(sb.path("secret/elsewhere.toml").c_str(), sb.spool("incoming/link.toml").c_str()),
      0);
  age("link.toml");
  stems.push_back("link");
  const std::string fifo_tmp = sb.spool("incoming/.fifo.tmp");
  EXPECT_EQ(::mkfifo(fifo_tmp.c_str(), 0640), 0);
  EXPECT_EQ(::rename(fifo_tmp.c_str(), sb.spool("incoming/fifo.toml").c_str()), 0);
  age("fifo.toml");
  stems.push_back("fifo");
  return stems;
}

// Each hostile file is in quarantine/ with a status file that names it and
// says why; nothing of them ran or is left queued.
void expect_quarantined(const Sandbox& sb, const std::vector<std::string>& stems) {
  for (const std::string& stem : stems) {
    SCOPED_TRACE(stem);
    std::optional<toml::value> st = sb.status("quarantine", stem);
    ASSERT_TRUE(st) << "no quarantine/" << stem << ".status.toml";
    EXPECT_EQ(toml::find<std::string>(*st, "state"), "quarantined");
    EXPECT_EQ(toml::find<int64_t>(*st, "exit_code"), 65);
    EXPECT_EQ(toml::find<std::string>(*st, "error", "file"),
              sb.spool("incoming/" + stem + ".toml"));
    EXPECT_FALSE(toml::find<std::string>(*st, "error", "message").empty());
    struct stat lst;
    EXPECT_EQ(::lstat(sb.spool("quarantine/" + stem + ".toml").c_str(), &lst), 0);
  }
  EXPECT_TRUE(list(sb.spool("incoming")).empty());
  EXPECT_TRUE(list(sb.spool("active")).empty());
  EXPECT_FALSE(stdfs::exists(sb.path("out/from-link")));
}

TEST(Hostile, RunningDaemonQuarantinesThemAndRendersTheGoodJobBehind) {
  Sandbox sb;
  sb.write_config();
  ASSERT_EQ(sb.drain().code, 0);
  sb.make_frames("shot", 3, 16, 16);
  auto daemon = sb.serve("hostile");
  const std::vector<std::string> stems = drop_hostile(sb);
  sb.drop("good.toml", sb.encode_job("shot", "good", "frames = { format = \"png\" }\n"));
  // Committed (the status) and tidied (the job file moved, the ledger gone).
  ASSERT_TRUE(wait_until([&] {
    return stdfs::exists(sb.spool("done/good.toml")) && list(sb.spool("active")).empty();
  })) << daemon->err();
  EXPECT_TRUE(daemon->running()) << daemon->err();
  expect_done_job(sb, "good", 3, 16, 16);
  expect_quarantined(sb, stems);
  // The error says where: the poison's at its line 3.
  EXPECT_EQ(toml::find<int64_t>(*sb.status("quarantine", "poison"), "error", "line"), 3);
  EXPECT_NE(toml::find<std::string>(*sb.status("quarantine", "deep"), "error", "message")
                .find("nested more than 64 deep"),
            std::string::npos);
  daemon->signal(SIGTERM);
  EXPECT_EQ(daemon->wait(), 0) << daemon->err();
}

TEST(Hostile, DrainQuarantinesThemAndExits65) {
  Sandbox sb;
  sb.write_config();
  ASSERT_EQ(sb.drain().code, 0);
  sb.make_frames("shot", 2, 16, 16);
  const std::vector<std::string> stems = drop_hostile(sb);
  sb.drop("good.toml", sb.encode_job("shot", "good", "frames = { format = \"png\" }\n"));
  const RunResult r = sb.drain();
  EXPECT_EQ(r.code, 65) << r.err;  // quarantined beats done; never 134 or 139
  expect_done_job(sb, "good", 2, 16, 16);
  expect_quarantined(sb, stems);
}

// flick validate reports each hostile file and goes on to the next.
TEST(Hostile, ValidateReportsEachFileAndContinues) {
  Sandbox sb;
  sb.write_config();
  sb.make_frames("shot", 2, 16, 16);
  std::vector<std::string> args;
  for (const Hostile& h : hostile_texts()) {
    write_text(sb.path("secret/" + h.stem + ".toml"), h.text);
    args.push_back(sb.path("secret/" + h.stem + ".toml"));
  }
  write_text(sb.path("secret/good.toml"), sb.encode_job("shot", "good"));
  args.push_back(sb.path("secret/good.toml"));
  const RunResult r = sb.flick("validate", args);
  EXPECT_EQ(r.code, 65) << r.err;
  for (const Hostile& h : hostile_texts()) {
    EXPECT_NE(r.err.find(sb.path("secret/" + h.stem + ".toml")), std::string::npos) << h.stem;
  }
  EXPECT_NE(r.out.find(sb.path("secret/good.toml") + ": ok"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace flick::testing
