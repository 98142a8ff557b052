// CLIP byte-level BPE tokenizer, for two reference implementations that share
// one vocabulary format and one BPE:
//  - open_clip / OpenAI CLIP SimpleTokenizer as facebookresearch/sam3 copies it
//    (sam3/model/tokenizer_ve.py, clean="lower"): merges from
//    bpe_simple_vocab_16e6.txt.gz, specials "<start_of_text>"/"<end_of_text>"
//    (open_clip's SimpleTokenizer is the same, names included), pad id 0.
//    Text: ftfy.fix_text, html.unescape twice, whitespace clean, lower().
//    SAM3's VETextEncoder uses a context of 32.
//  - transformers' slow CLIPTokenizer (FramePack's CLIP-L `tokenizer_2/`):
//    vocab.json + merges.txt, specials "<|startoftext|>"/"<|endoftext|>", pad
//    "<|endoftext|>" (CLIPTokenizer's default pad_token). The text is split on
//    the exact special tokens first (as PreTrainedTokenizer.tokenize does),
//    then each part gets ftfy.fix_text, whitespace clean and lower(); no
//    html.unescape. This is the path transformers takes when ftfy is
//    installed; its fallback without ftfy (BasicTokenizer) is not reproduced.
// Then both split with the regex (\s spelled out as Python regex's White_Space)
//   specials|'s|'t|'re|'ve|'m|'ll|'d|[\p{L}]+|[\p{N}]|[^\s\p{L}\p{N}]+
// (case-insensitive, PCRE2 with Unicode properties), byte-encode every match
// and merge it by BPE with "</w>" on its last symbol.
//
// ftfy.fix_text is reproduced only in its deterministic character mappings:
// unescape_html (skipped from the first line holding '<' on, as ftfy does),
// C1 controls read as Windows-1252, Latin ligatures, full-/half-width forms,
// curly quotes, line breaks, terminal escapes, control characters, NFC, all
// repeated to a fixed point per line. ftfy's fix_encoding (mojibake repair,
// "Ã©" -> "é") is a heuristic and is NOT reproduced: such text tokenizes as
// written (nor is ftfy's 1,000,000-character segment limit).
// Unicode tables come from ICU and PCRE2 (10.42 here: Unicode 14), the
// references' from Python's unicodedata and the `regex` package, which has
// its own, newer tables. Swept over every code point with the whole
// vocabulary (tools/clip_tokenizer_goldens.py --sweep): alone, all 1,112,064
// agree; between two letters ("a?a"), the 26,416 that regex 2026.11.19 knows
// as letters but Unicode 14 leaves unassigned (CJK Ext. H-J, Tangut and Egyptian
// additions, ...) split differently, the other 1,085,648 agree.
// Whitespace cleaning (\s+ -> " ", strip) is not done: the split regex never
// matches whitespace, so it cannot change the ids.
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

namespace flick::clip {

class ClipTokenizer {
 public:
  // SimpleTokenizer (SAM3, open_clip): bpe_simple_vocab_16e6.txt.gz. Like the
  // reference it reads lines 1..48894 of the file (line 0 is a header).
  static Expected<ClipTokenizer> load_simple(const std::string& merges_gz_path);
  // The same from the decompressed text; `name` is used in errors.
  static Expected<ClipTokenizer> from_simple_merges(std::string_view merges,
                                                    const std::string& name);

  // transformers CLIPTokenizer: vocab.json + merges.txt of a download, and
  // the padding token (CLIPTokenizer's default "<|endoftext|>").
  static Expected<ClipTokenizer> load_hf(const std::string& vocab_json_path,
                                         const std::string& merges_txt_path,
                                         const std::string& pad_token = "<|endoftext|>");
  static Expected<ClipTokenizer> from_hf(std::string_view vocab_json, std::string_view merges,
                                         const std::string& vocab_name,
                                         const std::string& merges_name,
                                         const std::string& pad_token = "<|endoftext|>");
  // A tokenizer folder (FramePack's `tokenizer_2/`): vocab.json, merges.txt,
  // and the pad token as from_pretrained picks it: tokenizer_config.json's
  // pad_token, overridden by special_tokens_map.json's only for a legacy
  // config (one without added_tokens_decoder); neither file: the default.
  static Expected<ClipTokenizer> load_hf_dir(const std::string& dir);

  ClipTokenizer(ClipTokenizer&&) noexcept;
  ClipTokenizer& operator=(ClipTokenizer&&) noexcept;
  ~ClipTokenizer();

  // Token ids of `text` (valid UTF-8, else an error naming the byte), without
  // start/end tokens.
  Expected<std::vector<int32_t>> encode(std::string_view text) const;
  // [sot] + ids + [eot], cut to `context_length` with the last id set to eot,
  // padded with pad_id() to exactly `context_length` (SAM3: 32; CLIP-L: 77).
  Expected<std::vector<int32_t>> encode_padded(std::string_view text, int32_t context_length) const;

  // Text cleaning alone (UTF-8 in and out), for tests.
  Expected<std::string> clean(std::string_view text) const;

  int32_t sot_id() const { return sot_id_; }
  int32_t eot_id() const { return eot_id_; }
  int32_t pad_id() const { return pad_id_; }
  int32_t size() const { return size_; }
  std::optional<int32_t> token_id(std::string_view token) const;  // byte-level text

 private:
  struct Regex;
  enum class Flavor { kSimple, kHf };

  ClipTokenizer();
  Status finish(const std::string& name);
  Status encode_cleaned(const std::string& text, std::vector<int32_t>& out) const;
  void encode_word(std::string_view bytes, std::vector<int32_t>& out) const;
  Expected<std::string> clean_part(std::u32string text) const;

  Flavor flavor_ = Flavor::kSimple;
  std::unordered_map<std::string, int32_t> vocab_;  // byte-level string -> id
  BpeMerges merges_;
  std::vector<int32_t> byte_ids_, byte_eow_ids_;  // id of each byte, alone / with </w>
  std::string sot_, eot_;
  int32_t sot_id_ = 0, eot_id_ = 0, pad_id_ = 0, size_ = 0;
  std::unique_ptr<Regex> split_;
};

}  // namespace flick::clip
