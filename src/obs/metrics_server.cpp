// The one file that knows cpp-httplib (Debian's libcpp-httplib-dev; see the top meson.build).
#include "trainrun/metrics_server.h"

#include <fmt/format.h>
#include <httplib.h>
#include <sys/socket.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <thread>

#include "trainrun/errors.h"
#include "trainrun/thread_annotations.h"

namespace trainrun {

namespace {

namespace fs = std::filesystem;

constexpr size_t kWorkers = 2;
constexpr time_t kKeepAliveSeconds = 1;
constexpr size_t kKeepAliveRequests = 16;
constexpr time_t kIoTimeoutSeconds = 2;
constexpr const char* kContentType = "text/plain; version=0.0.4; charset=utf-8";

// The checkpoint as it is on disk now; nothing when it is absent (an async write in progress).
CheckpointFile stat_checkpoint(const std::string& path) {
  CheckpointFile f;
  if (path.empty()) return f;
  std::error_code ec;
  const auto size = fs::file_size(path, ec);
  if (ec) return f;
  const auto written = fs::last_write_time(path, ec);
  if (ec) return f;
  f.exists = true;
  f.size_bytes = static_cast<double>(size);
  f.age_seconds = std::chrono::duration<double>(fs::file_time_type::clock::now() - written).count();
  return f;
}

// SO_REUSEADDR (a restarted job may rebind over its predecessor's TIME_WAIT) but not httplib's
// default SO_REUSEPORT, under which a second run on the same port would bind too and share
// the scrapes instead of failing.
void reuse_address_only(int sock) {
  int yes = 1;
  setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
}

class HttpMetricsServer final : public MetricsServer {
 public:
  HttpMetricsServer() {
    server_.new_task_queue = [] { return new httplib::ThreadPool(kWorkers); };
    server_.set_socket_options(reuse_address_only);
    server_.set_keep_alive_max_count(kKeepAliveRequests);
    server_.set_keep_alive_timeout(kKeepAliveSeconds);
    server_.set_read_timeout(kIoTimeoutSeconds, 0);
    server_.set_write_timeout(kIoTimeoutSeconds, 0);
    server_.set_payload_max_length(0);
    server_.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
      res.set_content(render(), kContentType);
    });
  }

  ~HttpMetricsServer() override {
    if (!thread_.joinable()) return;  // never bound
    // stop() is a no-op until listen_after_bind() has begun, so repeat it until the thread ends.
    while (!finished_.load()) {
      server_.stop();
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    thread_.join();
  }

  void bind(const std::string& address, int port) {
    errno = 0;
    if (port == 0) {
      port_ = server_.bind_to_any_port(address);
    } else if (server_.bind_to_port(address, port)) {
      port_ = port;
    }
    if (port_ <= 0) {
      const int err = errno;
      throw ConfigError(fmt::format(
          "logging.prometheus_port: cannot serve metrics on {}:{}: {}. Choose a free port with "
          "--set logging.prometheus_port=N (0 turns the endpoint off){}",
          address, port, err ? std::strerror(err) : "the address cannot be bound",
          err == EADDRNOTAVAIL ? ", or an address of this host with logging.prometheus_address"
                               : ""));
    }
    thread_ = std::thread([this] {
      server_.listen_after_bind();
      finished_.store(true);
    });
  }

  int port() const override { return port_; }

  void publish(const LiveMetrics& m) override {
    MutexLock lock(mu_);
    latest_ = m;
  }

 private:
  std::string render() {
    LiveMetrics m;
    {
      MutexLock lock(mu_);
      m = latest_;
    }
    return prometheus_text(m, stat_checkpoint(m.checkpoint_path));
  }

  httplib::Server server_;
  std::thread thread_;
  std::atomic<bool> finished_{false};
  int port_ = 0;
  Mutex mu_;
  LiveMetrics latest_ GUARDED_BY(mu_);
};

}  // namespace

std::unique_ptr<MetricsServer> MetricsServer::start(const std::string& address, int port) {
  auto server = std::make_unique<HttpMetricsServer>();
  server->bind(address, port);
  return server;
}

}  // namespace trainrun
