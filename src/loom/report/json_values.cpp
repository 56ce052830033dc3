#include "loom/report/json_values.hpp"

#include <cmath>

namespace loom::report {

using nlohmann::json;

std::string brief(const std::string& text, size_t max) {
  if (text.size() <= max) return text;
  size_t cut = max;
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;  // not inside a character
  return text.substr(0, cut) + "...";
}

std::string describe(const json& value) {
  if (value.is_object()) return "an object";
  if (value.is_array()) return value.empty() ? "an empty array" : "an array";
  if (value.is_string()) {
    const auto& s = value.get_ref<const std::string&>();
    constexpr size_t kMax = 40;
    if (s.size() <= kMax) return value.dump(-1, ' ', false, json::error_handler_t::replace);
    return json(brief(s, kMax)).dump(-1, ' ', false, json::error_handler_t::replace) + " (a string of " +
           std::to_string(s.size()) + " bytes)";
  }
  return value.dump();  // a number, true, false or null
}

int64_t integer_field(const json& value, int64_t lo, int64_t hi, const std::string& where, const std::string& name) {
  bool ok = false;
  if (value.is_number_unsigned()) {  // a non-negative integer (is_number_integer holds too)
    const uint64_t v = value.get<uint64_t>();
    ok = hi >= 0 && v <= static_cast<uint64_t>(hi) && static_cast<int64_t>(v) >= lo;
  } else if (value.is_number_integer()) {
    const int64_t v = value.get<int64_t>();
    ok = v >= lo && v <= hi;
  } else if (value.is_number_float()) {  // lo and hi within 2^53, where a double holds every integer
    const double v = value.get<double>();
    ok = v == std::floor(v) && v >= static_cast<double>(lo) && v <= static_cast<double>(hi);
  }
  if (!ok)
    throw FieldError(where + ": field '" + name + "' must be an integer from " + std::to_string(lo) + " to " +
                     std::to_string(hi) + ", got " + describe(value));
  return value.is_number_float() ? static_cast<int64_t>(value.get<double>()) : value.get<int64_t>();
}

}  // namespace loom::report
