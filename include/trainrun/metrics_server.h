// MetricsServer: rank 0's Prometheus endpoint. GET /metrics answers the text exposition
// (prometheus.h) of the LiveMetrics last published (HEAD too); any other path or method is 404.
//
// It never holds up the step loop: publish() copies the snapshot under a mutex that the server
// holds only to copy it back out, and formatting, checkpoint stat()s and socket I/O happen on the
// server's own threads. Bounded: two worker threads, keep-alive of one second and at most 16
// requests per connection, two-second read and write timeouts, request bodies refused.
//
// Thread safety: publish() from one thread (the step loop); the destructor stops the server and
// joins its threads (within about a second: the keep-alive timeout).
#pragma once

#include <memory>
#include <string>

#include "trainrun/prometheus.h"

namespace trainrun {

class MetricsServer {
 public:
  // Binds address:port (port 0: any free port) and starts serving. Throws ConfigError naming
  // logging.prometheus_port and how to choose another when the address cannot be bound (in
  // use, a privileged port, an address this host does not have).
  static std::unique_ptr<MetricsServer> start(const std::string& address, int port);
  virtual ~MetricsServer() = default;

  virtual int port() const = 0;  // the bound port (the chosen one when started with 0)
  virtual void publish(const LiveMetrics& m) = 0;
};

}  // namespace trainrun
