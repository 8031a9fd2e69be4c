#include "logging.h"

#include <spdlog/sinks/ansicolor_sink.h>
#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <filesystem>
#include <vector>

#include "trainrun/core/no_follow.h"

namespace trainrun {

bool stdout_is_terminal() {
  return isatty(STDOUT_FILENO) != 0;
}

void setup_logging(const std::string& run_dir, int rank, bool console) {
  std::vector<spdlog::sink_ptr> sinks;
  if (console) {
    spdlog::sink_ptr s;
    if (isatty(STDERR_FILENO))
      s = std::make_shared<spdlog::sinks::ansicolor_stderr_sink_mt>();
    else
      s = std::make_shared<spdlog::sinks::stderr_sink_mt>();
    s->set_pattern("[%H:%M:%S] %^%l%$ %v");
    sinks.push_back(s);
  }
  if (!run_dir.empty()) {
    std::filesystem::create_directories(std::filesystem::path(run_dir) / "logs");
    const std::string log =
        (std::filesystem::path(run_dir) / "logs" / ("rank-" + std::to_string(rank) + ".log"))
            .string();
    refuse_link(log);  // spdlog opens it by name
    auto f = std::make_shared<spdlog::sinks::basic_file_sink_mt>(log);
    f->set_pattern("[%Y-%m-%d %H:%M:%S.%e] [%l] %v");
    sinks.push_back(f);
  }
  auto logger = std::make_shared<spdlog::logger>("trainrun", sinks.begin(), sinks.end());
  logger->set_level(spdlog::level::info);
  logger->flush_on(spdlog::level::info);
  spdlog::set_default_logger(logger);
}

}  // namespace trainrun
