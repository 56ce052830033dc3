// TOML text in, a table out, without undefined behaviour on hostile text. Debian 12's toml++
// (3.3) reaches __builtin_unreachable() when it asks whether a non-ASCII character it meets
// between tokens is whitespace (code points U+00A1-U+0499, U+FC16-U+FEFE: `dp = 2é`), and
// while it reads a broken value it looks ahead at the rest of the line, quotes or not
// (`dp =-e[="""|aϚ`), so no scan of our own can tell in advance which characters it will ask
// about. Instead the text is parsed first with every non-ASCII character replaced by '!',
// which toml++ accepts only inside strings and comments: when that copy parses, every
// non-ASCII character sits where the parser reads it as string or comment content, and the
// real text is parsed; when it does not, its error (same line, same column) is the user's.
#pragma once

#include <string>
#include <toml++/toml.h>

namespace loom::data {

// Throws loom::Error "<origin>:<line>:<column>: invalid TOML: ..." for text that is not
// TOML, not UTF-8, or has a non-ASCII character outside a quoted string or comment.
toml::table parse_toml(const std::string& text, const std::string& origin);

}  // namespace loom::data
