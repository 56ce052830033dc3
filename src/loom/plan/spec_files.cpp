#include "loom/plan/spec_files.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <variant>
#include <vector>

#include "loom/data/input_file.hpp"
#include "loom/data/toml_text.hpp"
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
            check(std::isfinite(v) && v > 0, where, ": ", key, " must be positive, got ", v);
            const double scaled = v * it->scale;
            if constexpr (std::is_integral_v<T>) check(scaled < 9e18, where, ": ", key, " is too large, got ", v);
            *p = static_cast<T>(scaled);
          }
        },
        it->target);
  }
  for (const Key& k : keys)
    check(!k.required || table.contains(k.name), where, ": missing key '", k.name, "'");
}

std::string read_file(const std::string& path) {
  data::check_input_file(path, "description file", data::kMaxConfigBytes);  // a FIFO would block, a directory read as empty
  std::ifstream in(path);
  check(in.good(), "cannot open '", path, "'");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// [[gemm_rates]] or [[attention_rates]]: one table per measured shape, with m, n, k, an
// optional batch (1) and the forward and backward rates in GFLOP/s.
std::vector<MeasuredRate> read_rates(const toml::table& root, const std::string& name, const std::string& origin) {
  std::vector<MeasuredRate> rates;
  if (!root.contains(name)) return rates;
  check(root[name].is_array_of_tables(), origin, ": ", name, " must be an array of tables ([[", name, "]])");
  int index = 0;
  for (const toml::node& node : *root[name].as_array()) {
    MeasuredRate r;
    read_keys(*node.as_table(),
              {{"m", &r.shape.m}, {"n", &r.shape.n}, {"k", &r.shape.k}, {"batch", &r.shape.batch, false},
               {"forward_gflops", &r.forward, true, 1e9}, {"backward_gflops", &r.backward, true, 1e9}},
              {}, origin + ": [[" + name + "]] #" + std::to_string(++index));
    rates.push_back(r);
  }
  return rates;
}

// A TOML basic string: quotes, backslashes and control characters escaped.
std::string quoted(const std::string& text) {
  std::string out = "\"";
  for (const char ch : text) {
    const auto u = static_cast<unsigned char>(ch);
    if (ch == '"' || ch == '\\') {
      out += '\\';
      out += ch;
    } else if (u < 0x20 || u == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", u);
      out += buf;
    } else {
      out += ch;
    }
  }
  return out + "\"";
}

// Shortest text that reads back as the same double.
std::string number(double v) {
  char buf[32];
  for (int digits = 6; digits <= 17; ++digits) {
    std::snprintf(buf, sizeof buf, "%.*g", digits, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  return buf;
}

void write_rates(std::ostringstream& out, const std::string& name, const std::vector<MeasuredRate>& rates) {
  for (const MeasuredRate& r : rates)
    out << "\n[[" << name << "]]\nm = " << r.shape.m << "\nn = " << r.shape.n << "\nk = " << r.shape.k
        << "\nbatch = " << r.shape.batch << "\nforward_gflops = " << number(r.forward / 1e9)
        << "\nbackward_gflops = " << number(r.backward / 1e9) << "\n";
}

}  // namespace

ModelSpec model_from_toml(const std::string& text, const std::string& origin) {
  ModelSpec m;
  m.name = std::filesystem::path(origin).stem().string();
  const std::vector<Key> keys = {{"name", &m.name, false}, {"layers", &m.layers}, {"hidden", &m.hidden},
                                 {"heads", &m.heads},      {"seq", &m.seq},       {"vocab", &m.vocab}};
  read_keys(data::parse_toml(text, origin), keys, {}, origin);
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
                                 {"precision", &precision, false},
                                 {"cores_per_node", &c.cores_per_node, false},
                                 {"alone_core_speed", &c.alone_core_speed, false},
                                 {"shared_core_speed", &c.shared_core_speed, false},
                                 {"transfer_core_share", &c.transfer_core_share, false},
                                 {"gelu_forward_ns", &c.gelu_forward_s, false, 1e-9},
                                 {"gelu_backward_ns", &c.gelu_backward_s, false, 1e-9}};
  const toml::table root = data::parse_toml(text, origin);
  read_keys(root, keys, {"intra_node", "inter_node", "gemm_rates", "attention_rates"}, origin);
  for (auto [key, share] : {std::pair{"alone_core_speed", c.alone_core_speed}, {"shared_core_speed", c.shared_core_speed},
                            {"transfer_core_share", c.transfer_core_share}})
    check(share <= 1.0, origin, ": ", key, " must be in (0, 1], got ", share);
  c.gemm_rates = read_rates(root, "gemm_rates", origin);
  c.attention_rates = read_rates(root, "attention_rates", origin);
  check(memory < 8e9 && reserved < 8e9, origin, ": memory_gib and reserved_gib must be below 8e9, got ", memory, " and ",
        reserved);
  c.memory_bytes = static_cast<int64_t>(memory * (1 << 30));
  c.reserved_bytes = static_cast<int64_t>(reserved * (1 << 30));
  check(c.reserved_bytes < c.memory_bytes, origin, ": reserved_gib (", reserved, ") must be below memory_gib (", memory, ")");
  check(c.gemm_peak_share <= 1.0, origin, ": gemm_peak_share must be in (0, 1], got ", c.gemm_peak_share);
  check(precision == "mixed" || precision == "fp32" || precision == "bf16", origin,
        ": precision must be \"mixed\", \"fp32\" or \"bf16\", got \"", precision, "\"");
  c.precision = parse_plan_precision(precision);
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

std::string cluster_to_toml(const ClusterSpec& c) {
  std::ostringstream out;
  out << "name = " << quoted(c.name) << "\ndevices_per_node = " << c.devices_per_node
      << "\nmemory_gib = " << number(static_cast<double>(c.memory_bytes) / (1 << 30));
  if (c.reserved_bytes > 0) out << "\nreserved_gib = " << number(static_cast<double>(c.reserved_bytes) / (1 << 30));
  out << "\npeak_tflops = " << number(c.peak_flops / 1e12) << "\ngemm_peak_share = " << number(c.gemm_peak_share)
      << "\nmemory_bandwidth_gbs = " << number(c.memory_bandwidth / 1e9);
  if (c.compute_units > 0)
    out << "\ncompute_units = " << c.compute_units << "\ntile_m = " << c.tile_m << "\ntile_n = " << c.tile_n;
  out << "\nprecision = \"" << plan_precision_name(c.precision) << "\"";
  if (c.cores_per_node > 0) out << "\ncores_per_node = " << c.cores_per_node;
  out << "\nalone_core_speed = " << number(c.alone_core_speed) << "\nshared_core_speed = " << number(c.shared_core_speed);
  if (c.transfer_core_share < 1.0) out << "\ntransfer_core_share = " << number(c.transfer_core_share);
  if (c.gelu_forward_s > 0) out << "\ngelu_forward_ns = " << number(c.gelu_forward_s * 1e9);
  if (c.gelu_backward_s > 0) out << "\ngelu_backward_ns = " << number(c.gelu_backward_s * 1e9);
  out << "\n";
  for (auto [table, link] : {std::pair{"intra_node", &c.intra_node}, {"inter_node", &c.inter_node}})
    out << "\n[" << table << "]\nlatency_us = " << number(link->alpha_s * 1e6)
        << "\nbandwidth_gbs = " << number(1.0 / link->beta_s_per_byte / 1e9) << "\n";
  write_rates(out, "gemm_rates", c.gemm_rates);
  write_rates(out, "attention_rates", c.attention_rates);
  return out.str();
}

ModelSpec model_from_file(const std::string& path) { return model_from_toml(read_file(path), path); }
ClusterSpec cluster_from_file(const std::string& path) { return cluster_from_toml(read_file(path), path); }

}  // namespace loom::plan
