#include "loom/report/metrics_fields.hpp"

namespace loom::report {

namespace {

using nlohmann::json;

// The top-level keys whose values the report reads or checks.
enum class RecordKey { Kind, Step, Loss, ValLoss, TokensPerS, Mfu, CommS, CommExposedS, MoeLoadImbalance, MoeRankImbalance, MoeLoad, OtherLoss, Other };

RecordKey record_key(const std::string& k) {
  if (k == "kind") return RecordKey::Kind;
  if (k == "step") return RecordKey::Step;
  if (k == "loss") return RecordKey::Loss;
  if (k == "val_loss") return RecordKey::ValLoss;
  if (k == "tokens_per_s") return RecordKey::TokensPerS;
  if (k == "mfu") return RecordKey::Mfu;
  if (k == "comm_s") return RecordKey::CommS;
  if (k == "comm_exposed_s") return RecordKey::CommExposedS;
  if (k == "moe_load_imbalance") return RecordKey::MoeLoadImbalance;
  if (k == "moe_rank_imbalance") return RecordKey::MoeRankImbalance;
  if (k == "moe_load") return RecordKey::MoeLoad;
  return k.ends_with("_loss") ? RecordKey::OtherLoss : RecordKey::Other;
}

// Each handler returns false to stop the parse when the line is not plainly well formed.
class FieldReader final : public nlohmann::json_sax<json> {
 public:
  FieldReader(RecordFields& f, size_t keep_experts) : f_(f), keep_experts_(keep_experts) {}

  bool null() override { return depth_ == 1 ? key_ == RecordKey::Loss || key_ == RecordKey::ValLoss || key_ == RecordKey::OtherLoss || key_ == RecordKey::Other
                                            : nested_scalar(false, 0); }
  bool boolean(bool) override { return depth_ == 1 ? key_ == RecordKey::Other : nested_scalar(false, 0); }
  bool number_integer(number_integer_t v) override { return number(static_cast<double>(v)); }
  bool number_unsigned(number_unsigned_t v) override { return number(static_cast<double>(v)); }
  bool number_float(number_float_t v, const string_t&) override { return number(v); }
  bool string(string_t& s) override {
    if (depth_ != 1) return nested_scalar(false, 0);
    if (key_ == RecordKey::Kind) f_.kind = s;
    return key_ == RecordKey::Kind || key_ == RecordKey::Other;
  }
  bool binary(binary_t&) override { return false; }  // not in JSON text
  bool key(string_t& k) override {
    if (depth_ != 1) return true;
    key_ = record_key(k);
    if (key_ == RecordKey::OtherLoss || key_ == RecordKey::Other) return true;
    const unsigned bit = 1u << static_cast<unsigned>(key_);
    if (seen_ & bit) return false;  // the tree keeps the last value: let it decide
    seen_ |= bit;
    return true;
  }
  bool start_object(std::size_t) override {
    if (depth_ == 1 && key_ != RecordKey::Other) return false;
    if (depth_ == 2 && in_moe_load_) return false;
    ++depth_;
    return true;
  }
  bool end_object() override {
    --depth_;
    return true;
  }
  bool start_array(std::size_t) override {
    if (depth_ == 0 || (depth_ == 1 && key_ != RecordKey::MoeLoad && key_ != RecordKey::Other) || (depth_ == 2 && in_moe_load_))
      return false;
    in_moe_load_ = depth_ == 1 && key_ == RecordKey::MoeLoad;
    ++depth_;
    return true;
  }
  bool end_array() override {
    if (--depth_ == 1) in_moe_load_ = false;
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override { return false; }

 private:
  bool number(double v) {
    if (depth_ != 1) return nested_scalar(true, v);
    switch (key_) {
      case RecordKey::Kind: case RecordKey::MoeLoad: return false;
      case RecordKey::Step: f_.step = v; break;
      case RecordKey::Loss: f_.loss = v; break;
      case RecordKey::ValLoss: f_.val_loss = v; break;
      case RecordKey::TokensPerS: f_.tokens_per_s = v; break;
      case RecordKey::Mfu: f_.mfu = v; break;
      case RecordKey::CommS: f_.comm_s = v; break;
      case RecordKey::CommExposedS: f_.comm_exposed_s = v; break;
      case RecordKey::MoeLoadImbalance: f_.moe_load_imbalance = v; break;
      case RecordKey::MoeRankImbalance: f_.moe_rank_imbalance = v; break;
      case RecordKey::OtherLoss: case RecordKey::Other: break;
    }
    return true;
  }
  // A value inside an array or object: moe_load's must be numbers; a top-level one is no object.
  bool nested_scalar(bool is_number, double v) {
    if (depth_ == 0) return false;
    if (!in_moe_load_) return true;
    if (!is_number) return false;
    if (f_.moe_experts < keep_experts_) f_.moe_first.push_back(v);
    ++f_.moe_experts;
    f_.moe_total += v;
    return true;
  }

  RecordFields& f_;
  size_t keep_experts_;
  int depth_ = 0;  // 1: in the record's object
  RecordKey key_ = RecordKey::Other;
  unsigned seen_ = 0;  // the Keys met
  bool in_moe_load_ = false;
};

}  // namespace

RecordFields fields_of(const json& r, size_t keep_experts) {
  RecordFields f;
  f.kind = r.value("kind", "");
  auto number = [&](const char* key) -> std::optional<double> {
    const auto it = r.find(key);
    if (it == r.end() || !it->is_number()) return std::nullopt;
    return it->get<double>();
  };
  f.step = number("step");
  f.loss = number("loss");
  f.val_loss = number("val_loss");
  f.tokens_per_s = number("tokens_per_s");
  f.mfu = number("mfu");
  f.comm_s = number("comm_s");
  f.comm_exposed_s = number("comm_exposed_s");
  f.moe_load_imbalance = number("moe_load_imbalance");
  f.moe_rank_imbalance = number("moe_rank_imbalance");
  if (const auto it = r.find("moe_load"); it != r.end()) {
    for (const json& x : *it) {
      if (f.moe_first.size() < keep_experts) f.moe_first.push_back(x.get<double>());
      f.moe_total += x.get<double>();
    }
    f.moe_experts = it->size();
  }
  return f;
}

std::optional<RecordFields> fast_fields(std::string_view text, size_t keep_experts) {
  RecordFields f;
  FieldReader reader(f, keep_experts);
  if (!json::sax_parse(text.begin(), text.end(), &reader)) return std::nullopt;
  // The kinds the report draws or drops by need a numeric step.
  if ((f.kind == "train" || f.kind == "val" || f.kind == "start") && !f.step) return std::nullopt;
  return f;
}

}  // namespace loom::report
