// The Prometheus endpoint: the exact exposition of a known snapshot (names, HELP/TYPE lines,
// labels and their escaping, numbers), and the server over a real socket: an ephemeral port,
// GET /metrics with the latest published snapshot, 404 elsewhere, 413 for a body, a port in use
// refused with the key to change, a stop that joins promptly, and hostile clients (slow ones,
// a flood) that cannot keep scrapes out.
#include <arpa/inet.h>
#include <doctest/doctest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <string>
#include <vector>

#include "temp_dir.h"
#include "trainrun/core/errors.h"
#include "trainrun/obs/metrics_server.h"
#include "trainrun/obs/prometheus.h"

using namespace trainrun;

namespace {

LiveMetrics known_snapshot() {
  LiveMetrics m;
  m.run = "demo";
  m.world = 2;
  m.total_steps = 100;
  m.reported = true;
  m.step = 40;
  m.loss = 2.5;
  m.lr = 0.0003;
  m.grad_norm = 1.25;
  m.tokens_per_sec = 12000;
  m.mfu = 0.125;
  m.step_time = 0.5;
  const double phases[kLivePhaseCount] = {0.01, 0.1, 0.2, 0.05, 0.02, 0.125, 0};
  std::copy(std::begin(phases), std::end(phases), m.phases);
  m.tokens_seen = 163840;
  m.val_step = 40;
  m.val_loss = 2.75;
  m.restarts = 1;
  m.bad_steps = 3;
  m.rollbacks = 1;
  m.loss_spikes = 0;
  m.stragglers = {{0, "node-a", false}, {1, "node-b", true}};
  m.checkpoint_step = 40;
  m.checkpoint_path = "runs/demo/checkpoints/step-0000040.h5";
  return m;
}

const char* const kKnownText = R"(# HELP trainrun_info The run this endpoint serves; always 1.
# TYPE trainrun_info gauge
trainrun_info{run="demo"} 1
# HELP trainrun_world_size Ranks in the job.
# TYPE trainrun_world_size gauge
trainrun_world_size 2
# HELP trainrun_total_steps Optimizer steps the run is configured for (train.steps).
# TYPE trainrun_total_steps gauge
trainrun_total_steps 100
# HELP trainrun_step The last reported optimizer step (goes back on a rollback).
# TYPE trainrun_step gauge
trainrun_step 40
# HELP trainrun_loss Training loss at the last reported step (nats per token).
# TYPE trainrun_loss gauge
trainrun_loss 2.5
# HELP trainrun_learning_rate Learning rate at the last reported step.
# TYPE trainrun_learning_rate gauge
trainrun_learning_rate 0.0003
# HELP trainrun_grad_norm Global gradient norm before clipping at the last reported step.
# TYPE trainrun_grad_norm gauge
trainrun_grad_norm 1.25
# HELP trainrun_tokens_per_second Training tokens per second over all ranks.
# TYPE trainrun_tokens_per_second gauge
trainrun_tokens_per_second 12000
# HELP trainrun_mfu_ratio Model FLOPs utilisation: a fraction of all ranks' sgemm peak.
# TYPE trainrun_mfu_ratio gauge
trainrun_mfu_ratio 0.125
# HELP trainrun_step_seconds Wall time of the last reported step.
# TYPE trainrun_step_seconds gauge
trainrun_step_seconds 0.5
# HELP trainrun_step_phase_seconds Rank 0's time in each phase of the last reported step.
# TYPE trainrun_step_phase_seconds gauge
trainrun_step_phase_seconds{phase="data"} 0.01
trainrun_step_phase_seconds{phase="forward"} 0.1
trainrun_step_phase_seconds{phase="backward"} 0.2
trainrun_step_phase_seconds{phase="comm"} 0.05
trainrun_step_phase_seconds{phase="comm_exposed"} 0.02
trainrun_step_phase_seconds{phase="optimizer"} 0.125
trainrun_step_phase_seconds{phase="checkpoint"} 0
# HELP trainrun_tokens_seen Training tokens consumed so far (goes back on a rollback).
# TYPE trainrun_tokens_seen gauge
trainrun_tokens_seen 163840
# HELP trainrun_val_loss Validation loss at the last evaluation.
# TYPE trainrun_val_loss gauge
trainrun_val_loss 2.75
# HELP trainrun_val_step Step of the last evaluation.
# TYPE trainrun_val_step gauge
trainrun_val_step 40
# HELP trainrun_restarts_total Relaunches of this job after a failure.
# TYPE trainrun_restarts_total counter
trainrun_restarts_total 1
# HELP trainrun_bad_steps_total Steps skipped for a non-finite loss or gradient norm by this process.
# TYPE trainrun_bad_steps_total counter
trainrun_bad_steps_total 3
# HELP trainrun_rollbacks_total Rollbacks to the last good checkpoint by this process.
# TYPE trainrun_rollbacks_total counter
trainrun_rollbacks_total 1
# HELP trainrun_loss_spikes_total Loss spikes warned about by this process.
# TYPE trainrun_loss_spikes_total counter
trainrun_loss_spikes_total 0
# HELP trainrun_straggler 1 when the last straggler check named the rank, else 0.
# TYPE trainrun_straggler gauge
trainrun_straggler{rank="0",host="node-a"} 0
trainrun_straggler{rank="1",host="node-b"} 1
# HELP trainrun_checkpoint_step Step of the newest checkpoint written or restored.
# TYPE trainrun_checkpoint_step gauge
trainrun_checkpoint_step 40
# HELP trainrun_checkpoint_age_seconds Seconds since the newest checkpoint was written.
# TYPE trainrun_checkpoint_age_seconds gauge
trainrun_checkpoint_age_seconds 12.5
# HELP trainrun_checkpoint_size_bytes Size of the newest checkpoint (all its files).
# TYPE trainrun_checkpoint_size_bytes gauge
trainrun_checkpoint_size_bytes 1048576
)";

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// A connected TCP socket to 127.0.0.1:port.
int connect_to(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
  return fd;
}

// One HTTP/1.0 request to 127.0.0.1:port; the whole response (the server closes after it).
std::string http(int port, const std::string& request) {
  const int fd = connect_to(port);
  REQUIRE(send(fd, request.data(), request.size(), 0) == static_cast<ssize_t>(request.size()));
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = recv(fd, buf, sizeof(buf), 0)) > 0;) out.append(buf, static_cast<size_t>(n));
  close(fd);
  return out;
}

std::string get(int port, const std::string& path) {
  return http(port, "GET " + path + " HTTP/1.0\r\nHost: localhost\r\n\r\n");
}

}  // namespace

TEST_CASE("the exposition of a known snapshot, line for line") {
  CHECK(prometheus_text(known_snapshot(), {true, 1048576, 12.5}) == kKnownText);
}

TEST_CASE("what has no value yet is left out, not written as NaN") {
  LiveMetrics m;
  m.run = "fresh";
  const std::string text = prometheus_text(m, {});
  CHECK(has(text, "trainrun_info{run=\"fresh\"} 1\n"));
  CHECK(has(text, "trainrun_bad_steps_total 0\n"));
  for (const std::string absent : {"trainrun_loss ", "trainrun_val_loss ", "trainrun_straggler",
                                   "trainrun_checkpoint_step", "NaN"})
    CHECK_MESSAGE(!has(text, absent), absent);
  // A checkpoint named but not on disk yet (an async write): its step only.
  m.checkpoint_step = 10;
  const std::string pending = prometheus_text(m, {});
  CHECK(has(pending, "trainrun_checkpoint_step 10\n"));
  CHECK(!has(pending, "trainrun_checkpoint_size_bytes"));
}

TEST_CASE("label values and numbers as the text format writes them") {
  CHECK(prometheus_label_value(R"(a"b\c)"
                               "\nd") == R"(a\"b\\c\nd)");
  CHECK(prometheus_label_value("plain-host.example") == "plain-host.example");
  LiveMetrics m;
  m.run = "say \"hi\"";
  m.stragglers = {{3, "weird\\host\n", true}};
  const std::string text = prometheus_text(m, {});
  CHECK(has(text, R"(trainrun_info{run="say \"hi\""} 1)"));
  CHECK(has(text, R"(trainrun_straggler{rank="3",host="weird\\host\n"} 1)"));
  CHECK(prometheus_number(NAN) == "NaN");
  CHECK(prometheus_number(INFINITY) == "+Inf");
  CHECK(prometheus_number(-INFINITY) == "-Inf");
  CHECK(prometheus_number(1e-5) == "1e-05");
  CHECK(prometheus_number(0.1) == "0.1");
  CHECK(std::stod(prometheus_number(2.0 / 3.0)) == 2.0 / 3.0);  // round trip
}

TEST_CASE("the server answers /metrics with the latest snapshot and 404 elsewhere") {
  testing::TempDir dir;
  auto server = MetricsServer::start("127.0.0.1", 0);
  const int port = server->port();
  REQUIRE(port > 0);

  std::string r = get(port, "/metrics");
  CHECK(has(r, "HTTP/1.1 200"));
  CHECK(has(r, "Content-Type: text/plain; version=0.0.4; charset=utf-8"));
  CHECK(has(r, "trainrun_info{run=\"\"} 1"));
  CHECK(!has(r, "trainrun_loss "));

  LiveMetrics m = known_snapshot();
  const std::string ckpt = dir / "step-0000040.h5";
  std::ofstream(ckpt) << std::string(1000, 'x');
  m.checkpoint_path = ckpt;
  server->publish(m);
  r = get(port, "/metrics");
  CHECK(has(r, "\r\n\r\n# HELP trainrun_info"));
  CHECK(has(r, "trainrun_loss 2.5\n"));
  CHECK(has(r, "trainrun_straggler{rank=\"1\",host=\"node-b\"} 1\n"));
  CHECK(has(r, "trainrun_checkpoint_size_bytes 1000\n"));
  CHECK(has(r, "trainrun_checkpoint_age_seconds "));

  CHECK(has(get(port, "/"), "HTTP/1.1 404"));
  CHECK(has(get(port, "/metrics/x"), "HTTP/1.1 404"));
  CHECK(has(http(port, "POST /metrics HTTP/1.0\r\nContent-Length: 0\r\n\r\n"), "HTTP/1.1 404"));
  const std::string head = http(port, "HEAD /metrics HTTP/1.0\r\n\r\n");
  CHECK(has(head, "HTTP/1.1 200"));
  CHECK(!has(head, "trainrun_loss"));
}

TEST_CASE("a port in use is refused, naming the key and the way out") {
  auto first = MetricsServer::start("127.0.0.1", 0);
  try {
    MetricsServer::start("127.0.0.1", first->port());
    FAIL("a second server bound a port in use");
  } catch (const ConfigError& e) {
    const std::string what = e.what();
    CHECK(has(what, "logging.prometheus_port"));
    CHECK(has(what, std::to_string(first->port())));
    CHECK(has(what, "Address already in use"));
    CHECK(has(what, "--set logging.prometheus_port=N"));
    CHECK(e.code() == kExitUsage);
  }
  CHECK_THROWS_AS(MetricsServer::start("203.0.113.7", 0), ConfigError);  // not this host's
}

TEST_CASE("stopping joins promptly, also with a client holding a keep-alive connection open") {
  auto server = MetricsServer::start("127.0.0.1", 0);
  const int port = server->port();
  // A connection that sent nothing: a worker waits on it until a timeout.
  const int idle = connect_to(port);
  CHECK(has(get(port, "/metrics"), "HTTP/1.1 200"));
  const auto t0 = std::chrono::steady_clock::now();
  server.reset();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  close(idle);
  CHECK(seconds < 3.0);  // bounded by the read timeout (2 s), never by the client
  // Started and stopped at once: the stop must not miss a server that has not begun listening.
  const auto t1 = std::chrono::steady_clock::now();
  MetricsServer::start("127.0.0.1", 0).reset();
  CHECK(std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count() < 1.0);
}

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

TEST_CASE("a request with a body is refused unread, and an oversized header too") {
  auto server = MetricsServer::start("127.0.0.1", 0);
  const int port = server->port();
  const std::string post = http(port, "POST /metrics HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello");
  CHECK(has(post, "HTTP/1.1 413"));
  CHECK(!has(post, "trainrun_info"));
  CHECK(has(http(port, "GET /metrics HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"),
            "HTTP/1.1 413"));
  CHECK(has(http(port, "GET /metrics HTTP/1.0\r\nX-Big: " + std::string(9000, 'a') + "\r\n\r\n"),
            "HTTP/1.1 431"));
  CHECK(!has(http(port, "not http at all\r\n\r\n"), "200"));  // closed, and the server lives
  CHECK(has(get(port, "/metrics"), "HTTP/1.1 200"));
}

// Issue 27 item 4: clients that trickle a header line now and then held the old server's two
// workers for as long as they liked, and scrapes timed out behind them.
TEST_CASE("fifty slow clients neither delay scrapes nor keep their connections past the deadline") {
  auto server = MetricsServer::start("127.0.0.1", 0);
  const int port = server->port();
  std::vector<int> slow;
  std::vector<std::chrono::steady_clock::time_point> connected;  // each one's own clock
  for (int i = 0; i < 50; ++i) {
    connected.push_back(std::chrono::steady_clock::now());
    slow.push_back(connect_to(port));
    const std::string start = "GET /metrics HTTP/1.1\r\nHost: x\r\n";
    REQUIRE(send(slow.back(), start.data(), start.size(), MSG_NOSIGNAL) > 0);
  }
  const auto t0 = std::chrono::steady_clock::now();
  double slowest_scrape = 0;
  int scrapes = 0;
  size_t closed_by_server = 0;
  std::vector<bool> closed(slow.size(), false);
  // For four seconds: every client sends another header line (never the blank line that ends
  // the request) every 250 ms, and a scrape is timed in between.
  while (seconds_since(t0) < 4.0) {
    for (size_t i = 0; i < slow.size(); ++i) {
      if (closed[i]) continue;
      const std::string line = "X-Slow: still here\r\n";
      char c;
      const bool eof = recv(slow[i], &c, 1, MSG_DONTWAIT) == 0;
      if (eof || send(slow[i], line.data(), line.size(), MSG_NOSIGNAL) < 0) {
        closed[i] = true;
        ++closed_by_server;
        CHECK_MESSAGE(seconds_since(connected[i]) > 1.0, "closed before the deadline");
      }
    }
    const auto s0 = std::chrono::steady_clock::now();
    CHECK(has(get(port, "/metrics"), "HTTP/1.1 200"));
    slowest_scrape = std::max(slowest_scrape, seconds_since(s0));
    ++scrapes;
    usleep(250000);
  }
  for (const int fd : slow) close(fd);
  CHECK(scrapes >= 10);
  CHECK_MESSAGE(slowest_scrape < 1.0, slowest_scrape);
  // Each was cut at the two-second deadline although it never stopped sending.
  CHECK(closed_by_server == slow.size());
}

TEST_CASE("a flood of connections beyond the limit is shed, and scrapes answer once it ages out") {
  auto server = MetricsServer::start("127.0.0.1", 0);
  const int port = server->port();
  std::vector<int> flood;
  for (int i = 0; i < 300; ++i) flood.push_back(connect_to(port));
  const auto t0 = std::chrono::steady_clock::now();
  bool answered = false;
  while (!answered && seconds_since(t0) < 5.0) {
    answered = has(get(port, "/metrics"), "HTTP/1.1 200");
    if (!answered) usleep(100000);
  }
  CHECK(answered);
  for (const int fd : flood) close(fd);
}
