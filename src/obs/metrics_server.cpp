// The one file that knows Boost.Beast / Boost.Asio (Debian's libboost-dev; see the top
// meson.build).
//
// Why Beast and not a thread-per-connection server (cpp-httplib, which this replaced): there a
// client that sends a header line every second and a half holds a worker for as long as it
// likes, and a few such clients take the endpoint. Here one thread runs every connection
// asynchronously, so a slow client holds only its own socket, and beast::tcp_stream's
// expires_after() is a deadline on the whole exchange (request read, answer written), not on
// each read as socket timeouts are.
#include "trainrun/obs/metrics_server.h"

#include <fmt/format.h>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <filesystem>
#include <memory>
#include <system_error>
#include <thread>

#include "trainrun/core/errors.h"
#include "trainrun/core/thread_annotations.h"

namespace trainrun {

namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace fs = std::filesystem;
using tcp = asio::ip::tcp;

// The whole exchange, from accept to the last byte of the answer: docs/observability.md.
constexpr auto kDeadline = std::chrono::seconds(2);
constexpr size_t kMaxHeaderBytes = 8192;  // more: 431, as web servers answer
// Connections beyond this are closed as soon as they are accepted. Each holds a slot for the
// deadline at most, so a flood must keep reconnecting to keep scrapes out.
constexpr size_t kMaxConnections = 256;
constexpr const char* kContentType = "text/plain; version=0.0.4; charset=utf-8";

// The checkpoint as it is on disk now; nothing when it is absent (an async write in progress).
CheckpointFile stat_checkpoint(const std::string& path) {
  CheckpointFile f;
  if (path.empty()) return f;
  std::error_code ec;
  // A checkpoint is a folder (its files' sizes added up; written when its MANIFEST was, the
  // commit point), or an older single file.
  uintmax_t size = 0;
  fs::path stamp = path;
  if (fs::is_directory(path, ec)) {
    for (const auto& e : fs::directory_iterator(path, ec))
      if (e.is_regular_file(ec)) size += e.file_size(ec);
    stamp /= "MANIFEST";
  } else {
    size = fs::file_size(path, ec);
  }
  if (ec) return f;
  const auto written = fs::last_write_time(stamp, ec);
  if (ec) return f;
  f.exists = true;
  f.size_bytes = static_cast<double>(size);
  f.age_seconds = std::chrono::duration<double>(fs::file_time_type::clock::now() - written).count();
  return f;
}

// GET and HEAD /metrics are answered; a request carrying a body is refused unread (413);
// anything else is 404.
http::status status_of(const http::request_parser<http::empty_body>& parser) {
  const auto& req = parser.get();
  if (parser.chunked() || parser.content_length().value_or(0) > 0) {
    return http::status::payload_too_large;
  }
  const bool ours = req.target() == "/metrics" &&
                    (req.method() == http::verb::get || req.method() == http::verb::head);
  return ours ? http::status::ok : http::status::not_found;
}

class HttpMetricsServer;

// One connection: read the request's header, answer, close. Owned by its pending handlers
// (shared_from_this), so it ends when its last operation completes or the server stops.
class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(tcp::socket socket, HttpMetricsServer& server, size_t& open)
      : stream_(std::move(socket)), server_(server), open_(open) {
    ++open_;
  }
  ~Connection() { --open_; }

  void start() {
    stream_.expires_after(kDeadline);
    parser_.header_limit(kMaxHeaderBytes);
    http::async_read_header(
        stream_, buffer_, parser_,
        [self = shared_from_this()](beast::error_code ec, size_t) { self->on_header(ec); });
  }

 private:
  void on_header(beast::error_code ec);
  void reply(http::status status, std::string body, bool head);
  void on_written(beast::error_code) {
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ignored);
  }

  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
  http::request_parser<http::empty_body> parser_;
  http::response<http::string_body> response_;
  HttpMetricsServer& server_;
  size_t& open_;
};

class HttpMetricsServer final : public MetricsServer {
 public:
  ~HttpMetricsServer() override {
    if (!thread_.joinable()) return;  // never bound
    io_.stop();                       // every pending operation is dropped; connections close
    thread_.join();
  }

  void bind(const std::string& address, int port) {
    beast::error_code ec;
    tcp::resolver resolver(io_);
    const auto endpoints = resolver.resolve(
        address, std::to_string(port), tcp::resolver::passive | tcp::resolver::numeric_service, ec);
    if (ec || endpoints.empty()) throw cannot_bind(address, port, "the address cannot be bound");
    const tcp::endpoint endpoint = endpoints.begin()->endpoint();
    // SO_REUSEADDR (a restarted job may rebind over its predecessor's TIME_WAIT) but not
    // SO_REUSEPORT, under which a second run on the same port would bind too and share the
    // scrapes instead of failing.
    if (acceptor_.open(endpoint.protocol(), ec) ||
        acceptor_.set_option(tcp::acceptor::reuse_address(true), ec) ||
        acceptor_.bind(endpoint, ec) ||
        acceptor_.listen(asio::socket_base::max_listen_connections, ec)) {
      throw cannot_bind(address, port, ec.message(), ec == std::errc::address_not_available);
    }
    bound_ = acceptor_.local_endpoint().address();
    port_ = acceptor_.local_endpoint().port();
    accept();
    thread_ = std::thread([this] { io_.run(); });
  }

  int port() const override { return port_; }

  // The address it is bound to decides who can reach it: a URL with the host name would not
  // reach an endpoint bound to loopback.
  std::string address_text(const std::string& host) const override {
    const std::string addr = bound_.to_string();
    if (bound_.is_unspecified())
      return fmt::format(
          "http://{}:{}/metrics (bound to {}: every interface; logging.prometheus_address={} "
          "keeps it on this host)",
          host, port_, addr, bound_.is_v6() ? "::1" : "127.0.0.1");
    const std::string url_host = bound_.is_v6() ? "[" + addr + "]" : addr;
    return fmt::format(
        "http://{}:{}/metrics (bound to {} only; logging.prometheus_address={} serves every "
        "interface)",
        url_host, port_, addr, bound_.is_v6() ? "::" : "0.0.0.0");
  }

  void publish(const LiveMetrics& m) override {
    MutexLock lock(mu_);
    latest_ = m;
  }

  std::string render() {
    LiveMetrics m;
    {
      MutexLock lock(mu_);
      m = latest_;
    }
    return prometheus_text(m, stat_checkpoint(m.checkpoint_path));
  }

 private:
  static ConfigError cannot_bind(const std::string& address, int port, const std::string& why,
                                 bool unknown_address = false) {
    return ConfigError(fmt::format(
        "logging.prometheus_port: cannot serve metrics on {}:{}: {}. Choose a free port with "
        "--set logging.prometheus_port=N (0 turns the endpoint off){}",
        address, port, why,
        unknown_address ? ", or an address of this host with logging.prometheus_address" : ""));
  }

  void accept() {
    acceptor_.async_accept([this](beast::error_code ec, tcp::socket socket) {
      if (ec == asio::error::operation_aborted) return;
      if (!ec && open_ < kMaxConnections) {
        std::make_shared<Connection>(std::move(socket), *this, open_)->start();
      }
      accept();  // a refused socket closes as it goes out of scope
    });
  }

  // Declared first so that it outlives io_, whose destruction ends the connections left.
  size_t open_ = 0;  // connections now open; touched only on the server's thread
  Mutex mu_;
  LiveMetrics latest_ GUARDED_BY(mu_);
  asio::io_context io_{1};
  tcp::acceptor acceptor_{io_};
  std::thread thread_;
  asio::ip::address bound_;
  int port_ = 0;
};

void Connection::on_header(beast::error_code ec) {
  if (ec == http::error::header_limit) {
    reply(http::status::request_header_fields_too_large, "request header too large\n", false);
    return;
  }
  if (ec) return;  // the deadline passed, the client left, or it sent no HTTP: just close
  const http::status status = status_of(parser_);
  std::string body = status == http::status::ok ? server_.render()
                     : status == http::status::not_found
                         ? "not found: the metrics are at GET /metrics\n"
                         : "a request body is not accepted\n";
  reply(status, std::move(body), parser_.get().method() == http::verb::head);
}

void Connection::reply(http::status status, std::string body, bool head) {
  response_.version(11);
  response_.result(status);
  response_.set(http::field::content_type,
                status == http::status::ok ? kContentType : "text/plain; charset=utf-8");
  response_.keep_alive(false);
  response_.body() = std::move(body);
  response_.prepare_payload();  // Content-Length of the body, also for HEAD
  if (head) response_.body().clear();
  http::async_write(stream_, response_, [self = shared_from_this()](beast::error_code e, size_t) {
    self->on_written(e);
  });
}

}  // namespace

std::unique_ptr<MetricsServer> MetricsServer::start(const std::string& address, int port) {
  auto server = std::make_unique<HttpMetricsServer>();
  server->bind(address, port);
  return server;
}

}  // namespace trainrun
