// The Unicode character classes GPT-2's pre-tokenization splits text by: letters (\p{L}),
// numbers (\p{N}) and white space (\s, the White_Space property). The letter and number
// tables are generated (scripts/gen_unicode_classes.py) so no regex library is needed.
#pragma once

namespace loom::data {

bool is_unicode_letter(char32_t cp);
bool is_unicode_number(char32_t cp);

// The White_Space property (PropList.txt): the characters a Unicode regex's \s matches.
inline bool is_unicode_space(char32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F ||
         cp == 0x3000;
}

}  // namespace loom::data
