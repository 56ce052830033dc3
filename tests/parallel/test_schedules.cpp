// Pipeline schedules as pure data (STYLE tests 5): every builder for p in 1..8, m in 1..16,
// v in {1, 2} against the invariants counted here independently of schedule_check, the
// simulated timeline against closed forms, bad schedules rejected with the conflict named,
// the text form round-tripped and a schedule file read and checked. Single process, no MPI.
//
// The closed form the unit-cost simulation gives (forward = 1, backward = 2 per micro-batch
// per chunk, transfers free): every rank computes 3mv; the first forward reaches the last
// rank after p - 1 forward units, the last rank then never waits, and the last backward
// travels back to rank 0 in 2(p - 1). So makespan = 3(mv + p - 1) for GPipe, 1F1B and
// interleaved 1F1B alike, and
//   idle / compute          = 3p(p - 1) / (3pmv)          = (p - 1)/(m v)   (the papers' bubble)
//   idle / whole timeline   = 3p(p - 1) / (3p(mv + p - 1)) = (p - 1)/(m v + p - 1).
// Memory, in (micro-batch, chunk) activations held by rank r: GPipe m; 1F1B min(m, p - r);
// interleaved min(2(p - r - 1) + (v - 1)p + 1, m v) (its warm-up plus one, as in Megatron).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "loom/error.hpp"
#include "loom/parallel/pipeline/gpipe.hpp"
#include "loom/parallel/pipeline/one_f_one_b.hpp"
#include "loom/parallel/pipeline/schedule_check.hpp"
#include "loom/parallel/pipeline/schedule_builders.hpp"
#include "loom/parallel/pipeline/schedule_file.hpp"
#include "loom/parallel/pipeline/timeline.hpp"
#include "loom/parallel/pipeline/timeline_svg.hpp"

namespace loom::parallel::pipeline {
namespace {

using ::testing::HasSubstr;
using ::testing::StrEq;
using ::testing::ThrowsMessage;

auto fails_with(const std::string& message) { return ThrowsMessage<Error>(StrEq(message)); }

struct Shape {
  ScheduleKind kind;
  int p, m, v;
  std::string name() const {
    return schedule_kind_name(kind) + " p=" + std::to_string(p) + " m=" + std::to_string(m) + " v=" + std::to_string(v);
  }
};

// Every (schedule, p, m, v) of the issue: p 1..8, m 1..16; interleaved with v = 2 where p | m.
std::vector<Shape> all_shapes() {
  std::vector<Shape> shapes;
  for (int p = 1; p <= 8; ++p)
    for (int m = 1; m <= 16; ++m) {
      shapes.push_back({ScheduleKind::GPipe, p, m, 1});
      shapes.push_back({ScheduleKind::OneFOneB, p, m, 1});
      if (m % p == 0) shapes.push_back({ScheduleKind::Interleaved, p, m, 2});
    }
  return shapes;
}

int last_index_of(const std::vector<Action>& actions, const Action& a) {
  const auto it = std::find(actions.rbegin(), actions.rend(), a);
  return it == actions.rend() ? -1 : static_cast<int>(actions.rend() - it) - 1;
}

TEST(PipelineSchedule, EveryMicroBatchForwardedAndBackwardedOncePerChunk) {
  for (const Shape& sh : all_shapes()) {
    const Schedule s = build_schedule(sh.kind, sh.p, sh.m, sh.v);
    ASSERT_EQ(s.ranks.size(), static_cast<size_t>(sh.p)) << sh.name();
    for (int r = 0; r < sh.p; ++r) {
      std::map<std::tuple<ActionKind, int, int>, int> count, position;
      for (size_t i = 0; i < s.ranks[r].size(); ++i) {
        const Action& a = s.ranks[r][i];
        if (is_transfer(a.kind)) continue;
        ++count[{a.kind, a.micro_batch, a.chunk}];
        position[{a.kind, a.micro_batch, a.chunk}] = static_cast<int>(i);
      }
      EXPECT_EQ(count.size(), static_cast<size_t>(2 * sh.m * sh.v)) << sh.name() << " rank " << r;
      for (int c = 0; c < sh.v; ++c)
        for (int mb = 0; mb < sh.m; ++mb) {
          EXPECT_EQ((count[{ActionKind::Forward, mb, c}]), 1) << sh.name() << " rank " << r << " F" << mb << "." << c;
          EXPECT_EQ((count[{ActionKind::Backward, mb, c}]), 1) << sh.name() << " rank " << r << " B" << mb << "." << c;
          EXPECT_LT((position[{ActionKind::Forward, mb, c}]), (position[{ActionKind::Backward, mb, c}])) << sh.name();
        }
    }
    EXPECT_NO_THROW(check_schedule(s)) << sh.name();
  }
}

// Each transfer sits next to its compute and has its partner on the neighbouring virtual stage.
TEST(PipelineSchedule, TransfersConnectNeighbouringVirtualStages) {
  for (const Shape& sh : all_shapes()) {
    const Schedule s = build_schedule(sh.kind, sh.p, sh.m, sh.v);
    const int last = sh.p * sh.v - 1;
    for (int r = 0; r < sh.p; ++r)
      for (const Action& a : s.ranks[r]) {
        if (!is_transfer(a.kind)) continue;
        const int k = a.chunk * sh.p + r;
        const bool downstream = a.kind == ActionKind::SendActivation || a.kind == ActionKind::RecvGradient;
        const int partner = downstream ? k + 1 : k - 1;
        ASSERT_TRUE(partner >= 0 && partner <= last) << sh.name() << " rank " << r << " " << to_string(a);
        EXPECT_EQ(a.peer, partner % sh.p) << sh.name() << " rank " << r << " " << to_string(a);
        const ActionKind mirror = a.kind == ActionKind::SendActivation   ? ActionKind::RecvActivation
                                  : a.kind == ActionKind::RecvActivation ? ActionKind::SendActivation
                                  : a.kind == ActionKind::SendGradient   ? ActionKind::RecvGradient
                                                                         : ActionKind::SendGradient;
        const Action other{mirror, a.micro_batch, partner / sh.p, r};
        EXPECT_EQ(last_index_of(s.ranks[a.peer], other) >= 0, true)
            << sh.name() << " rank " << r << " " << to_string(a) << " has no " << to_string(other) << " on rank "
            << a.peer;
      }
  }
}

// The simulated start times respect the data flow: a forward after the previous virtual
// stage's forward of the same micro-batch, a backward after the next stage's backward and
// after its own forward; and the run ends.
TEST(ScheduleTimeline, DependenciesRespectedAndNoDeadlock) {
  for (const Shape& sh : all_shapes()) {
    const Schedule s = build_schedule(sh.kind, sh.p, sh.m, sh.v);
    const Timeline t = simulate(s);
    std::map<std::tuple<ActionKind, int, int>, std::pair<double, double>> at;  // (kind, mb, stage) -> (start, end)
    for (int r = 0; r < sh.p; ++r) {
      ASSERT_EQ(t.ranks[r].size(), s.ranks[r].size()) << sh.name();
      for (const TimedAction& ta : t.ranks[r])
        if (!is_transfer(ta.action.kind))
          at[{ta.action.kind, ta.action.micro_batch, ta.action.chunk * sh.p + r}] = {ta.start, ta.end};
    }
    const int stages = sh.p * sh.v;
    for (int mb = 0; mb < sh.m; ++mb)
      for (int k = 0; k < stages; ++k) {
        const auto f = at.at({ActionKind::Forward, mb, k}), b = at.at({ActionKind::Backward, mb, k});
        EXPECT_GE(b.first, f.second) << sh.name();
        if (k > 0) {
          EXPECT_GE(f.first, (at.at({ActionKind::Forward, mb, k - 1}).second)) << sh.name();
        }
        if (k < stages - 1) {
          EXPECT_GE(b.first, (at.at({ActionKind::Backward, mb, k + 1}).second)) << sh.name();
        }
      }
  }
}

TEST(ScheduleTimeline, BubbleMatchesTheClosedForm) {
  for (const Shape& sh : all_shapes()) {
    const Timeline t = simulate(build_schedule(sh.kind, sh.p, sh.m, sh.v));
    const double mv = sh.m * sh.v;
    EXPECT_DOUBLE_EQ(t.makespan(), 3.0 * (mv + sh.p - 1)) << sh.name();
    EXPECT_NEAR(t.bubble_fraction(), (sh.p - 1) / (mv + sh.p - 1), 1e-12) << sh.name();
    EXPECT_NEAR(t.bubble_over_compute(), (sh.p - 1) / mv, 1e-12) << sh.name();
    EXPECT_NEAR(t.bubble_over_compute(), theoretical_bubble(sh.p, sh.m, sh.v), 1e-12) << sh.name();
  }
  // Spelled out for the example, p = 4 and m = 8.
  EXPECT_NEAR(simulate(one_f_one_b(4, 8)).bubble_fraction(), 3.0 / 11.0, 1e-12);
  EXPECT_NEAR(simulate(build_schedule(ScheduleKind::Interleaved, 4, 8, 2)).bubble_over_compute(), 3.0 / 16.0, 1e-12);
}

TEST(ScheduleTimeline, PeakActivationsInFlight) {
  for (const Shape& sh : all_shapes()) {
    const Timeline t = simulate(build_schedule(sh.kind, sh.p, sh.m, sh.v));
    for (int r = 0; r < sh.p; ++r) {
      const int expected = sh.kind == ScheduleKind::GPipe ? sh.m
                           : sh.kind == ScheduleKind::OneFOneB
                               ? std::min(sh.m, sh.p - r)
                               : std::min(2 * (sh.p - r - 1) + (sh.v - 1) * sh.p + 1, sh.m * sh.v);
      EXPECT_EQ(t.peak_activations[r], expected) << sh.name() << " rank " << r;
      if (sh.kind == ScheduleKind::OneFOneB) {
        EXPECT_LE(t.peak_activations[r], sh.p);
      }
    }
  }
}

TEST(ScheduleText, RoundTrips) {
  for (const Shape& sh : all_shapes()) {
    const Schedule s = build_schedule(sh.kind, sh.p, sh.m, sh.v);
    const Schedule back = parse_schedule(format_schedule(s));
    EXPECT_EQ(back.pp, s.pp);
    EXPECT_EQ(back.micro_batches, s.micro_batches);
    EXPECT_EQ(back.chunks, s.chunks);
    EXPECT_EQ(back.ranks, s.ranks) << sh.name();
    // The forwards and backwards alone get the same transfers back.
    EXPECT_EQ(parse_schedule(format_schedule(without_transfers(s))).ranks, s.ranks) << sh.name();
  }
}

TEST(ScheduleText, ReadsTheShortFormWithoutHeader) {
  const Schedule s = parse_schedule("# GPipe on two ranks\nF0 F1 B0 B1\nF0 F1 B0 B1   # last stage\n");
  EXPECT_EQ(s.pp, 2);
  EXPECT_EQ(s.micro_batches, 2);
  EXPECT_EQ(s.chunks, 1);
  EXPECT_EQ(s.ranks, gpipe(2, 2).ranks);
  EXPECT_EQ(format_schedule(without_transfers(one_f_one_b(2, 2))),
            "pp=2 micro_batches=2 chunks=1\nrank 0: F0 F1 B0 B1\nrank 1: F0 B0 F1 B1\n");
  EXPECT_EQ(to_string(Action{ActionKind::RecvGradient, 3, 1, 2}), "RG3.1<2");
  EXPECT_EQ(parse_action("SA12.3>7"), (Action{ActionKind::SendActivation, 12, 3, 7}));
}

TEST(ScheduleText, BadTextIsNamed) {
  EXPECT_THAT(
      [] { parse_schedule("F0 B0\nF0 X0\n"); },
      fails_with("line 2 (rank 1): bad action 'X0' (expected F<mb> or B<mb>, optionally with .<chunk>, or a transfer "
                 "SA<mb>><peer>, RA<mb><<peer>, SG<mb>><peer>, RG<mb><<peer>)"));
  EXPECT_THAT([] { parse_action("SA3<1"); }, ThrowsMessage<Error>(HasSubstr("bad action 'SA3<1'")));
  EXPECT_THAT([] { parse_action("F3.x"); }, ThrowsMessage<Error>(HasSubstr("bad action 'F3.x'")));
  EXPECT_THAT([] { parse_schedule("pp=3\nF0 B0\nF0 B0\n"); },
              fails_with("the header says pp=3 but there are 2 rank lines"));
  EXPECT_THAT([] { parse_schedule("pp=2 depth=3\n"); },
              fails_with("line 1: bad header entry 'depth=3' (expected pp=N, micro_batches=N or chunks=N)"));
  EXPECT_THAT([] { parse_schedule("rank 1: F0 B0\n"); },
              fails_with("line 1: expected the label 'rank 0:' (rank lines come in order)"));
  EXPECT_THAT([] { parse_schedule("# nothing\n"); },
              fails_with("the schedule has no rank lines (expected one line per rank, like 'F0 F1 B0 B1')"));
}

// Removes the first action equal to `token` on `rank`.
Schedule without(Schedule s, int rank, const std::string& token) {
  auto& actions = s.ranks[rank];
  actions.erase(std::find(actions.begin(), actions.end(), parse_action(token)));
  return s;
}

TEST(ScheduleCheck, MissingReceiveIsNamed) {
  const Schedule s = without(one_f_one_b(4, 8), 1, "RA3<0");
  EXPECT_THAT([&] { check_schedule(s); },
              fails_with("rank 1: F3 needs the activation of micro-batch 3 from rank 0, but RA3<0 is missing"));
}

TEST(ScheduleCheck, ReceiveWithoutSendIsNamed) {
  const Schedule s = without(one_f_one_b(4, 8), 3, "SG3>2");
  const std::string message = "rank 2: B3 waits for the gradient of micro-batch 3 that rank 3 never sends";
  EXPECT_THAT([&] { check_schedule(s); }, fails_with(message));
  EXPECT_THAT([&] { simulate(s); }, fails_with(message));  // the simulation alone says the same
}

TEST(ScheduleCheck, SwappedOrderDeadlocks) {
  // Rank 0 waits for micro-batch 0's gradient before sending micro-batch 1's activation, but
  // rank 1 insists on micro-batch 1 first.
  const Schedule s = parse_schedule("F0 B0 F1 B1\nF1 B1 F0 B0\n");
  EXPECT_THAT(
      [&] { check_schedule(s); },
      fails_with(
          "deadlock: rank 0: B0 waits for the gradient of micro-batch 0 from rank 1, and rank 1: F1 waits for the "
          "activation of micro-batch 1 from rank 0, which is itself waiting (a cycle)"));
}

TEST(ScheduleCheck, BackwardTwiceOrMissingIsNamed) {
  Schedule s = gpipe(2, 3);
  std::replace(s.ranks[0].begin(), s.ranks[0].end(), parse_action("B2"), parse_action("B1"));
  EXPECT_THAT([&] { check_schedule(s); }, fails_with("rank 0: micro-batch 1 is backwarded twice"));
  EXPECT_THAT([] { check_schedule(parse_schedule("F0 F1 B0\nF0 F1 B0 B1\n")); },
              fails_with("rank 0: micro-batch 1 is never backwarded"));
  EXPECT_THAT(
      [] { check_schedule(parse_schedule("F0 B1 F1 B0\nF0 F1 B0 B1\n")); },
      fails_with("rank 0: B1 comes before the forward of micro-batch 1 (a backward needs its forward's activations)"));
  EXPECT_THAT([] { check_schedule(parse_schedule("F0 F0 B0\nF0 B0\n")); },
              fails_with("rank 0: micro-batch 0 is forwarded twice"));
}

TEST(ScheduleCheck, TransferConflictsAreNamed) {
  // Two ranks, one micro-batch: (the ranks' lines, the conflict check_schedule names).
  const std::pair<std::string, std::string> cases[] = {
      {"F0 SA0>0 RG0<1 B0\nRA0<0 F0 B0 SG0>0\n",
       "rank 0: SA0>0 names rank 0, but the activation of virtual stage 0 goes to rank 1"},
      {"F0 SA0>1 RG0<1 B0 SG0>1\nRA0<0 F0 B0 SG0>0\n",
       "rank 0: SG0>1 sends a gradient but virtual stage 0 has no previous stage to exchange it with"},
      {"SA0>1 F0 RG0<1 B0\nRA0<0 F0 B0 SG0>0\n", "rank 0: SA0>1 comes before F0, whose output it sends"},
      {"F0 SA0>1 RG0<1 B0\nF0 RA0<0 B0 SG0>0\n",
       "rank 1: F0 needs the activation of micro-batch 0 from rank 0, but RA0<0 comes after it"},
      {"F0 SA0>1 SA0>1 RG0<1 B0\nRA0<0 F0 B0 SG0>0\n", "rank 0: SA0>1 appears twice (positions 2 and 3)"},
      {"F0 F1 B0 B1\nF0 B0\n", "rank 0: F1 names micro-batch 1, but the schedule has 1 (0..0)"},
      {"F0 F0.1 B0 B0.1\nF0 B0\n", "rank 0: F0.1 names chunk 1, but each rank has 1 (0..0)"},
      {"F0 SA0>5 RG0<1 B0\nRA0<0 F0 B0 SG0>0\n", "rank 0: SA0>5 names rank 5, but the pipeline has 2 ranks"}};
  for (const auto& [ranks, message] : cases)
    EXPECT_THAT([&] { check_schedule(parse_schedule("pp=2 micro_batches=1 chunks=1\n" + ranks)); },
                fails_with(message));
}

TEST(ScheduleCheck, BuilderArgumentsAreChecked) {
  EXPECT_THAT([] { build_schedule(ScheduleKind::Interleaved, 4, 6, 2); },
              fails_with("the interleaved schedule needs the micro-batches (6) to be a multiple of pp (4)"));
  EXPECT_THAT(
      [] { build_schedule(ScheduleKind::OneFOneB, 4, 8, 2); },
      fails_with("the 1f1b schedule has one model chunk per rank, got chunks(2); use the interleaved schedule"));
  EXPECT_THAT(
      [] { gpipe(0, 8); },
      fails_with(
          "a pipeline schedule needs pp, micro-batches and chunks >= 1, got pp(0), micro-batches(8), chunks(1)"));
  EXPECT_THAT([] { parse_schedule_kind("zb"); },
              fails_with("unknown pipeline schedule 'zb' (expected gpipe, 1f1b or interleaved)"));
  // One chunk: interleaving is plain 1F1B, without the divisibility rule (as in Megatron).
  EXPECT_EQ(build_schedule(ScheduleKind::Interleaved, 4, 6, 1).ranks, one_f_one_b(4, 6).ranks);
}

TEST(ScheduleFile, ReadsChecksAndNamesTheFile) {
  // The committed custom schedule reads, checks and is no builder's; a file that disagrees
  // with the run, fails the check or cannot be read is named with the conflict.
  const std::string lifo = LOOM_SOURCE_DIR "/configs/schedules/gpipe_lifo_pp2_m4.txt";
  const Schedule s = schedule_from_file(lifo, 2, 4, 1);
  EXPECT_NE(s.ranks, gpipe(2, 4).ranks);
  EXPECT_EQ(checked_schedule("1f1b", lifo, 2, 4, 1).ranks, s.ranks);
  EXPECT_EQ(checked_schedule("1f1b", "", 2, 4, 1).ranks, one_f_one_b(2, 4).ranks);
  EXPECT_THAT([&] { schedule_from_file(lifo, 4, 4, 1); },
              fails_with("schedule file " + lifo + " has pp=2, but the run has pp=4"));
  EXPECT_THAT([&] { schedule_from_file(lifo, 2, 8, 1); },
              fails_with("schedule file " + lifo + " has micro_batches=4, but the run has micro_batches=8"));
  EXPECT_THAT([&] { schedule_from_file(lifo, 2, 4, 2); },
              fails_with("schedule file " + lifo + " has chunks=1, but the run has chunks=2"));
  const std::string bad = LOOM_SOURCE_DIR "/tests/parallel/schedules/missing_backward_pp2_m4.txt";
  EXPECT_THAT([&] { schedule_from_file(bad, 2, 4, 1); },
              fails_with("schedule file " + bad + ": rank 1: micro-batch 3 is never backwarded"));
  EXPECT_THAT([] { read_schedule_file("/nonexistent/schedule.txt"); },
              fails_with("cannot open schedule file '/nonexistent/schedule.txt': No such file or directory"));
}

TEST(ScheduleTimeline, SvgDrawsEveryComputeBox) {
  const Timeline t = simulate(build_schedule(ScheduleKind::Interleaved, 2, 4, 2));
  const std::string svg = timeline_svg(t, "interleaved <p=2>");
  auto count = [&](const std::string& what) {
    size_t n = 0;
    for (size_t at = svg.find(what); at != std::string::npos; at = svg.find(what, at + 1)) ++n;
    return n;
  };
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_NE(svg.find("interleaved &lt;p=2&gt;"), std::string::npos);
  EXPECT_NE(svg.find(">rank 1<"), std::string::npos);
  // 2 ranks x 4 micro-batches x 2 chunks, each a forward and a backward, plus one legend box each.
  EXPECT_EQ(count("fill=\"#4e79a7\"") + count("fill=\"#a0cbe8\""), 16u + 1u);
  EXPECT_EQ(count("fill=\"#f28e2b\"") + count("fill=\"#ffbe7d\""), 16u + 1u);
  EXPECT_NE(svg.find(">3.1</text>"), std::string::npos);
}

// Every rank is a row of its own (pp rows, top to bottom by rank), each with one box per
// forward and backward of that rank, left to right in the order its schedule runs them, each
// labelled with its micro-batch (and chunk): read back from the SVG's boxes and labels by
// their row, for each schedule kind.
TEST(ScheduleTimeline, SvgDrawsEachRankInItsScheduleOrder) {
  for (const auto& [kind, p, m, v] : {std::tuple{ScheduleKind::GPipe, 3, 4, 1}, std::tuple{ScheduleKind::OneFOneB, 4, 8, 1},
                                      std::tuple{ScheduleKind::Interleaved, 2, 4, 2}}) {
    const Schedule s = build_schedule(kind, p, m, v), compute = without_transfers(s);
    const std::string svg = timeline_svg(simulate(s), "rows");
    // y of a row -> its boxes' (x of the centre, "F" or "B") and its labels' (x, "3.1"), read
    // from the SVG's lines (one element each).
    std::map<double, std::vector<std::pair<double, std::string>>> boxes, labels;
    auto attribute = [](const std::string& line, const std::string& name) {
      const size_t at = line.find(" " + name + "=\"") + name.size() + 3;
      return line.substr(at, line.find('"', at) - at);
    };
    std::istringstream lines(svg);
    for (std::string line; std::getline(lines, line);) {
      if (line.rfind("<rect ", 0) == 0 && line.find("stroke=\"white\"") != std::string::npos) {
        const std::string fill = attribute(line, "fill");
        const bool forward = fill == "#4e79a7" || fill == "#a0cbe8";
        ASSERT_TRUE(forward || fill == "#f28e2b" || fill == "#ffbe7d") << fill;
        boxes[std::stod(attribute(line, "y"))].emplace_back(
            std::stod(attribute(line, "x")) + std::stod(attribute(line, "width")) / 2, forward ? "F" : "B");
      } else if (line.rfind("<text ", 0) == 0 && line.find("text-anchor=\"middle\">") != std::string::npos &&
                 line.find("fill=") == std::string::npos) {  // the axis' ticks are grey
        const size_t open = line.find('>') + 1;
        labels[std::stod(attribute(line, "y"))].emplace_back(std::stod(attribute(line, "x")),
                                                              line.substr(open, line.find('<', open) - open));
      }
    }
    ASSERT_EQ(boxes.size(), static_cast<size_t>(p)) << "one row of boxes per rank";
    ASSERT_EQ(labels.size(), static_cast<size_t>(p));
    auto box_row = boxes.begin();
    auto label_row = labels.begin();
    for (int r = 0; r < p; ++r, ++box_row, ++label_row) {
      std::vector<std::string> want;
      for (const Action& a : compute.ranks[static_cast<size_t>(r)]) want.push_back(to_string(a));
      ASSERT_EQ(want.size(), static_cast<size_t>(2 * m * v));
      auto& row = box_row->second;
      auto& text = label_row->second;
      std::sort(row.begin(), row.end());
      std::sort(text.begin(), text.end());
      ASSERT_EQ(row.size(), want.size()) << "rank " << r;
      ASSERT_EQ(text.size(), want.size()) << "rank " << r;
      std::vector<std::string> got;
      for (size_t i = 0; i < row.size(); ++i) {
        EXPECT_NEAR(row[i].first, text[i].first, 0.5) << "rank " << r << ": a label off its box";
        got.push_back(row[i].second + text[i].second);
      }
      EXPECT_EQ(got, want) << "rank " << r;
    }
  }
}

}  // namespace
}  // namespace loom::parallel::pipeline
