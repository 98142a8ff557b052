#include "models/llama/llama_tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <array>
#include <nlohmann/json.hpp>

#include "models/bpe_merge.h"
#include "runtime/file_util.h"

namespace flick::llama {
namespace {

using Json = nlohmann::json;

// tokenizer.json of a LLaMA-3 download is 9-17 MB; refuse absurd files early.
constexpr int64_t kMaxTokenizerBytes = int64_t{256} << 20;

// GPT-2's bytes_to_unicode(): printable bytes map to themselves, the others
// to U+0100 onwards in byte order. Returns byte -> code point.
std::array<uint32_t, 256> byte_level_alphabet() {
  std::array<uint32_t, 256> cp{};
  uint32_t next = 256;
  for (uint32_t b = 0; b < 256; ++b) {
    const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
    cp[b] = printable ? b : next++;
  }
  return cp;
}

// Length of the valid UTF-8 sequence at s[i] (1-4), or 0 (overlong forms,
// surrogates and code points above U+10FFFF are invalid, as in Rust's str).
size_t utf8_length(std::string_view s, size_t i, uint32_t* cp) {
  const auto b = [&](size_t k) { return static_cast<uint8_t>(s[i + k]); };
  const uint8_t c = b(0);
  size_t n;
  uint32_t v, min;
  if (c < 0x80) {
    *cp = c;
    return 1;
  } else if ((c & 0xE0) == 0xC0) {
    n = 2, v = c & 0x1F, min = 0x80;
  } else if ((c & 0xF0) == 0xE0) {
    n = 3, v = c & 0x0F, min = 0x800;
  } else if ((c & 0xF8) == 0xF0) {
    n = 4, v = c & 0x07, min = 0x10000;
  } else {
    return 0;
  }
  if (i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    if ((b(k) & 0xC0) != 0x80) return 0;
    v = (v << 6) | (b(k) & 0x3F);
  }
  if (v < min || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return 0;
  *cp = v;
  return n;
}

// Decodes a ByteLevel vocabulary string ("Ġthe") back to its raw bytes.
std::optional<std::string> byte_level_decode(std::string_view s,
                                             const std::array<int16_t, 324>& byte_of) {
  std::string out;
  for (size_t i = 0; i < s.size();) {
    uint32_t cp = 0;
    const size_t n = utf8_length(s, i, &cp);
    if (n == 0 || cp >= byte_of.size() || byte_of[cp] < 0) return std::nullopt;
    out.push_back(static_cast<char>(byte_of[cp]));
    i += n;
  }
  return out;
}

std::string type_of(const Json& j) { return j.is_null() ? "null" : j.type_name(); }

// A JSON string member or an error naming the key.
Expected<std::string> string_at(const Json& j, const char* key, const std::string& where) {
  if (!j.is_object() || !j.contains(key) || !j[key].is_string())
    return invalid_input(where + "." + key + ": expected a string");
  return j[key].get<std::string>();
}

bool flag(const Json& j, const char* key) {
  return j.is_object() && j.contains(key) && j[key].is_boolean() && j[key].get<bool>();
}

}  // namespace

struct LlamaTokenizer::Regex {
  pcre2_code* code = nullptr;
  ~Regex() { pcre2_code_free(code); }
};

LlamaTokenizer::LlamaTokenizer() = default;
LlamaTokenizer::LlamaTokenizer(LlamaTokenizer&&) noexcept = default;
LlamaTokenizer& LlamaTokenizer::operator=(LlamaTokenizer&&) noexcept = default;
LlamaTokenizer::~LlamaTokenizer() = default;

Expected<LlamaTokenizer> LlamaTokenizer::load(const std::string& path) {
  FLICK_ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, read_file(path, kMaxTokenizerBytes));
  return from_json(std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()),
                   path);
}

Expected<LlamaTokenizer> LlamaTokenizer::from_json(std::string_view text, const std::string& name) {
  const Json doc = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object())
    return invalid_input(name + ": not a JSON object (a tokenizer.json)");
  auto fail = [&](const std::string& m) { return invalid_input(name + ": " + m); };
  LlamaTokenizer t;

  // Normalization would change the text before splitting; LLaMA-3 has none.
  if (doc.contains("normalizer") && !doc["normalizer"].is_null())
    return fail("normalizer: unsupported (LLaMA-3 tokenizers have none)");

  const Json& model = doc.contains("model") ? doc["model"] : Json();
  if (!model.is_object() || model.value("type", "") != "BPE")
    return fail("model.type: expected \"BPE\"");
  if (flag(model, "byte_fallback")) return fail("model.byte_fallback: unsupported");
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix", "dropout"})
    if (model.contains(key) && !model[key].is_null())
      return fail(std::string("model.") + key + ": unsupported (expected null)");
  t.ignore_merges_ = flag(model, "ignore_merges");

  // Vocabulary: ByteLevel strings -> raw bytes.
  const std::array<uint32_t, 256> alphabet = byte_level_alphabet();
  std::array<int16_t, 324> byte_of;
  byte_of.fill(-1);
  for (int b = 0; b < 256; ++b) byte_of[alphabet[b]] = static_cast<int16_t>(b);
  if (!model.contains("vocab") || !model["vocab"].is_object())
    return fail("model.vocab: expected an object of token -> id");
  int32_t max_id = -1;
  for (const auto& [token, id] : model["vocab"].items()) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= (1 << 30))
      return fail("model.vocab[\"" + token + "\"]: expected a non-negative id, got " + type_of(id));
    std::optional<std::string> raw = byte_level_decode(token, byte_of);
    if (!raw) return fail("model.vocab[\"" + token + "\"]: not a byte-level token");
    const auto v = static_cast<int32_t>(id.get<int64_t>());
    t.vocab_[*raw] = v;
    max_id = std::max(max_id, v);
  }
  t.byte_ids_.resize(256);
  for (int b = 0; b < 256; ++b) {
    auto it = t.vocab_.find(std::string(1, static_cast<char>(b)));
    if (it == t.vocab_.end())
      return fail("model.vocab lacks the token of byte " + std::to_string(b) +
                  " (a byte-level vocabulary has all 256)");
    t.byte_ids_[b] = it->second;
  }

  // Merges: "a b" (older files) or ["a", "b"], in rank order.
  if (!model.contains("merges") || !model["merges"].is_array())
    return fail("model.merges: expected an array");
  const Json& merges = model["merges"];
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const Json& m = merges[rank];
    std::string left, right;
    if (m.is_string()) {
      const std::string s = m.get<std::string>();
      const size_t sp = s.find(' ');
      if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos)
        return fail("model.merges[" + std::to_string(rank) + "]: expected \"left right\"");
      left = s.substr(0, sp), right = s.substr(sp + 1);
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      left = m[0].get<std::string>(), right = m[1].get<std::string>();
    } else {
      return fail("model.merges[" + std::to_string(rank) + "]: expected a pair of strings");
    }
    const auto l = byte_level_decode(left, byte_of), r = byte_level_decode(right, byte_of);
    const auto li = l ? t.vocab_.find(*l) : t.vocab_.end();
    const auto ri = r ? t.vocab_.find(*r) : t.vocab_.end();
    const auto mi = l && r ? t.vocab_.find(*l + *r) : t.vocab_.end();
    if (li == t.vocab_.end() || ri == t.vocab_.end() || mi == t.vocab_.end())
      return fail("model.merges[" + std::to_string(rank) + "] (\"" + left + "\", \"" + right +
                  "\"): a part or the merged token is not in model.vocab");
    const uint64_t key = bpe_pair_key(li->second, ri->second);
    t.merges_.emplace(key, BpeMerge{static_cast<int32_t>(rank), mi->second});  // first rank wins
  }

  // Added tokens are matched in the raw text before anything else.
  if (doc.contains("added_tokens") && !doc["added_tokens"].is_null()) {
    if (!doc["added_tokens"].is_array()) return fail("added_tokens: expected an array");
    for (size_t i = 0; i < doc["added_tokens"].size(); ++i) {
      const Json& a = doc["added_tokens"][i];
      const std::string where = "added_tokens[" + std::to_string(i) + "]";
      FLICK_ASSIGN_OR_RETURN(std::string content, string_at(a, "content", where));
      if (!a.contains("id") || !a["id"].is_number_integer() || a["id"].get<int64_t>() < 0 ||
          a["id"].get<int64_t>() >= (1 << 30))
        return fail(where + ".id: expected a non-negative integer");
      for (const char* key : {"lstrip", "rstrip", "single_word"})
        if (flag(a, key)) return fail(where + "." + key + ": unsupported (expected false)");
      if (flag(a, "normalized") && !flag(a, "special"))
        return fail(where + ".normalized: unsupported for a non-special token");
      if (content.empty()) return fail(where + ".content: empty");
      const auto id = static_cast<int32_t>(a["id"].get<int64_t>());
      t.added_.push_back({std::move(content), id});
      max_id = std::max(max_id, id);
    }
    // Longest first, so the first match at a position is the longest one.
    std::stable_sort(t.added_.begin(), t.added_.end(), [](const auto& a, const auto& b) {
      return a.content.size() > b.content.size();
    });
  }
  t.added_first_byte_.assign(256, false);
  for (const AddedToken& a : t.added_)
    t.added_first_byte_[static_cast<uint8_t>(a.content[0])] = true;
  t.size_ = max_id + 1;

  // Pre-tokenizer: Sequence[Split(Regex, Isolated), ByteLevel(no prefix space, no regex)].
  const Json& pre = doc.contains("pre_tokenizer") ? doc["pre_tokenizer"] : Json();
  const bool seq = pre.is_object() && pre.value("type", "") == "Sequence" &&
                   pre.contains("pretokenizers") && pre["pretokenizers"].is_array() &&
                   pre["pretokenizers"].size() == 2;
  if (!seq)
    return fail("pre_tokenizer: expected a Sequence of Split and ByteLevel (the LLaMA-3 layout)");
  const Json& split = pre["pretokenizers"][0];
  const Json& byte_level = pre["pretokenizers"][1];
  if (split.value("type", "") != "Split" || !split.contains("pattern") ||
      !split["pattern"].is_object() || !split["pattern"].contains("Regex") ||
      !split["pattern"]["Regex"].is_string() || split.value("behavior", "") != "Isolated" ||
      flag(split, "invert"))
    return fail(
        "pre_tokenizer.pretokenizers[0]: expected a Split on a Regex, Isolated, not "
        "inverted");
  if (byte_level.value("type", "") != "ByteLevel" || flag(byte_level, "add_prefix_space") ||
      flag(byte_level, "use_regex"))
    return fail(
        "pre_tokenizer.pretokenizers[1]: expected ByteLevel without prefix space or "
        "regex");
  const std::string pattern = split["pattern"]["Regex"].get<std::string>();
  int err = 0;
  PCRE2_SIZE err_offset = 0;
  t.split_ = std::make_unique<Regex>();
  t.split_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                 PCRE2_UTF | PCRE2_UCP, &err, &err_offset, nullptr);
  if (!t.split_->code) {
    std::array<PCRE2_UCHAR, 256> msg{};
    pcre2_get_error_message(err, msg.data(), msg.size());
    return fail("pre_tokenizer Split regex at offset " + std::to_string(err_offset) + ": " +
                reinterpret_cast<const char*>(msg.data()));
  }
  pcre2_jit_compile(t.split_->code, PCRE2_JIT_COMPLETE);  // interpreted if JIT is unavailable

  // Post-processor: the special tokens of TemplateProcessing's "single".
  const Json* tp = nullptr;
  const Json& post = doc.contains("post_processor") ? doc["post_processor"] : Json();
  if (post.is_object() && post.value("type", "") == "TemplateProcessing") {
    tp = &post;
  } else if (post.is_object() && post.value("type", "") == "Sequence" &&
             post.contains("processors") && post["processors"].is_array()) {
    for (const Json& p : post["processors"]) {
      const std::string type = p.is_object() ? p.value("type", "") : "";
      if (type == "TemplateProcessing") {
        tp = &p;
      } else if (type != "ByteLevel") {  // ByteLevel only adjusts offsets
        return fail("post_processor: unsupported processor \"" + type + "\"");
      }
    }
  } else if (!post.is_null() && !(post.is_object() && post.value("type", "") == "ByteLevel")) {
    return fail("post_processor: unsupported (expected TemplateProcessing)");
  }
  if (tp) {
    if (!tp->contains("single") || !(*tp)["single"].is_array())
      return fail("post_processor.single: expected an array");
    bool seen_sequence = false;
    for (const Json& item : (*tp)["single"]) {
      if (item.is_object() && item.contains("Sequence")) {
        seen_sequence = true;
        continue;
      }
      if (!item.is_object() || !item.contains("SpecialToken") || !item["SpecialToken"].is_object())
        return fail("post_processor.single: expected SpecialToken or Sequence items");
      FLICK_ASSIGN_OR_RETURN(std::string sid,
                             string_at(item["SpecialToken"], "id", "post_processor.single"));
      const Json& specials = tp->contains("special_tokens") ? (*tp)["special_tokens"] : Json();
      if (!specials.is_object() || !specials.contains(sid) || !specials[sid].contains("ids") ||
          !specials[sid]["ids"].is_array())
        return fail("post_processor.special_tokens lacks \"" + sid + "\"");
      for (const Json& id : specials[sid]["ids"]) {
        if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= t.size_)
          return fail("post_processor.special_tokens[\"" + sid + "\"].ids: out of range");
        (seen_sequence ? t.suffix_ : t.prefix_).push_back(static_cast<int32_t>(id.get<int64_t>()));
      }
    }
  }
  return t;
}

std::optional<int32_t> LlamaTokenizer::token_id(std::string_view token) const {
  for (const AddedToken& a : added_)
    if (a.content == token) return a.id;
  if (auto it = vocab_.find(std::string(token)); it != vocab_.end()) return it->second;
  return std::nullopt;
}

const LlamaTokenizer::AddedToken* LlamaTokenizer::added_at(std::string_view text,
                                                           size_t pos) const {
  for (const AddedToken& a : added_)
    if (text.compare(pos, a.content.size(), a.content) == 0) return &a;
  return nullptr;
}

// BPE over one pre-tokenized piece, as tokenizers' Word::merge_all: always
// merge the lowest-ranked adjacent pair, the leftmost among equals (a heap,
// so a long piece costs n log n, not n^2).
void LlamaTokenizer::encode_piece(std::string_view bytes, std::vector<int32_t>& out) const {
  if (bytes.empty()) return;
  if (ignore_merges_) {
    if (auto it = vocab_.find(std::string(bytes)); it != vocab_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  std::vector<int32_t> ids(bytes.size());
  for (size_t i = 0; i < bytes.size(); ++i) ids[i] = byte_ids_[static_cast<uint8_t>(bytes[i])];
  bpe_merge(ids, merges_, out);
}

// Split (Isolated) on the regex: every match and every gap between matches
// is a piece. The regex sees this segment only, as tokenizers applies the
// pre-tokenizer to each span between added tokens.
Status LlamaTokenizer::encode_segment(std::string_view text, std::vector<int32_t>& out) const {
  std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> md(
      pcre2_match_data_create_from_pattern(split_->code, nullptr), &pcre2_match_data_free);
  if (!md) return internal_error("tokenizer: out of memory");
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t pos = 0;
  while (pos < text.size()) {
    const int rc =
        pcre2_match(split_->code, subject, text.size(), pos, PCRE2_NO_UTF_CHECK, md.get(), nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      std::array<PCRE2_UCHAR, 256> msg{};
      pcre2_get_error_message(rc, msg.data(), msg.size());
      return internal_error(std::string("tokenizer regex: ") +
                            reinterpret_cast<const char*>(msg.data()));
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md.get());
    size_t begin = ov[0], end = ov[1];
    if (end == begin) {  // an empty match: step one character, it joins the gap
      uint32_t cp;
      end = begin + std::max<size_t>(1, utf8_length(text, begin, &cp));
      encode_piece(text.substr(pos, end - pos), out);
      pos = end;
      continue;
    }
    encode_piece(text.substr(pos, begin - pos), out);  // the gap before, if any
    encode_piece(text.substr(begin, end - begin), out);
    pos = end;
  }
  encode_piece(text.substr(pos), out);
  return ok_status();
}

Expected<std::vector<int32_t>> LlamaTokenizer::encode(std::string_view text,
                                                      bool add_special) const {
  for (size_t i = 0; i < text.size();) {
    uint32_t cp;
    const size_t n = utf8_length(text, i, &cp);
    if (n == 0) return invalid_input("text is not valid UTF-8 at byte " + std::to_string(i));
    i += n;
  }
  std::vector<int32_t> ids;
  if (add_special) ids = prefix_;
  size_t start = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    if (!added_first_byte_[static_cast<uint8_t>(text[i])]) continue;
    const AddedToken* a = added_at(text, i);
    if (!a) continue;
    FLICK_TRY(encode_segment(text.substr(start, i - start), ids));
    ids.push_back(a->id);
    i += a->content.size() - 1;
    start = i + 1;
  }
  FLICK_TRY(encode_segment(text.substr(start), ids));
  if (add_special) ids.insert(ids.end(), suffix_.begin(), suffix_.end());
  return ids;
}

}  // namespace flick::llama
