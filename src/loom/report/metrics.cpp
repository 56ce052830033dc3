#include "loom/report/metrics.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <filesystem>
#include <limits>
#include <optional>
#include <utility>

#include <nlohmann/json.hpp>

#include "loom/data/input_file.hpp"
#include "loom/error.hpp"
#include "loom/report/charts.hpp"
#include "loom/report/file_lines.hpp"

namespace loom::report {

namespace {

namespace fs = std::filesystem;
using Kind = MetricsRecord::Kind;

// The lines drawn: these, then one per expert.
enum : size_t {
  kTrainLoss, kValLoss, kTokens, kMfu, kImbalance, kRankImbalance, kFirstExpert, kLineCount = kFirstExpert + kMaxExpertLines
};

// emit(line, y) for each line record r adds the point (r.step, y) to.
template <class Emit>
void points_of(const MetricsRecord& r, const Emit& emit) {
  if (r.kind == Kind::Val) {
    if (!std::isnan(r.loss)) emit(kValLoss, r.loss);
    return;
  }
  if (r.kind != Kind::Train) return;
  if (!std::isnan(r.loss)) emit(kTrainLoss, r.loss);
  if (!std::isnan(r.tokens_per_s)) {
    emit(kTokens, r.tokens_per_s);
    if (const double mfu = 100.0 * r.mfu; !std::isnan(mfu)) emit(kMfu, mfu);
  }
  if (r.moe_experts > 0) {
    emit(kImbalance, r.moe_load_imbalance);
    for (size_t e = 0; e < r.moe_share.size(); ++e) emit(kFirstExpert + e, r.moe_share[e]);
  }
  if (r.moe_rank_imbalance > 0) emit(kRankImbalance, r.moe_rank_imbalance);
}

[[noreturn]] void changed_while_read(const std::string& path) {
  fail("'", path, "' changed while it was read (rewritten or cut): run loom report again");
}

// One drawn line through the two reads: the backward one counts its points and sees its first
// and last step; the forward one downsamples the points as they come, or, when their steps run
// backwards somewhere, holds them to sort.
class LinePoints {
 public:
  void count(double step) {  // the last point first
    if (n_ == 0) last_ = step;
    else if (step > first_) in_order_ = false;
    first_ = step;
    ++n_;
  }
  void begin(size_t max_points) {
    max_points_ = max_points;
    if (in_order_) sampler_.emplace(n_, first_, last_, max_points);
  }
  void add(Point p, const std::string& path) {
    if (added_ == n_ || (sampler_ && added_ > 0 && p.first < previous_x_)) changed_while_read(path);
    ++added_;
    previous_x_ = p.first;
    if (sampler_) sampler_->add(p);
    else held_.push_back(p);
  }
  std::vector<Point> take(const std::string& path) {
    if (added_ != n_) changed_while_read(path);
    if (sampler_) return sampler_->take();
    std::stable_sort(held_.begin(), held_.end(), [](const Point& a, const Point& b) { return a.first < b.first; });
    return downsample(held_, max_points_);
  }

 private:
  size_t n_ = 0, added_ = 0, max_points_ = 0;
  double first_ = 0, last_ = 0, previous_x_ = 0;
  bool in_order_ = true;
  std::optional<Downsampler> sampler_;
  std::vector<Point> held_;
};

// The communication times summed over the train records in step order (floating-point
// addition is not associative: the order is the one the report always summed in). Added as
// they come when the steps run forwards, else held and sorted first, as LinePoints.
class StepOrderSums {
 public:
  void count(double step) {  // the last record first
    if (n_ > 0 && step > first_) in_order_ = false;
    first_ = step;
    ++n_;
  }
  void add(double step, double comm_s, double comm_exposed_s) {
    if (in_order_) comm_s_ += comm_s, comm_exposed_s_ += comm_exposed_s;
    else held_.push_back({step, comm_s, comm_exposed_s});
  }
  void finish(Metrics& m) {
    std::stable_sort(held_.begin(), held_.end(), [](const auto& a, const auto& b) { return a[0] < b[0]; });
    for (const auto& [step, comm_s, comm_exposed_s] : held_) comm_s_ += comm_s, comm_exposed_s_ += comm_exposed_s;
    m.comm_s = comm_s_;
    m.comm_exposed_s = comm_exposed_s_;
  }

 private:
  size_t n_ = 0;
  double first_ = 0, comm_s_ = 0, comm_exposed_s_ = 0;
  bool in_order_ = true;
  std::vector<std::array<double, 3>> held_;  // (step, comm_s, comm_exposed_s)
};

}  // namespace

Metrics read_metrics(const std::string& path) {
  check(data::file_kind(path) != "missing", "no metrics.jsonl in '", fs::path(path).parent_path().string(),
        "' (is it a run directory, the out_dir of a loom train run?)");
  int64_t size = data::check_input_file(path, "metrics file");

  // Last line first: a record's fate is known when it is read, the start records after it
  // having been read already. A bad line stops this read; the next names the first one.
  std::vector<std::pair<int64_t, double>> starts;  // (offset, step), the last first
  std::array<LinePoints, kLineCount> lines;
  StepOrderSums sums;
  double bound = std::numeric_limits<double>::infinity();  // the least step of a start read so far
  bool damaged = false;
  size_t abandoned = 0;
  double first_abandoned = std::numeric_limits<double>::infinity(), last_abandoned = -first_abandoned;
  bool cut = false;
  for_each_line_backward(path, size, [&, end = size](int64_t offset, std::string_view text) {
    if (text.empty()) return true;
    // A last line without its '\n' that is not JSON is a record being written (a live run) or
    // one a kill cut short: no record, as the trainer's next append treats it (metrics_log.hpp).
    if (offset + static_cast<int64_t>(text.size()) == end && !nlohmann::json::accept(text.begin(), text.end())) {
      cut = true;
      size = offset;
      return true;
    }
    MetricsRecord r;
    try {
      r = parse_metrics_record(text, path, 0);
    } catch (const Error&) {
      damaged = true;
      return false;
    }
    if (r.kind == Kind::Start) {
      starts.emplace_back(offset, r.step);
      bound = std::min(bound, r.step);
    } else if (r.step <= bound) {
      if (r.kind == Kind::Train) sums.count(r.step);
      points_of(r, [&](size_t line, double) { lines[line].count(r.step); });
    } else if (r.kind != Kind::Other) {
      first_abandoned = std::min(first_abandoned, r.step);
      last_abandoned = std::max(last_abandoned, r.step);
      ++abandoned;
    }
    return true;
  });

  // First line first, checking every line. A record is kept when its step is at most every
  // later start's: bound_after[k] is the least step of starts k, k + 1, ... (in file order).
  std::reverse(starts.begin(), starts.end());
  std::vector<double> bound_after(starts.size() + 1, std::numeric_limits<double>::infinity());
  for (size_t k = starts.size(); k-- > 0;) bound_after[k] = std::min(bound_after[k + 1], starts[k].second);
  for (LinePoints& l : lines) l.begin(kMaxLinePoints);
  Metrics m;
  m.last_line_cut = cut;
  if (abandoned > 0) m.abandoned = abandoned, m.abandoned_first = first_abandoned, m.abandoned_last = last_abandoned;
  size_t next_start = 0;  // the first start after the record read
  int64_t n = 0;
  for_each_line(path, size, [&](int64_t offset, std::string_view text) {
    ++n;
    if (text.empty()) return true;
    const MetricsRecord r = parse_metrics_record(text, path, n);
    if (damaged || r.kind == Kind::Start || r.kind == Kind::Other) return true;
    while (next_start < starts.size() && starts[next_start].first < offset) ++next_start;
    if (r.step > bound_after[next_start]) return true;
    if (r.kind == Kind::Train) {
      sums.add(r.step, r.comm_s, r.comm_exposed_s);
      m.moe_experts = std::max(m.moe_experts, r.moe_experts);
    }
    points_of(r, [&](size_t line, double y) { lines[line].add({r.step, y}, path); });
    return true;
  });
  if (damaged) changed_while_read(path);  // the backward read saw a bad line the forward one did not
  sums.finish(m);

  m.train_loss = lines[kTrainLoss].take(path);
  m.val_loss = lines[kValLoss].take(path);
  m.tokens_per_s = lines[kTokens].take(path);
  m.mfu_percent = lines[kMfu].take(path);
  m.moe_imbalance = lines[kImbalance].take(path);
  m.moe_rank_imbalance = lines[kRankImbalance].take(path);
  for (size_t e = 0; e < kMaxExpertLines; ++e) {
    Metrics::Line share = lines[kFirstExpert + e].take(path);
    if (e < m.moe_experts) m.expert_share.push_back(std::move(share));
  }
  return m;
}

}  // namespace loom::report
