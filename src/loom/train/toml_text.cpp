#include "loom/train/toml_text.hpp"

#include "loom/error.hpp"

namespace loom::train {

void check_toml_text(const std::string& text, const std::string& origin) {
  enum class In { Code, Comment, Basic, Literal, MultiBasic, MultiLiteral } in = In::Code;
  int64_t line = 1, column = 0;
  // A quote opens a string only where TOML expects a key or a value: after '=', at the start
  // of a line, after '.' or ',', or after a '[' that itself stood there (an array or a table
  // header); elsewhere (`2"é`, `-en["é`) the parser reads on as code.
  bool last_opens = true;  // whether a quote after the last code character (not a space or tab) opens a string
  // A second '=' outside brackets on one line (`dp =-e=["é`) is not TOML: no string opens
  // after it on that line, since the parser no longer reads a value there.
  bool line_has_value = false, line_broken = false;
  int depth = 0;  // '[' and '{' open on this line
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    ++column;
    const bool may_open = last_opens;
    auto starts = [&](const char* s) { return text.compare(i, std::char_traits<char>::length(s), s) == 0; };
    switch (in) {
      case In::Code:
        if (c == '#') in = In::Comment;
        else if (may_open && starts("\"\"\"")) in = In::MultiBasic, i += 2, column += 2;
        else if (may_open && starts("'''")) in = In::MultiLiteral, i += 2, column += 2;
        else if (may_open && c == '"') in = In::Basic;
        else if (may_open && c == '\'') in = In::Literal;
        else if (static_cast<unsigned char>(c) >= 0x80)
          fail(origin, ":", line, ":", column, ": invalid TOML: a non-ASCII character outside a quoted string or "
               "comment (keys and values other than strings are ASCII)");
        break;
      case In::Comment:
        if (c == '\n') in = In::Code;
        break;
      case In::Basic:
        if (c == '\\' && i + 1 < text.size()) ++i, ++column;
        else if (c == '"' || c == '\n') in = In::Code;  // an unterminated string: the parser says so
        break;
      case In::Literal:
        if (c == '\'' || c == '\n') in = In::Code;
        break;
      case In::MultiBasic:
        if (c == '\\' && i + 1 < text.size()) ++i, ++column;
        else if (starts("\"\"\"")) in = In::Code, i += 2, column += 2;
        break;
      case In::MultiLiteral:
        if (starts("'''")) in = In::Code, i += 2, column += 2;
        break;
    }
    if (in == In::Code && (c == '[' || c == '{')) ++depth;
    if (in == In::Code && (c == ']' || c == '}')) --depth;
    if (in == In::Code && c == '=' && depth <= 0) {
      if (line_has_value) line_broken = true;
      line_has_value = true;
    }
    if (in == In::Code && c != ' ' && c != '\t') {
      last_opens = c == '[' ? may_open : (c == '=' || c == '\n' || c == '.' || c == ',');
    }
    if (in != In::Code && in != In::Comment) last_opens = false;  // a closed string is a value: no string may follow
    if (line_broken) last_opens = false;
    if (c == '\n') line += 1, column = 0, last_opens = true, line_has_value = line_broken = false, depth = 0;
  }
}

}  // namespace loom::train
