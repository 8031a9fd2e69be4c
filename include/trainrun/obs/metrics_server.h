// MetricsServer: rank 0's Prometheus endpoint. GET /metrics answers the text exposition
// (prometheus.h) of the LiveMetrics last published (HEAD too); any other path or method is 404, a
// request with a body 413 (unread), a header over 8 KiB 431.
//
// It never holds up the step loop: publish() copies the snapshot under a mutex that the server
// holds only to copy it back out, and formatting, checkpoint stat()s and socket I/O happen on the
// server's own thread. Bounded against hostile clients: every connection is served
// asynchronously by that one thread, so a slow one delays no other; each gets two seconds for the
// whole exchange (request in, answer out), one request, and at most 256 are open at once (more
// are closed as they arrive).
//
// Thread safety: publish() from one thread (the step loop); the destructor stops the server and
// joins its thread at once, whatever the clients do.
#pragma once

#include <memory>
#include <string>

#include "trainrun/obs/prometheus.h"

namespace trainrun {

class MetricsServer {
 public:
  // Binds address:port (port 0: any free port) and starts serving. Throws ConfigError naming
  // logging.prometheus_port and how to choose another when the address cannot be bound (in
  // use, a privileged port, an address this host does not have).
  static std::unique_ptr<MetricsServer> start(const std::string& address, int port);
  virtual ~MetricsServer() = default;

  virtual int port() const = 0;  // the bound port (the chosen one when started with 0)
  // For the log: the URL to scrape, with `host` (this host's name) when bound to every
  // interface, else the address it is bound to; and the logging.prometheus_address that
  // changes who can reach it.
  virtual std::string address_text(const std::string& host) const = 0;
  virtual void publish(const LiveMetrics& m) = 0;
};

}  // namespace trainrun
