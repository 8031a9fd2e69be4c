// What the Prometheus endpoint costs the step loop per report: MetricsServer::publish() of a
// two-rank snapshot, timed alone and while a client scrapes /metrics as fast as it can (the
// worst case for the mutex the two share), and one scrape's round trip.
//   build/bench/bench_metrics_publish [PUBLISHES]       (default 200000)
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "trainrun/obs/metrics_server.h"

using namespace trainrun;
using Clock = std::chrono::steady_clock;

namespace {

// One GET /metrics over a fresh connection; the response's size in bytes.
size_t scrape(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  size_t bytes = 0;
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) {
    const std::string req = "GET /metrics HTTP/1.0\r\n\r\n";
    if (send(fd, req.data(), req.size(), 0) > 0) {
      char buf[8192];
      for (ssize_t n; (n = recv(fd, buf, sizeof(buf), 0)) > 0;) bytes += static_cast<size_t>(n);
    }
  }
  close(fd);
  return bytes;
}

LiveMetrics snapshot(int64_t step) {
  LiveMetrics m;
  m.run = "bench";
  m.world = 2;
  m.total_steps = 1000000;
  m.reported = true;
  m.step = step;
  m.loss = 2.5 + 1e-6 * static_cast<double>(step);
  m.lr = 3e-4;
  m.grad_norm = 1.0;
  m.tokens_per_sec = 1e5;
  m.mfu = 0.4;
  m.step_time = 0.15;
  std::fill(std::begin(m.phases), std::end(m.phases), 0.02);
  m.stragglers = {{0, "node-a", false}, {1, "node-b", false}};
  m.checkpoint_step = 1000;
  m.checkpoint_path = "/nonexistent/step-0001000.h5";
  return m;
}

double ns_per_publish(MetricsServer& server, int n) {
  LiveMetrics m = snapshot(0);
  const auto t0 = Clock::now();
  for (int i = 0; i < n; ++i) {
    m.step = i;  // what the reporter changes between publishes
    server.publish(m);
  }
  return std::chrono::duration<double, std::nano>(Clock::now() - t0).count() / n;
}

}  // namespace

int main(int argc, char** argv) {
  const int n = argc > 1 ? std::atoi(argv[1]) : 200000;
  auto server = MetricsServer::start("127.0.0.1", 0);
  const int port = server->port();
  const double quiet = ns_per_publish(*server, n);

  std::atomic<bool> stop{false};
  std::atomic<int> scrapes{0};
  std::thread client([&] {
    while (!stop.load()) {
      if (scrape(port) > 0) scrapes.fetch_add(1);
    }
  });
  const auto t0 = Clock::now();
  const double busy = ns_per_publish(*server, n);
  const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  stop.store(true);
  client.join();

  const int rounds = 200;
  const auto t1 = Clock::now();
  size_t bytes = 0;
  for (int i = 0; i < rounds; ++i) bytes = scrape(port);
  const double scrape_us =
      std::chrono::duration<double, std::micro>(Clock::now() - t1).count() / rounds;

  std::printf("publish, nobody scraping:           %8.0f ns\n", quiet);
  std::printf("publish, scraped back to back:      %8.0f ns  (%d scrapes in %.2f s)\n", busy,
              scrapes.load(), seconds);
  std::printf("one scrape (connect, GET, %zu bytes): %6.0f us\n", bytes, scrape_us);
  return 0;
}
