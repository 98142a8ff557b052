// Data tables of the CLIP tokenizer's text cleaning (html.unescape and ftfy's
// unescape_html), generated from Python by tools/gen_clip_html_entities.py
// into clip_html_entities.cpp so that no Python is needed at run time.
#pragma once

#include <cstddef>
#include <cstdint>

namespace flick::clip::detail {

struct HtmlEntity {
  const char* name;   // without the leading '&'; html5 names may lack the ';'
  const char* value;  // UTF-8
};
struct CharRef {
  uint32_t number;
  uint32_t code_point;
};

extern const HtmlEntity kHtml5Entities[];  // sorted by name (strcmp)
extern const size_t kHtml5EntityCount;
extern const HtmlEntity kFtfyUpperEntities[];  // sorted by name (strcmp)
extern const size_t kFtfyUpperEntityCount;
extern const CharRef kHtmlInvalidCharrefs[];  // sorted by number
extern const size_t kHtmlInvalidCharrefCount;
extern const uint32_t kHtmlInvalidCodepoints[];  // sorted
extern const size_t kHtmlInvalidCodepointCount;

}  // namespace flick::clip::detail
