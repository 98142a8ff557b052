#include "models/hunyuan/prompt_template.h"

#include <string>

namespace flick::hunyuan {

// The five points are on one line, each right after the previous period
// (errata 5): the reference concatenates string literals without spaces.
const std::string_view kPromptTemplate =
    "<|start_header_id|>system<|end_header_id|>\n\nDescribe the video by detailing the following "
    "aspects: 1. The main content and theme of the video.2. The color, shape, size, texture, "
    "quantity, text, and spatial relationships of the objects.3. Actions, events, behaviors "
    "temporal relationships, physical movement changes of the objects.4. background environment, "
    "light, style and atmosphere.5. camera angles, movements, and transitions used in the "
    "video:<|eot_id|><|start_header_id|>user<|end_header_id|>\n\n{}<|eot_id|>";

Expected<LlamaPrompt> llama_prompt(const llama::LlamaTokenizer& tokenizer,
                                   std::string_view prompt) {
  const size_t slot = kPromptTemplate.find("{}");
  const std::string_view before = kPromptTemplate.substr(0, slot);
  const std::string_view after = kPromptTemplate.substr(slot + 2);
  FLICK_ASSIGN_OR_RETURN(std::vector<int32_t> head, tokenizer.encode(before, true));
  std::string text(before);
  text.append(prompt).append(after);
  Expected<std::vector<int32_t>> ids = tokenizer.encode(text, true);
  if (!ids.ok()) return ids.status().with_context("prompt");
  LlamaPrompt p;
  p.crop_start = static_cast<int64_t>(head.size());
  p.ids = std::move(*ids);
  if (static_cast<int64_t>(p.ids.size()) > p.crop_start + kMaxPromptTokens)
    p.ids.resize(static_cast<size_t>(p.crop_start + kMaxPromptTokens));
  return p;
}

}  // namespace flick::hunyuan
