// HunyuanVideo's prompt template for its LLaMA text encoder: diffusers'
// DEFAULT_PROMPT_TEMPLATE as FramePack's encode_prompt_conds uses it
// (diffusers_helper/hunyuan.py:8-58, with transformers 4.46.2):
//
//   ids = tokenizer(template.format(prompt), max_length=crop_start + 256,
//                   truncation=True)          // BOS first, cut at 351 ids
//   llama_vec = text_encoder(ids).hidden_states[-3][:, crop_start:]
//
// so the text conditioning is the prompt's tokens plus the trailing
// <|eot_id|> (dropped when truncation cuts the prompt, errata 5 of the spec).
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "models/llama/llama_tokenizer.h"
#include "runtime/status.h"

namespace flick::hunyuan {

// The template with "{}" where the prompt goes.
extern const std::string_view kPromptTemplate;
// The reference keeps at most this many tokens after crop_start.
inline constexpr int64_t kMaxPromptTokens = 256;

struct LlamaPrompt {
  std::vector<int32_t> ids;  // unpadded, BOS first, at most crop_start + 256
  int64_t crop_start = 0;    // ids before the prompt: 95 with LLaMA-3's vocabulary
};

// Tokenizes the templated prompt. crop_start is counted from the template
// (BOS + the template before "{}"); the reference hard-codes 95, which is that
// count for the LLaMA-3 vocabulary HunyuanVideo ships.
Expected<LlamaPrompt> llama_prompt(const llama::LlamaTokenizer& tokenizer, std::string_view prompt);

}  // namespace flick::hunyuan
