// The tiny FramePack fixture folder (tests/data/framepack_pipeline, written by
// tools/framepack_pipeline_goldens.py) as a config and job name it: shared by
// the kind's tests and the integration test that runs it through the spool.
#pragma once

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

namespace flick::testing {

inline const std::string kFramePackFixture = std::string(FLICK_TEST_DATA) + "/framepack_pipeline/";

inline nlohmann::json framepack_fixture_manifest() {
  std::ifstream f(kFramePackFixture + "manifest.json");
  return nlohmann::json::parse(f);
}

// A [[pipeline]] entry "fp" on the fixture weights, the test tokenizers and
// its buckets, caching prompts in `prompt_cache`; more keys may follow.
inline std::string framepack_fixture_pipeline(const std::string& prompt_cache) {
  const nlohmann::json m = framepack_fixture_manifest();
  std::string buckets = "[";
  for (const auto& b : m["buckets"])
    buckets += (buckets.size() > 1 ? ", [" : "[") + std::to_string(b[0].get<int>()) + ", " +
               std::to_string(b[1].get<int>()) + "]";
  buckets += "]";
  return "[[pipeline]]\nname = \"fp\"\nkind = \"framepack-i2v\"\nweights = \"" + kFramePackFixture +
         "weights\"\ntokenizer = \"" + std::string(FLICK_TEST_DATA) +
         "/llama_tokenizer\"\ntokenizer_2 = \"" + std::string(FLICK_TEST_DATA) +
         "/clip_tokenizer\"\nbuckets = " + buckets + "\nprompt_cache = \"" + prompt_cache + "\"\n";
}

// The [input] keys of the reference worker's job after `image`: prompt,
// seconds, seed, steps and distilled guidance.
inline std::string framepack_fixture_input() {
  const nlohmann::json m = framepack_fixture_manifest();
  return "prompt = \"" + m["prompt"].get<std::string>() +
         "\"\nseconds = " + std::to_string(m["job"]["total_second_length"].get<int>()) +
         "\nseed = " + std::to_string(m["job"]["seed"].get<int>()) +
         "\nsteps = " + std::to_string(m["job"]["steps"].get<int>()) +
         "\ndistilled_guidance = 10.0\n";
}

}  // namespace flick::testing
