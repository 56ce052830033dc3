// The communication threads' priority (comm/comm_priority.hpp): LOOM_COMM_NICE read and
// checked, and the value given to the thread that asks for it. Raising nice is always
// permitted, so the mechanism is tested with a positive value; lowering it needs CAP_SYS_NICE.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdlib>
#include <optional>
#include <string>
#include <thread>

#include "loom/comm/comm_priority.hpp"
#include "loom/error.hpp"

namespace loom::comm {
namespace {

// Sets LOOM_COMM_NICE for the scope (unset: nullopt), restoring what it was.
class NiceVariable {
 public:
  explicit NiceVariable(std::optional<std::string> value) {
    if (const char* e = std::getenv("LOOM_COMM_NICE")) before_ = e;
    if (value)
      setenv("LOOM_COMM_NICE", value->c_str(), 1);
    else
      unsetenv("LOOM_COMM_NICE");
  }
  ~NiceVariable() {
    if (before_)
      setenv("LOOM_COMM_NICE", before_->c_str(), 1);
    else
      unsetenv("LOOM_COMM_NICE");
  }

 private:
  std::optional<std::string> before_;
};

TEST(CommPriority, TheVariableIsANiceValue) {
  {
    NiceVariable unset(std::nullopt);
    EXPECT_EQ(comm_nice_from_environment(), -20);
  }
  for (const auto& [text, nice] : {std::pair{"0", 0}, {"-5", -5}, {"19", 19}, {"-20", -20}}) {
    NiceVariable v(std::string{text});
    EXPECT_EQ(comm_nice_from_environment(), nice) << text;
  }
  for (const char* bad : {"", "high", "-21", "20", "5x", "99999999999999999999"}) {
    NiceVariable v(std::string{bad});
    try {
      comm_nice_from_environment();
      ADD_FAILURE() << "accepted LOOM_COMM_NICE='" << bad << "'";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("LOOM_COMM_NICE must be an integer from -20 to 19"), std::string::npos)
          << e.what();
    }
  }
}

int nice_of_a_thread_given(int nice) {
  int seen = 0;
  std::thread t([&] {
    prioritize_this_communication_thread(nice);
    errno = 0;
    seen = getpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)));
  });
  t.join();
  return seen;
}

TEST(CommPriority, TheThreadGetsTheValue) {
  const int own = getpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)));
  EXPECT_EQ(nice_of_a_thread_given(std::min(own + 5, 19)), std::min(own + 5, 19));
  EXPECT_EQ(nice_of_a_thread_given(0), own);  // 0: left as created
  EXPECT_NE(comm_priority_report(), "");
}

}  // namespace
}  // namespace loom::comm
