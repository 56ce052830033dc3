#include "loom/plan/spec_files.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <toml++/toml.h>
#include <variant>
#include <vector>

#include "loom/error.hpp"

namespace loom::plan {

namespace {

// One key of a file: where it goes, whether it must be there, and the scale from the file's
// unit (GiB, TFLOP/s, GB/s, microseconds) to the spec's (bytes, FLOP/s, seconds).
struct Key {
  std::string name;
  std::variant<int64_t*, double*, std::string*> target;
  bool required = true;
  double scale = 1.0;
};

toml::table parse(const std::string& text, const std::string& origin) {
  try {
    return toml::parse(text, origin);
  } catch (const toml::parse_error& e) {
    const auto& where = e.source().begin;
    fail(origin, ":", where.line, ":", where.column, ": invalid TOML: ", e.description());
  }
}

std::string key_list(const std::vector<Key>& keys) {
  std::string out;
  for (const Key& k : keys) out += (out.empty() ? "" : ", ") + k.name;
  return out;
}

// Sets every key of `table` (named `where` in messages) from `keys`; sub-tables are left
// to the caller when listed in `tables`.
void read_keys(const toml::table& table, const std::vector<Key>& keys, const std::vector<std::string>& tables,
               const std::string& where) {
  for (const auto& [name, node] : table) {
    const std::string key(name.str());
    if (std::find(tables.begin(), tables.end(), key) != tables.end()) continue;
    auto it = std::find_if(keys.begin(), keys.end(), [&](const Key& k) { return k.name == key; });
    check(it != keys.end(), where, ": unknown key '", key, "'; known keys: ", key_list(keys));
    std::visit(
        [&](auto* p) {
          using T = std::remove_pointer_t<decltype(p)>;
          if constexpr (std::is_same_v<T, std::string>) {
            check(node.is_string(), where, ": ", key, " must be a string");
            *p = node.as_string()->get();
          } else {
            const bool number = node.is_integer() || (std::is_same_v<T, double> && node.is_floating_point());
            check(number, where, ": ", key, " must be a positive ", std::is_same_v<T, double> ? "number" : "integer");
            const double v = node.is_integer() ? static_cast<double>(node.as_integer()->get())
                                               : node.as_floating_point()->get();
            check(v > 0, where, ": ", key, " must be positive, got ", v);
            *p = static_cast<T>(v * it->scale);
          }
        },
        it->target);
  }
  for (const Key& k : keys)
    check(!k.required || table.contains(k.name), where, ": missing key '", k.name, "'");
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  check(in.good(), "cannot open '", path, "'");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

ModelSpec model_from_toml(const std::string& text, const std::string& origin) {
  ModelSpec m;
  m.name = std::filesystem::path(origin).stem().string();
  const std::vector<Key> keys = {{"name", &m.name, false}, {"layers", &m.layers}, {"hidden", &m.hidden},
                                 {"heads", &m.heads},      {"seq", &m.seq},       {"vocab", &m.vocab}};
  read_keys(parse(text, origin), keys, {}, origin);
  check(m.hidden % m.heads == 0, origin, ": hidden (", m.hidden, ") must be divisible by heads (", m.heads, ")");
  return m;
}

ClusterSpec cluster_from_toml(const std::string& text, const std::string& origin) {
  ClusterSpec c;
  c.name = std::filesystem::path(origin).stem().string();
  c.reserved_bytes = 0;
  c.compute_units = 0;
  double memory = 0, reserved = 0, bandwidth = 0;
  std::string precision = "mixed";
  const std::vector<Key> keys = {{"name", &c.name, false},
                                 {"devices_per_node", &c.devices_per_node},
                                 {"memory_gib", &memory},
                                 {"reserved_gib", &reserved, false},
                                 {"peak_tflops", &c.peak_flops, true, 1e12},
                                 {"gemm_peak_share", &c.gemm_peak_share},
                                 {"memory_bandwidth_gbs", &c.memory_bandwidth, true, 1e9},
                                 {"compute_units", &c.compute_units, false},
                                 {"tile_m", &c.tile_m, false},
                                 {"tile_n", &c.tile_n, false},
                                 {"precision", &precision, false}};
  const toml::table root = parse(text, origin);
  read_keys(root, keys, {"intra_node", "inter_node"}, origin);
  c.memory_bytes = static_cast<int64_t>(memory * (1 << 30));
  c.reserved_bytes = static_cast<int64_t>(reserved * (1 << 30));
  check(c.reserved_bytes < c.memory_bytes, origin, ": reserved_gib (", reserved, ") must be below memory_gib (", memory, ")");
  check(c.gemm_peak_share <= 1.0, origin, ": gemm_peak_share must be in (0, 1], got ", c.gemm_peak_share);
  check(precision == "mixed" || precision == "fp32", origin, ": precision must be \"mixed\" or \"fp32\", got \"",
        precision, "\"");
  c.precision = precision == "mixed" ? Precision::Mixed : Precision::Fp32;
  for (auto [table, link] : {std::pair{"intra_node", &c.intra_node}, {"inter_node", &c.inter_node}}) {
    const std::string where = origin + ": [" + table + "]";
    check(root.contains(table), origin, ": missing table [", table, "] (latency_us, bandwidth_gbs)");
    check(root[table].is_table(), where, " must be a table");
    double latency = 0;
    read_keys(*root[table].as_table(), {{"latency_us", &latency, true, 1e-6}, {"bandwidth_gbs", &bandwidth, true, 1e9}},
              {}, where);
    *link = LinkCost{latency, 1.0 / bandwidth};
  }
  return c;
}

ModelSpec model_from_file(const std::string& path) { return model_from_toml(read_file(path), path); }
ClusterSpec cluster_from_file(const std::string& path) { return cluster_from_toml(read_file(path), path); }

}  // namespace loom::plan
