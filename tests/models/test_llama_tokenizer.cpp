// The LLaMA-3 tokenizer against Hugging Face `tokenizers` (the oracle):
// tools/llama_tokenizer_goldens.py wrote the token ids of ~350 varied texts
// (ASCII, contractions in both cases, digits of other scripts, CJK, RTL,
// emoji ZWJ sequences, combining marks, Unicode spaces, special tokens inside
// text, the HunyuanVideo prompt template) for a small vocabulary trained with
// the exact LLaMA-3 tokenizer.json configuration. Token ids are exact: no
// tolerance. FLICK_LLAMA_TOKENIZER_DIR=dir (tokenizer.json + cases.json, the
// script's --real output) runs the same comparison on a real download.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "models/llama/llama_tokenizer.h"

namespace flick::llama {
namespace {

std::string data_dir() {
  if (const char* d = std::getenv("FLICK_LLAMA_TOKENIZER_DIR")) return d;
  return std::string(FLICK_TEST_DATA) + "/llama_tokenizer";
}

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

const LlamaTokenizer& fixture() {
  static const LlamaTokenizer* t = [] {
    Expected<LlamaTokenizer> e = LlamaTokenizer::load(data_dir() + "/tokenizer.json");
    if (!e.ok()) {
      ADD_FAILURE() << e.status().message();
      std::abort();
    }
    return new LlamaTokenizer(std::move(*e));
  }();
  return *t;
}

std::string printable(const std::string& s) {
  std::string o;
  for (unsigned char c : s)
    o += (c < 0x20 || c == 0x7f) ? "\\x" + std::to_string(c) : std::string(1, c);
  return o;
}

TEST(LlamaTokenizer, MatchesHuggingFaceTokenizersTokenForToken) {
  const nlohmann::json cases = nlohmann::json::parse(slurp(data_dir() + "/cases.json"));
  ASSERT_GE(cases.size(), 300u);
  int compared = 0;
  for (const auto& c : cases) {
    const std::string text = c["text"].get<std::string>();
    for (const bool special : {true, false}) {
      const auto want = c[special ? "ids" : "ids_plain"].get<std::vector<int32_t>>();
      Expected<std::vector<int32_t>> got = fixture().encode(text, special);
      ASSERT_TRUE(got.ok()) << got.status().message();
      EXPECT_EQ(*got, want) << "text: \"" << printable(text) << "\" special=" << special;
      ++compared;
    }
  }
  EXPECT_EQ(compared, 2 * static_cast<int>(cases.size()));
}

TEST(LlamaTokenizer, AddsTheTemplatesBeginOfText) {
  const auto bos = fixture().token_id("<|begin_of_text|>");
  ASSERT_TRUE(bos);
  const auto ids = fixture().encode("", true);
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(*ids, std::vector<int32_t>{*bos});
  EXPECT_TRUE(fixture().encode("", false)->empty());
  // Special tokens written in the text are single ids, not spelled out.
  const auto eot = fixture().encode("<|eot_id|>", false);
  EXPECT_EQ(*eot, std::vector<int32_t>{*fixture().token_id("<|eot_id|>")});
}

TEST(LlamaTokenizer, InvalidUtf8IsAnErrorNamingTheByte) {
  for (const std::string& bad : {std::string("ab\xff"), std::string("a\xc0\xaf"),
                                 std::string("\xed\xa0\x80"), std::string("x\xe6\x97")}) {
    Expected<std::vector<int32_t>> r = fixture().encode(bad);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find("not valid UTF-8 at byte"), std::string::npos);
  }
}

// A hostile prompt (one 1 MiB word the vocabulary cannot cover) costs
// n log n merges, not n^2: this finishes in well under a second.
TEST(LlamaTokenizer, LongPieceTokenizesCompletely) {
  std::string word;
  for (uint32_t i = 0; i < (1u << 20); ++i) word += static_cast<char>('a' + (i * 7919u) % 26u);
  Expected<std::vector<int32_t>> r = fixture().encode(word, false);
  ASSERT_TRUE(r.ok());
  EXPECT_GT(r->size(), 1000u);
  EXPECT_LE(r->size(), word.size());
}

Expected<LlamaTokenizer> load_edited(const std::function<void(nlohmann::json&)>& edit) {
  nlohmann::json j = nlohmann::json::parse(slurp(data_dir() + "/tokenizer.json"));
  edit(j);
  return LlamaTokenizer::from_json(j.dump(), "edited/tokenizer.json");
}

void expect_error(const Expected<LlamaTokenizer>& r, const std::string& needle) {
  ASSERT_FALSE(r.ok()) << needle;
  EXPECT_NE(r.status().message().find("edited/tokenizer.json"), std::string::npos);
  EXPECT_NE(r.status().message().find(needle), std::string::npos) << r.status().message();
}

TEST(LlamaTokenizer, MalformedFilesAreErrorsNamingTheKey) {
  EXPECT_FALSE(LlamaTokenizer::from_json("{", "x.json").ok());
  EXPECT_FALSE(LlamaTokenizer::from_json("[]", "x.json").ok());
  EXPECT_FALSE(LlamaTokenizer::load("/nonexistent/tokenizer.json").ok());
  expect_error(load_edited([](auto& j) { j["normalizer"] = {{"type", "NFC"}}; }), "normalizer");
  expect_error(load_edited([](auto& j) { j["model"]["type"] = "WordPiece"; }), "model.type");
  expect_error(load_edited([](auto& j) { j["model"]["byte_fallback"] = true; }), "byte_fallback");
  expect_error(load_edited([](auto& j) { j["model"]["vocab"].erase("!"); }), "byte 33");
  expect_error(load_edited([](auto& j) { j["model"]["vocab"]["a"] = "1"; }), "model.vocab[\"a\"]");
  expect_error(load_edited([](auto& j) { j["model"]["merges"][0] = 5; }), "model.merges[0]");
  expect_error(load_edited([](auto& j) {
                 j["model"]["merges"][1] = {"zz", "qq"};
               }),
               "model.merges[1]");
  expect_error(load_edited([](auto& j) { j["added_tokens"][0]["lstrip"] = true; }),
               "added_tokens[0].lstrip");
  expect_error(load_edited([](auto& j) {
                 j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "(unclosed";
               }),
               "regex");
  expect_error(load_edited([](auto& j) {
                 j["post_processor"] = {{"type", "BertProcessing"}};
               }),
               "post_processor");
}

}  // namespace
}  // namespace flick::llama
