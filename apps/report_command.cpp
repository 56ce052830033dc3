// `loom report RUN_DIR`: writes RUN_DIR/report.html, one self-contained page about a run.
#include <cstdio>
#include <memory>

#include "commands.hpp"
#include "loom/report/run_report.hpp"

namespace loom::apps {

Runner add_report_command(CLI::App& sub) {
  auto run_dir = std::make_shared<std::string>();
  sub.add_option("run_dir", *run_dir, "a run directory (the out_dir of loom train: metrics.jsonl, memory.json, trace.json)")
      ->required();
  sub.footer("Example: loom train --config configs/shakespeare.toml --steps 200 --trace --out-dir runs/demo && "
             "loom report runs/demo");
  return [run_dir]() {
    const std::string path = report::write_run_report(*run_dir);
    std::printf("wrote %s\n", path.c_str());
    return 0;
  };
}

}  // namespace loom::apps
