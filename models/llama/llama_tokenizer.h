// LLaMA-3 tokenizer: byte-level BPE exactly as Hugging Face `tokenizers` runs
// the tokenizer.json of a LLaMA-3 download (HunyuanVideo's `tokenizer/`, the
// FramePack text encoder's). Read from the user's file, never built in:
//   added_tokens  split out first (leftmost-longest), each one id
//   pre_tokenizer Split on the file's regex (PCRE2, Unicode properties),
//                 then ByteLevel (bytes -> the GPT-2 printable alphabet)
//   model         BPE with ignore_merges: a piece that is a whole vocabulary
//                 entry is one token, else merges by rank
//   post_processor TemplateProcessing: the special tokens around $A
// Options the LLaMA-3 file does not use (normalizers, byte fallback, word
// suffixes, stripping added tokens) are refused with the key that has them.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "models/bpe_merge.h"
#include "runtime/status.h"

namespace flick::llama {

class LlamaTokenizer {
 public:
  // Parses `path` (tokenizer.json); errors name the file and the key.
  static Expected<LlamaTokenizer> load(const std::string& path);
  static Expected<LlamaTokenizer> from_json(std::string_view json, const std::string& name);

  LlamaTokenizer(LlamaTokenizer&&) noexcept;
  LlamaTokenizer& operator=(LlamaTokenizer&&) noexcept;
  ~LlamaTokenizer();

  // Token ids of `text` (valid UTF-8, else an error naming the byte); with
  // `add_special` wrapped by the post-processor's template (<|begin_of_text|>).
  Expected<std::vector<int32_t>> encode(std::string_view text, bool add_special = true) const;

  // Id of a vocabulary entry or added token given as text ("<|eot_id|>").
  std::optional<int32_t> token_id(std::string_view token) const;
  // Number of ids: the vocabulary plus added tokens.
  int32_t size() const { return size_; }

 private:
  struct Regex;
  struct AddedToken {
    std::string content;
    int32_t id;
  };

  LlamaTokenizer();
  void encode_piece(std::string_view bytes, std::vector<int32_t>& out) const;
  Status encode_segment(std::string_view text, std::vector<int32_t>& out) const;
  const AddedToken* added_at(std::string_view text, size_t pos) const;

  // Vocabulary keyed by raw bytes (the file's ByteLevel strings decoded).
  std::unordered_map<std::string, int32_t> vocab_;
  BpeMerges merges_;
  std::vector<AddedToken> added_;         // longest first
  std::vector<bool> added_first_byte_;    // a byte some added token starts with
  std::vector<int32_t> byte_ids_;         // id of each single byte
  std::vector<int32_t> prefix_, suffix_;  // the template around $A
  std::unique_ptr<Regex> split_;
  bool ignore_merges_ = false;
  int32_t size_ = 0;
};

}  // namespace flick::llama
