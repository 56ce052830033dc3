#include "loom/train/run_directory.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "loom/data/input_file.hpp"
#include "loom/error.hpp"
#include "loom/train/checkpoint.hpp"
#include "loom/train/sharded_checkpoint.hpp"

namespace loom::train {

namespace fs = std::filesystem;

namespace {

struct Owner {
  std::string host;
  int64_t pid = 0;  // 0: the lock file could not be read
};

std::string this_host() {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0) return "unknown";
  return name;
}

// The lock files this process holds: the trainers sharing each, and the descriptor that holds
// its flock.
struct Held {
  int trainers = 0;
  int fd = -1;
};
std::mutex& registry_mutex() {
  static std::mutex m;
  return m;
}
std::map<std::string, Held>& registry() {
  static std::map<std::string, Held> held;
  return held;
}

// An exclusive flock on fd's file, which must still be the one at path (a holder that ended
// unlinks its file: a descriptor opened before that names a file no longer in the directory).
bool lock_file_at(int fd, const std::string& path) {
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) return false;
  struct stat by_fd {}, by_path {};
  if (::fstat(fd, &by_fd) == 0 && ::stat(path.c_str(), &by_path) == 0 && by_fd.st_ino == by_path.st_ino &&
      by_fd.st_dev == by_path.st_dev)
    return true;
  ::flock(fd, LOCK_UN);
  return false;
}

bool write_owner(int fd, const std::string& text) {
  return ::ftruncate(fd, 0) == 0 && ::pwrite(fd, text.data(), text.size(), 0) == static_cast<ssize_t>(text.size());
}

// A lock file's pid: a positive pid_t, else 0 (no process). Converting 1e300 is undefined, and
// kill() would have truncated 2^32 + 1 to init's pid 1, which always lives.
int64_t pid_in(const nlohmann::json& pid) {
  constexpr uint64_t kMaxPid = std::numeric_limits<pid_t>::max();
  if (pid.is_number_unsigned()) return pid.get<uint64_t>() <= kMaxPid ? static_cast<int64_t>(pid.get<uint64_t>()) : 0;
  return pid.is_number_integer() && pid.get<int64_t>() > 0 && pid.get<int64_t>() <= static_cast<int64_t>(kMaxPid)
             ? pid.get<int64_t>()
             : 0;
}

Owner read_owner(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  try {
    const nlohmann::json j = nlohmann::json::parse(text.str());
    return {j.at("host").get<std::string>(), pid_in(j.at("pid"))};
  } catch (const nlohmann::json::exception&) {
    return {};
  }
}

// A process that exists (EPERM: it does, under another user) and has not ended: a zombie
// (state Z in /proc/<pid>/stat, after the command name's closing parenthesis) has ended,
// though nobody reaped it yet.
bool alive(int64_t pid) {
  if (::kill(static_cast<pid_t>(pid), 0) != 0 && errno != EPERM) return false;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  const size_t paren = text.rfind(')');
  return paren == std::string::npos || paren + 2 >= text.size() || (text[paren + 2] != 'Z' && text[paren + 2] != 'X');
}

}  // namespace

RunLock::RunLock(const std::string& dir, bool quiet) : dir_(dir), path_((fs::path(dir) / kLockName).string()) {
  std::error_code ec;
  created_dir_ = !fs::exists(dir, ec);
  fs::create_directories(dir);
  const std::string host = this_host();
  const std::string mine = nlohmann::json{{"host", host}, {"pid", ::getpid()}}.dump() + "\n";
  std::lock_guard<std::mutex> guard(registry_mutex());
  if (auto it = registry().find(path_); it != registry().end()) {
    ++it->second.trainers;  // another trainer of this process
    return;
  }
  // A lock being written, or an owner of this host that is ending (mpirun may return before
  // the ranks it killed are gone), is looked at again until then.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while (true) {
    const bool waited_enough = std::chrono::steady_clock::now() > deadline;
    const int fd = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd >= 0) {
      // The owner holds an flock on its file for as long as it lives: the kernel ends it with
      // the process, and a takeover below needs it.
      if (!lock_file_at(fd, path_)) {  // taken over between our create and our flock
        ::close(fd);
        continue;
      }
      if (!write_owner(fd, mine)) {
        ::close(fd);
        fs::remove(path_, ec);
        fail("cannot write the lock file '", path_, "'");
      }
      registry()[path_] = {1, fd};
      return;
    }
    check(errno == EEXIST, "cannot create the lock file '", path_, "': ", std::strerror(errno));
    const Owner owner = read_owner(path_);
    check(owner.pid > 0 || !waited_enough, "run directory '", dir, "' has a lock file '", path_,
          "' that names no owner; delete it if no run uses the directory");
    // This pid but not this process's registry: a lock left by an earlier process that had the pid.
    const bool dead = owner.host == host && (owner.pid == ::getpid() || !alive(owner.pid));
    if (owner.pid <= 0 || (!dead && owner.host == host && !waited_enough)) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      continue;
    }
    check(dead, "run directory '", dir, "' is in use by pid ", owner.pid,
          " on host ", owner.host, " (lock file '", path_,
          "'); wait for that run to end or use another out_dir (delete the lock file only if that process is gone)");
    // The owner is gone: take its file over in place, under its flock. Two processes that both
    // found it dead open the same file and only one gets the flock (deleting the file and
    // creating a new one let both in: the second deleted the first's new lock).
    const int stale = ::open(path_.c_str(), O_RDWR | O_CLOEXEC);
    if (stale < 0) continue;  // gone meanwhile: create it again
    if (!lock_file_at(stale, path_) || read_owner(path_).pid != owner.pid) {
      ::close(stale);  // another process is taking it over, or took it: look again
      check(!waited_enough, "run directory '", dir, "' is being taken over by another process (lock file '", path_,
            "'); wait for that run to end or use another out_dir");
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      continue;
    }
    if (!write_owner(stale, mine)) {
      ::close(stale);
      fail("cannot write the lock file '", path_, "'");
    }
    if (!quiet)
      std::printf("taking over the lock of '%s' from pid %lld on %s, which no longer runs\n", dir.c_str(),
                  static_cast<long long>(owner.pid), owner.host.c_str());
    registry()[path_] = {1, stale};
    return;
  }
}

RunLock::~RunLock() {
  std::lock_guard<std::mutex> guard(registry_mutex());
  auto it = registry().find(path_);
  if (it == registry().end() || --it->second.trainers > 0) return;
  const int fd = it->second.fd;
  registry().erase(it);
  // Only this process's lock: a later owner's stays (one that took over a lock it thought stale).
  const Owner owner = read_owner(path_);
  std::error_code ec;
  if (owner.host == this_host() && owner.pid == ::getpid()) fs::remove(path_, ec);
  ::close(fd);  // releases the flock, after the file left the directory
  if (created_dir_ && fs::is_empty(dir_, ec)) fs::remove(dir_, ec);
}

namespace {
// Whether metrics.jsonl holds a record besides the {"kind":"start",...} ones each run begins with.
// A last line without its '\n' is a record a kill cut short, no step (MetricsLog drops it).
bool logs_a_step(const std::string& path) {
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line.rfind("{\"kind\":\"start\"", 0) == 0) continue;
    // An unended last line is a record only when whole (metrics_log.cpp keeps it then).
    if (!in.eof() || nlohmann::json::accept(line)) return true;
  }
  return false;
}
}  // namespace

std::vector<std::string> previous_run_files(const std::string& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string n = entry.path().filename().string();
    // A metrics.jsonl without a step's record is a trainer that never logged one (killed before
    // its first step, or one a test built): nothing of a run to keep.
    const bool logged = n == "metrics.jsonl" && entry.is_regular_file(ec) && logs_a_step(entry.path().string());
    if (checkpoint_step(n) >= 0 || n == "latest" || logged) out.push_back(n);
  }
  std::sort(out.begin(), out.end());
  return out;
}

namespace {

// Whether config resumes from a checkpoint of its own out_dir.
bool resumes_from_out_dir(const TrainConfig& config) {
  if (config.resume == "latest" || config.resume == "auto") return true;
  if (config.resume.empty()) return false;
  std::error_code ec;
  const fs::path resume(config.resume);
  return fs::equivalent(resume, config.out_dir, ec) || fs::equivalent(resume.parent_path(), config.out_dir, ec);
}

std::string listing(const std::vector<std::string>& names) {
  std::string out;
  for (size_t i = 0; i < names.size() && i < 4; ++i) out += (i ? ", " : "") + names[i];
  return names.size() > 4 ? out + ", ... (" + std::to_string(names.size()) + " in all)" : out;
}

}  // namespace

RunDirectory::RunDirectory(const TrainConfig& config, comm::ProcessGroup& world, bool quiet)
    : out_dir_(config.out_dir), overwrite_(config.overwrite), quiet_(quiet), world_(world) {
  if (out_dir_.empty()) return;
  on_every_rank(world_, [&] {
    if (world_.rank() != 0) return;
    const std::string kind = data::file_kind(out_dir_);
    check(kind == "missing" || kind == "a directory", "out_dir '", out_dir_, "' is ", kind, ", not a directory");
    auto lock = std::make_unique<RunLock>(out_dir_, quiet_);
    const bool resumes_here = resumes_from_out_dir(config);
    // A mistyped resume path is the problem to name, not the run that out_dir holds.
    std::error_code ec;
    check(resumes_here || config.resume.empty() || fs::exists(config.resume, ec), "no checkpoint at '", config.resume,
          "'");
    check(!overwrite_ || !resumes_here, "overwrite deletes the run in '", out_dir_, "' that resume = '", config.resume,
          "' continues: give one or the other");
    const std::vector<std::string> previous = previous_run_files(out_dir_);
    // A run stopped (Ctrl-C) before its first save leaves nothing to continue; say why and the
    // resume that starts fresh then.
    const bool holds_checkpoint = std::any_of(previous.begin(), previous.end(),
                                              [](const std::string& n) { return checkpoint_step(n) >= 0; });
    check(config.resume != "latest" || holds_checkpoint, "resume = 'latest', but out_dir '", out_dir_,
          "' holds no checkpoint (a run saves at its end and every checkpoint_every steps): --resume auto starts "
          "fresh where there is none");
    check(resumes_here || overwrite_ || previous.empty(), "out_dir '", out_dir_, "' already holds a run (",
          listing(previous), "): continue it with --resume latest|auto, start over with --overwrite (which deletes it), "
          "or choose another --out-dir");
    lock_ = std::move(lock);
  });
}

void RunDirectory::start() {
  if (out_dir_.empty() || !overwrite_) return;
  on_every_rank(world_, [&] {
    if (lock_ == nullptr) return;  // rank 0 holds the lock and does the work
    const std::vector<std::string> previous = previous_run_files(out_dir_);
    if (previous.empty()) return;
    std::vector<std::string> doomed = previous;
    // And that run's unfinished writes and the files it wrote beside them: a trace.json the new
    // run does not rewrite (it traces nothing) would be drawn by `loom report` as the new run's.
    for (const auto& entry : fs::directory_iterator(out_dir_)) {
      const std::string n = entry.path().filename().string();
      if (n == ".latest.tmp" || n.rfind(".checkpoint-", 0) == 0 || n == "metrics.jsonl" || n == "memory.json" ||
          n == "trace.json" || n == "report.html")
        doomed.push_back(n);
    }
    std::sort(doomed.begin(), doomed.end());
    doomed.erase(std::unique(doomed.begin(), doomed.end()), doomed.end());
    for (const std::string& name : doomed) fs::remove_all(fs::path(out_dir_) / name);
    if (!quiet_)
      std::printf("overwrite: deleted the previous run in '%s' (%s)\n", out_dir_.c_str(), listing(previous).c_str());
  });
}

}  // namespace loom::train
