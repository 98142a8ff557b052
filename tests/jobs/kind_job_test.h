// A fixture for one pipeline kind's job-file tests (flick validate, no weights
// loaded): the job text names scratch directories as {{IN}}, {{OUT}} and
// {{SECRET}} (a directory outside the roots), and a bad job's first error is
// checked by its line, key and message.
#pragma once

#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <utility>

#include "jobs/job.h"
#include "jobs_test_util.h"

namespace flick::testing {

class KindJobTest : public ::testing::Test {
 protected:
  explicit KindJobTest(std::string job_file) : job_file_(std::move(job_file)) {}

  // The daemon config with {{IN}} / {{OUT}} as the roots and `pipelines`
  // ([[pipeline]] tables) after it.
  void use_pipelines(const std::string& pipelines) {
    Diagnostics d("flick.toml");
    std::optional<DaemonConfig> c =
        parse_config("[daemon]\nspool = \"/x\"\ninput_roots = [\"" + (dir_ / "in") +
                         "\"]\noutput_roots = [\"" + (dir_ / "out") + "\"]\n" + pipelines,
                     "flick.toml", "", d);
    ASSERT_TRUE(c) << d.status().message();
    config_ = std::move(*c);
  }

  std::optional<Job> parse(std::string body) {
    for (auto [from, to] : {std::pair<std::string, std::string>{"{{IN}}", dir_ / "in"},
                            {"{{OUT}}", dir_ / "out"},
                            {"{{SECRET}}", dir_ / "secret"}}) {
      for (size_t p; (p = body.find(from)) != std::string::npos;) body.replace(p, from.size(), to);
    }
    diag_ = Diagnostics(job_file_);
    const std::string id = job_file_.substr(0, job_file_.rfind('.'));
    return parse_job({job_file_, id, body}, config_, diag_);
  }

  // The first error is at `line` on `key` and its message contains `text`.
  void expect_error(const std::string& body, int line, const std::string& key,
                    const std::string& text) {
    std::optional<Job> j = parse(body);
    ASSERT_FALSE(j) << "accepted:\n" << body;
    const Diagnostic& d = diag_.first();
    EXPECT_EQ(d.file, job_file_);
    EXPECT_EQ(d.line, line) << d.message;
    EXPECT_EQ(d.key, key) << d.message;
    EXPECT_NE(d.message.find(text), std::string::npos) << "missing \"" << text << "\" in\n"
                                                       << d.message;
  }

  // `job` with line `line` (1-based) replaced by `text` ("" deletes it).
  static std::string replace_line(const std::string& job, int line, const std::string& text) {
    size_t start = 0;
    for (int i = 1; i < line; ++i) start = job.find('\n', start) + 1;
    const size_t end = job.find('\n', start);
    std::string out = job.substr(0, start);
    if (!text.empty()) out += text + "\n";
    return out + job.substr(end + 1);
  }

  std::string job_file_;
  ScratchDir dir_;
  DaemonConfig config_;
  Diagnostics diag_{""};
};

}  // namespace flick::testing
