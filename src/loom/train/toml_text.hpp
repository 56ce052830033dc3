// A guard in front of the TOML parser. Debian 12's toml++ (3.3) reaches
// __builtin_unreachable() when it asks whether a non-ASCII character between tokens is
// whitespace (code points U+00A1-U+0499 and others: `dp = 2é`), which is undefined behaviour
// in a release build; coverage-guided fuzzing found it. Loom's keys and numbers are ASCII,
// so a non-ASCII character is allowed only inside a quoted string or a comment, and
// anywhere else is an error naming its line and column before the parser sees the text.
#pragma once

#include <string>

namespace loom::train {

// Throws loom::Error "<origin>:<line>:<column>: ..." for a non-ASCII byte outside strings
// and comments.
void check_toml_text(const std::string& text, const std::string& origin);

}  // namespace loom::train
