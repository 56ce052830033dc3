// A run file's JSON values as the report meets them: described in a message without dumping
// a value nested 100,000 deep, and integer fields (ranks, process and thread ids, micro-batch
// and chunk indices) checked before they are converted, since converting a double such as
// 1e300 to an int is undefined.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "loom/error.hpp"

namespace loom::report {

// A JSON value for a message: scalars as JSON (a long string cut, with its length), arrays and
// objects by kind only; dumping a deeply nested value would recurse off the stack.
std::string describe(const nlohmann::json& value);

// text cut to at most max bytes (on a UTF-8 character boundary), "..." marking the cut.
std::string brief(const std::string& text, size_t max = 200);

// A field of a run's JSON file that is not what the trainer writes; its message names where in
// the file ("traceEvents[17]: field 'pid' ..."), and the report adds the file.
class FieldError : public Error {
 public:
  using Error::Error;
};

// value as an integer from lo to hi (an integral number: 3 or 3.0); FieldError "<where>: field
// '<name>' must be an integer from lo to hi, got <value>" otherwise.
int64_t integer_field(const nlohmann::json& value, int64_t lo, int64_t hi, const std::string& where, const std::string& name);

}  // namespace loom::report
