// Schedule text form and the transfers between neighbouring virtual stages.
#include "loom/parallel/pipeline/schedule.hpp"

#include <algorithm>
#include <sstream>
#include <utility>

#include "loom/error.hpp"

namespace loom::parallel::pipeline {

namespace {

constexpr std::pair<ActionKind, const char*> kPrefixes[] = {
    {ActionKind::SendActivation, "SA"}, {ActionKind::RecvActivation, "RA"}, {ActionKind::SendGradient, "SG"},
    {ActionKind::RecvGradient, "RG"},   {ActionKind::Forward, "F"},         {ActionKind::Backward, "B"}};

// Reads a non-negative decimal at text[pos]; -1 when there is none.
int read_number(const std::string& text, size_t& pos) {
  const size_t start = pos;
  long value = 0;
  while (pos < text.size() && text[pos] >= '0' && text[pos] <= '9' && value < 1'000'000'000)
    value = value * 10 + (text[pos++] - '0');
  return pos == start ? -1 : static_cast<int>(value);
}

Action transfer(ActionKind kind, const Action& compute, int peer) {
  return {kind, compute.micro_batch, compute.chunk, peer};
}

}  // namespace

bool is_send(ActionKind kind) { return kind == ActionKind::SendActivation || kind == ActionKind::SendGradient; }
bool is_recv(ActionKind kind) { return kind == ActionKind::RecvActivation || kind == ActionKind::RecvGradient; }

Schedule make_schedule(int pp, int micro_batches, int chunks) {
  check(pp >= 1 && micro_batches >= 1 && chunks >= 1,
        "a pipeline schedule needs pp, micro-batches and chunks >= 1, got pp(", pp, "), micro-batches(", micro_batches,
        "), chunks(", chunks, ")");
  Schedule s{pp, micro_batches, chunks, {}};
  s.ranks.resize(static_cast<size_t>(pp));
  return s;
}

int transfer_partner_stage(const Schedule& s, ActionKind kind, int stage) {
  const bool downstream = kind == ActionKind::SendActivation || kind == ActionKind::RecvGradient;
  const int partner = downstream ? stage + 1 : stage - 1;
  return partner >= 0 && partner < s.virtual_stages() ? partner : -1;
}

Schedule with_transfers(const Schedule& compute_only) {
  Schedule s = compute_only;
  for (int r = 0; r < s.pp; ++r) {
    std::vector<Action> out;
    for (const Action& a : compute_only.ranks[r]) {
      check(!is_transfer(a.kind), "with_transfers: rank ", r, " already has the transfer ", to_string(a));
      const int k = s.virtual_stage(r, a.chunk);
      const bool fwd = a.kind == ActionKind::Forward;
      const ActionKind in = fwd ? ActionKind::RecvActivation : ActionKind::RecvGradient;
      const ActionKind send = fwd ? ActionKind::SendActivation : ActionKind::SendGradient;
      if (const int from = transfer_partner_stage(s, in, k); from >= 0) out.push_back(transfer(in, a, from % s.pp));
      out.push_back(a);
      if (const int to = transfer_partner_stage(s, send, k); to >= 0) out.push_back(transfer(send, a, to % s.pp));
    }
    s.ranks[r] = std::move(out);
  }
  return s;
}

Schedule without_transfers(const Schedule& s) {
  Schedule out = s;
  for (auto& actions : out.ranks) std::erase_if(actions, [](const Action& a) { return is_transfer(a.kind); });
  return out;
}

std::string to_string(const Action& a) {
  std::string text;
  for (const auto& [kind, prefix] : kPrefixes)
    if (kind == a.kind) text = prefix;
  std::ostringstream os;
  os << text << a.micro_batch;
  if (a.chunk != 0) os << "." << a.chunk;
  if (is_transfer(a.kind)) os << (is_send(a.kind) ? ">" : "<") << a.peer;
  return os.str();
}

Action parse_action(const std::string& token) {
  auto bad = [&] {
    fail("bad action '", token,
         "' (expected F<mb> or B<mb>, optionally with .<chunk>, or a transfer SA<mb>><peer>, RA<mb><<peer>, "
         "SG<mb>><peer>, RG<mb><<peer>)");
  };
  Action a;
  size_t pos = 0;
  bool known = false;
  for (const auto& [kind, prefix] : kPrefixes)
    if (!known && token.starts_with(prefix)) {
      a.kind = kind;
      pos = std::string(prefix).size();
      known = true;
    }
  if (!known) bad();
  a.micro_batch = read_number(token, pos);
  if (a.micro_batch < 0) bad();
  if (pos < token.size() && token[pos] == '.') {
    a.chunk = read_number(token, ++pos);
    if (a.chunk < 0) bad();
  }
  if (is_transfer(a.kind)) {
    if (pos >= token.size() || token[pos++] != (is_send(a.kind) ? '>' : '<')) bad();
    a.peer = read_number(token, pos);
    if (a.peer < 0) bad();
  }
  if (pos != token.size()) bad();
  return a;
}

std::string format_schedule(const Schedule& s) {
  std::ostringstream os;
  os << "pp=" << s.pp << " micro_batches=" << s.micro_batches << " chunks=" << s.chunks << "\n";
  for (int r = 0; r < s.pp; ++r) {
    os << "rank " << r << ":";
    for (const Action& a : s.ranks[r]) os << " " << to_string(a);
    os << "\n";
  }
  return os.str();
}

Schedule parse_schedule(const std::string& text) {
  Schedule s;
  int header_pp = -1, header_m = -1, header_v = -1;
  bool any_transfer = false;
  std::istringstream lines(text);
  std::string line;
  for (int line_no = 1; std::getline(lines, line); ++line_no) {
    std::istringstream words(line.substr(0, line.find('#')));
    std::vector<std::string> tokens;
    for (std::string w; words >> w;) tokens.push_back(w);
    if (tokens.empty()) continue;
    if (tokens[0].find('=') != std::string::npos) {
      check(s.ranks.empty() && header_pp < 0, "line ", line_no, ": the header 'pp=... micro_batches=... chunks=...' ",
            "must come once, before the rank lines");
      for (const std::string& t : tokens) {
        const size_t eq = t.find('=');
        size_t pos = eq + 1;
        const int value = eq == std::string::npos ? -1 : read_number(t, pos);
        const std::string key = t.substr(0, eq);
        check(value >= 0 && pos == t.size() && (key == "pp" || key == "micro_batches" || key == "chunks"), "line ",
              line_no, ": bad header entry '", t, "' (expected pp=N, micro_batches=N or chunks=N)");
        (key == "pp" ? header_pp : key == "micro_batches" ? header_m : header_v) = value;
      }
      continue;
    }
    size_t first = 0;
    const int rank = static_cast<int>(s.ranks.size());
    if (tokens[0] == "rank") {
      check(tokens.size() >= 2 && tokens[1] == std::to_string(rank) + ":", "line ", line_no,
            ": expected the label 'rank ", rank, ":' (rank lines come in order)");
      first = 2;
    }
    std::vector<Action>& actions = s.ranks.emplace_back();
    for (size_t i = first; i < tokens.size(); ++i) {
      try {
        actions.push_back(parse_action(tokens[i]));
      } catch (const Error& e) {
        fail("line ", line_no, " (rank ", rank, "): ", e.what());
      }
      any_transfer = any_transfer || is_transfer(actions.back().kind);
    }
  }
  check(!s.ranks.empty(), "the schedule has no rank lines (expected one line per rank, like 'F0 F1 B0 B1')");
  s.pp = static_cast<int>(s.ranks.size());
  check(header_pp < 0 || header_pp == s.pp, "the header says pp=", header_pp, " but there are ", s.pp, " rank lines");
  int max_mb = 0, max_chunk = 0;
  for (const auto& actions : s.ranks)
    for (const Action& a : actions) {
      max_mb = std::max(max_mb, a.micro_batch);
      max_chunk = std::max(max_chunk, a.chunk);
    }
  s.micro_batches = header_m >= 0 ? header_m : max_mb + 1;
  s.chunks = header_v >= 0 ? header_v : max_chunk + 1;
  return any_transfer ? s : with_transfers(s);
}

}  // namespace loom::parallel::pipeline
