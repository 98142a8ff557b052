// Job files (version 1): parsed, every key checked, paths confined to the
// configured roots, into a plain Job ready to run.
//
//   version  = 1
//   pipeline = "encode"           # a [[pipeline]] name from the config
//   id       = "shot-12"          # optional; default: the file's stem
//   [input]  ...                  # read by the pipeline's kind
//   [output]
//   dir    = "/srv/render/out/shot-12"
//   video  = { file = "shot.mp4", codec = "h264", crf = 20, fps = 25, preset = "veryfast" }
//   overlay = { file = "shot_icon.mp4" }  # same keys as video; kinds that draw one (matrix-game-2)
//   frames = { format = "png" }   # png (level 0-9) | jpeg (quality) | zst (level 1-19) | none
//   contact_sheet = true
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "io/output_spec.h"
#include "jobs/config.h"
#include "jobs/paths.h"
#include "jobs/toml_reader.h"

namespace flick {

inline constexpr int kJobVersion = 1;

struct JobSource {
  std::string display;  // the file name shown in errors
  std::string stem;     // file name without ".toml": the default id
  std::string text;
};

struct Job {
  std::string id;
  bool id_from_stem = false;
  std::string pipeline;  // the [[pipeline]] name
  std::string kind;
  std::shared_ptr<PipelineInstance> instance;
  OutputSpec output;  // output.dir is the canonical final directory
  OutputDir output_dir;
  std::unique_ptr<PreparedJob> prepared;
  std::string file;  // display name
  // The parsed document, so errors found later (a duplicate id, an existing
  // output directory) still point at their line.
  std::shared_ptr<const toml::value> document;

  // An error about `key` ("id", "output.dir") formatted at its place in the file.
  Diagnostic error_at(const std::string& key, const std::string& what, const std::string& comment,
                      StatusCode code = StatusCode::kInvalidInput) const;
};

// 1-128 of [A-Za-z0-9._-], starting with a letter or digit, not ending in
// ".status" (ids name spool files <id>.toml and <id>.status.toml).
bool valid_job_id(const std::string& id);

// Parses and checks a job against `config`; nullopt with `diag` filled when
// anything is wrong.
std::optional<Job> parse_job(const JobSource& src, const DaemonConfig& config, Diagnostics& diag);

}  // namespace flick
