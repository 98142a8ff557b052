// Pipeline kinds the daemon can run, and the interface a kind implements.
//
// A [[pipeline]] entry of the config names a kind; the kind reads its own
// keys from that entry (weights, precision, ...) and becomes a
// PipelineInstance. For each job naming that instance, the kind reads the
// job's kind-specific tables ([input], [actions], ...) into a PreparedJob,
// which the runner streams into the output sink.
//
// Adding a kind: one file kind_<name>.cpp implementing PipelineInstance and a
// factory, plus one line in the table in pipeline_registry.cpp.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "io/output_sink.h"
#include "jobs/toml_reader.h"
#include "models/pipelines/pipeline.h"

namespace flick {

struct DaemonConfig;

// A job's kind-specific part, checked and ready to run.
class PreparedJob {
 public:
  virtual ~PreparedJob() = default;
  // One line for logs and status files ("120 frames from /in/shot/*.png").
  virtual std::string summary() const = 0;
  virtual Status run(FrameSink& sink, const RunContext& ctx) = 0;
  // What draws the [output] overlay video; empty when the kind has nothing
  // to draw (then a job asking for an overlay is invalid).
  virtual FrameAnnotator overlay() const { return {}; }
  // True when the kind writes files of its own into the output directory on
  // every run (FrameSink::write_side_file: sam3-segment's label PNGs and
  // detections.jsonl); then an [output] naming only `dir` is complete.
  virtual bool writes_own_files() const { return false; }
  // Extra key/values for the [details] table of the status file, asked after
  // a successful run ("precision" = "int8 DiT, bf16 CLIP, f32 VAE").
  virtual std::vector<std::pair<std::string, std::string>> status_details() const { return {}; }
};

class PipelineInstance {
 public:
  virtual ~PipelineInstance() = default;
  // Heavy work done once before the first job (weights, plans). serve, drain
  // and run call it before READY; validate does not.
  virtual Status load() = 0;
  // Reads the job's kind-specific tables from the job's top-level reader
  // (`job`), checking every key and path; on any error records it in the
  // reader's diagnostics and returns nullptr. Cheap: no compute.
  virtual std::unique_ptr<PreparedJob> prepare(TableReader& job,
                                               const DaemonConfig& config) const = 0;
};

struct PipelineKind {
  std::string_view name;
  std::string_view description;
  // Reads the kind's own keys from its [[pipeline]] entry (`name` and `kind`
  // were read already); records errors in the reader and returns nullptr.
  std::unique_ptr<PipelineInstance> (*create)(TableReader& entry);
};

std::span<const PipelineKind> pipeline_kinds();
const PipelineKind* find_pipeline_kind(std::string_view name);
// "encode, matrix-game-2" for messages.
std::string pipeline_kind_names();

// The optional `backend` key of a [[pipeline]] entry: "cpu" (the default),
// or "cuda", which no pipeline runs on yet (an error naming the key: the
// CUDA backend's ops run on a GPU, the models still keep their activations
// in host memory). False after recording an error.
bool read_backend_key(TableReader& entry);

// The factories, one per kind file.
std::unique_ptr<PipelineInstance> create_encode_pipeline(TableReader& entry);
std::unique_ptr<PipelineInstance> create_matrix_game_pipeline(TableReader& entry);
std::unique_ptr<PipelineInstance> create_sam3_segment_pipeline(TableReader& entry);
std::unique_ptr<PipelineInstance> create_framepack_pipeline(TableReader& entry);

}  // namespace flick
