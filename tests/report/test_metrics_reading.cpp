// read_metrics reads metrics.jsonl twice without holding it: its lines equal, bit for bit,
// those of the obvious reading (every record held, the abandoned ones dropped, sorted by
// step, each line downsampled whole) on a long run resumed twice, on a file whose steps run
// backwards and on a mixture of experts; its memory does not grow with the file; and a line
// read without a JSON tree gives what the tree gives, repeated fields included.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <new>
#include <random>
#include <string>
#include <vector>

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "loom/error.hpp"
#include "loom/report/charts.hpp"
#include "loom/report/metrics.hpp"
#include "report/whole_vector_downsample.hpp"
#include "test_util.hpp"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using loom::report::Metrics;
using loom::report::Point;
using loom::testing::same_points;

// The reading read_metrics replaced: every record held, those a later start record abandons
// dropped, the rest sorted by step (file order among equal steps), each line downsampled.
Metrics whole_file_reading(const std::vector<std::string>& lines) {
  struct Record {
    json j;
    double step;
  };
  std::vector<Record> records;
  std::vector<std::pair<size_t, double>> starts;  // (records before it, its step)
  for (const std::string& line : lines) {
    if (line.empty()) continue;
    json j = json::parse(line);
    const std::string kind = j.value("kind", "");
    if (kind == "start") starts.emplace_back(records.size(), j["step"].get<double>());
    if (kind == "train" || kind == "val") records.push_back({j, j["step"].get<double>()});
  }
  std::vector<Record> kept;
  for (size_t i = 0; i < records.size(); ++i) {
    double bound = std::numeric_limits<double>::infinity();
    for (const auto& [before, step] : starts)
      if (before > i) bound = std::min(bound, step);
    if (records[i].step <= bound) kept.push_back(records[i]);
  }
  std::stable_sort(kept.begin(), kept.end(), [](const Record& a, const Record& b) { return a.step < b.step; });
  Metrics m;
  std::vector<std::vector<Point>> experts(loom::report::kMaxExpertLines);
  for (const Record& r : kept) {
    auto number = [&](const char* key) { return r.j.contains(key) && r.j[key].is_number() ? r.j[key].get<double>() : NAN; };
    if (r.j["kind"] == "val") {
      if (!std::isnan(number("val_loss"))) m.val_loss.emplace_back(r.step, number("val_loss"));
      continue;
    }
    if (!std::isnan(number("loss"))) m.train_loss.emplace_back(r.step, number("loss"));
    if (!std::isnan(number("tokens_per_s"))) {
      m.tokens_per_s.emplace_back(r.step, number("tokens_per_s"));
      m.mfu_percent.emplace_back(r.step, 100.0 * r.j.value("mfu", 0.0));
    }
    m.comm_s += r.j.value("comm_s", 0.0);
    m.comm_exposed_s += r.j.value("comm_exposed_s", 0.0);
    if (r.j.value("moe_rank_imbalance", 0.0) > 0) m.moe_rank_imbalance.emplace_back(r.step, number("moe_rank_imbalance"));
    if (!r.j.contains("moe_load")) continue;
    double total = 0;
    for (const json& x : r.j["moe_load"]) total += x.get<double>();
    if (total <= 0) continue;
    m.moe_experts = std::max(m.moe_experts, r.j["moe_load"].size());
    m.moe_imbalance.emplace_back(r.step, r.j.value("moe_load_imbalance", 0.0));
    for (size_t e = 0; e < std::min(r.j["moe_load"].size(), experts.size()); ++e)
      experts[e].emplace_back(r.step, static_cast<float>(100.0 * r.j["moe_load"][e].get<double>() / total));
  }
  using loom::testing::whole_vector_downsample;
  const size_t max = loom::report::kMaxLinePoints;
  for (auto* line : {&m.train_loss, &m.val_loss, &m.tokens_per_s, &m.mfu_percent, &m.moe_imbalance, &m.moe_rank_imbalance})
    *line = whole_vector_downsample(*line, max);
  for (size_t e = 0; e < std::min(m.moe_experts, experts.size()); ++e)
    m.expert_share.push_back(whole_vector_downsample(experts[e], max));
  return m;
}

void expect_same(const Metrics& got, const Metrics& want) {
  EXPECT_TRUE(same_points(got.train_loss, want.train_loss)) << got.train_loss.size() << " vs " << want.train_loss.size();
  EXPECT_TRUE(same_points(got.val_loss, want.val_loss)) << got.val_loss.size() << " vs " << want.val_loss.size();
  EXPECT_TRUE(same_points(got.tokens_per_s, want.tokens_per_s));
  EXPECT_TRUE(same_points(got.mfu_percent, want.mfu_percent));
  EXPECT_TRUE(same_points(got.moe_imbalance, want.moe_imbalance));
  EXPECT_TRUE(same_points(got.moe_rank_imbalance, want.moe_rank_imbalance))
      << got.moe_rank_imbalance.size() << " vs " << want.moe_rank_imbalance.size();
  ASSERT_EQ(got.moe_experts, want.moe_experts);
  ASSERT_EQ(got.expert_share.size(), want.expert_share.size());
  for (size_t e = 0; e < got.expert_share.size(); ++e) EXPECT_TRUE(same_points(got.expert_share[e], want.expert_share[e])) << e;
  EXPECT_EQ(got.comm_s, want.comm_s);
  EXPECT_EQ(got.comm_exposed_s, want.comm_exposed_s);
}

std::string write_metrics(const std::string& name, const std::vector<std::string>& lines) {
  const fs::path dir = loom::testing::fresh_temp_dir("loom_metrics_" + name + "_" + std::to_string(::getpid()));
  std::ofstream out(dir / "metrics.jsonl");
  for (const std::string& l : lines) out << l << "\n";
  return (dir / "metrics.jsonl").string();
}

// A train record as the trainer writes it; every 997th step's loss was not finite (null),
// every 101st logged no throughput.
std::string train(int step, std::mt19937_64& rng, int experts = 0) {
  std::uniform_real_distribution<double> u(0, 1);
  json r{{"kind", "train"}, {"step", step}, {"loss", step % 997 == 0 ? json(nullptr) : json(4 * std::exp(-step / 5e3) + 0.1 * u(rng))},
         {"comm_s", 0.01 * u(rng)}, {"comm_exposed_s", 0.001 * u(rng)}, {"lr", 1e-3}};
  if (step % 101 != 0) r["tokens_per_s"] = 2e5 + 1e3 * u(rng), r["mfu"] = 0.3 * u(rng);
  if (step == 4321) r["loss"] = 40.0;  // a spike
  if (experts > 0) {
    json load = json::array();
    for (int e = 0; e < experts; ++e) load.push_back(static_cast<int>(rng() % 100));
    r["moe_load"] = load;
    r["moe_load_imbalance"] = 1 + u(rng);
    if (step % 3 != 0) r["moe_rank_imbalance"] = 1 + 0.5 * u(rng);  // experts shared out over ranks
  }
  return r.dump();
}

TEST(ReportMetrics, TwoReadsGiveTheLinesOfTheWholeFile) {
  std::mt19937_64 rng(11);
  // Killed after 12000, resumed from 9000; then resumed from 14000, behind its last step.
  std::vector<std::string> lines{R"({"kind":"start","step":0})"};
  auto run = [&](int from, int to) {
    for (int s = from; s <= to; ++s) {
      lines.push_back(train(s, rng));
      if (s % 50 == 0) lines.push_back(json{{"kind", "val"}, {"step", s}, {"val_loss", 3.0 + 1e-4 * (s % 7)}}.dump());
    }
  };
  run(1, 12000);
  lines.push_back(R"({"kind":"start","step":9000})");
  run(9001, 15000);
  lines.push_back(R"({"kind":"start","step":14000})");
  run(14001, 20000);
  lines.push_back("");  // a blank line is no record
  expect_same(loom::report::read_metrics(write_metrics("resumed", lines)), whole_file_reading(lines));

  // No start record (a file from before them), steps running backwards: held and sorted.
  std::vector<std::string> old;
  for (int s = 1; s <= 3000; ++s) old.push_back(train(s, rng));
  for (int s = 1; s <= 3000; ++s) old.push_back(train(s, rng));
  expect_same(loom::report::read_metrics(write_metrics("old", old)), whole_file_reading(old));

  // A mixture of experts, more experts than lines drawn.
  std::vector<std::string> moe{R"({"kind":"start","step":0})"};
  for (int s = 1; s <= 3000; ++s) moe.push_back(train(s, rng, s < 2000 ? 8 : 70));
  const Metrics m = loom::report::read_metrics(write_metrics("moe", moe));
  expect_same(m, whole_file_reading(moe));
  EXPECT_EQ(m.moe_experts, 70u);
  EXPECT_EQ(m.expert_share.size(), loom::report::kMaxExpertLines);
  for (const std::string& name : {"resumed", "old", "moe"})
    fs::remove_all(fs::temp_directory_path() / ("loom_metrics_" + name + "_" + std::to_string(::getpid())));
}

long vm_data_bytes() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);)
    if (line.rfind("VmData:", 0) == 0) return std::stol(line.substr(7)) * 1024;
  return -1;
}

// 250,000 records held as they used to be (80 bytes each, in a vector that doubles) took
// 20-60 MB; read in a child whose data segment may grow by 16 MiB, the file must still go.
TEST(ReportMetrics, ALongFileIsReadInMemoryThatDoesNotGrowWithIt) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "AddressSanitizer's allocator maps far more than the data limit this test sets";
#endif
  std::mt19937_64 rng(5);
  std::vector<std::string> lines{R"({"kind":"start","step":0})"};
  for (int s = 1; s <= 250000; ++s) lines.push_back(train(s, rng));
  const std::string path = write_metrics("long", lines);
  lines.clear();
  lines.shrink_to_fit();
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    const rlimit limit{static_cast<rlim_t>(vm_data_bytes() + (16l << 20)), RLIM_INFINITY};
    if (::setrlimit(RLIMIT_DATA, &limit) != 0) ::_exit(3);
    try {
      const Metrics m = loom::report::read_metrics(path);
      ::_exit(m.train_loss.size() <= loom::report::kMaxLinePoints && !m.train_loss.empty() ? 0 : 4);
    } catch (const std::bad_alloc&) {
      ::_exit(1);
    } catch (...) {
      ::_exit(2);
    }
  }
  int status = 0;
  ::waitpid(child, &status, 0);
  ASSERT_TRUE(WIFEXITED(status)) << "killed by signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 0) << "1: out of memory under the 16 MiB limit; 2: another error; 4: wrong lines";
  fs::remove_all(fs::path(path).parent_path());
}

// A line the fast reader leaves to the JSON tree (a repeated field: the tree keeps the last)
// reads as the tree reads it; a nested "loss" is no field of the record.
TEST(ReportMetrics, ALineReadWithoutATreeReadsAsWithOne) {
  auto record = [](const std::string& line) { return loom::report::parse_metrics_record(line, "m.jsonl", 1); };
  EXPECT_EQ(record(R"({"kind":"train","step":3,"loss":"x","loss":2.5})").loss, 2.5);
  EXPECT_EQ(record(R"({"kind":"train","step":2,"step":5})").step, 5);
  EXPECT_EQ(record(R"({"step":{"a":1},"kind":"eval"})").kind, loom::report::MetricsRecord::Kind::Other);
  const auto r = record(R"({"kind":"train","step":1,"loss":null,"moe_load":[3,1],"aux_loss":null,"x":{"loss":"no"}})");
  EXPECT_TRUE(std::isnan(r.loss));
  EXPECT_EQ(r.moe_share, (std::vector<float>{75, 25}));
  try {
    record(R"({"kind":"train","step":3,"loss":2.5,"loss":"x"})");
    ADD_FAILURE() << "no error";
  } catch (const loom::Error& e) {
    EXPECT_STREQ(e.what(), "m.jsonl line 1: field 'loss' must be a number (or null), got \"x\"");
  }
}

}  // namespace
