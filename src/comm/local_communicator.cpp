// The one-rank communicator: every collective over one rank is the identity.
#include <spdlog/spdlog.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>

#include <unistd.h>

#include "trainrun/comm/comm.h"

namespace trainrun {
namespace {

class NoopRequest final : public Communicator::Request {
 public:
  void wait() override {}
  bool test() override { return true; }
};

std::string hostname() {
  char buf[256] = {};
  if (gethostname(buf, sizeof buf - 1) != 0) return "localhost";
  return buf;
}

class LocalCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  int local_rank() const override { return 0; }
  int local_size() const override { return 1; }
  std::string host() const override { return host_; }
  std::string kind() const override { return "local"; }

  void allreduce_sum(Tensor) override {}
  void allreduce_avg(Tensor) override {}
  std::unique_ptr<Request> iallreduce_sum(Tensor) override {
    return std::make_unique<NoopRequest>();
  }
  void reduce_scatter_sum(Tensor) override {}
  std::unique_ptr<Request> ireduce_scatter_sum(Tensor) override {
    return std::make_unique<NoopRequest>();
  }
  void all_gather(Tensor) override {}
  void broadcast(Tensor, int root) override { check_root(root, "broadcast"); }
  void gather(Tensor mine, Tensor all, int root) override {
    check_root(root, "gather");
    if (mine.bytes() != all.bytes())
      throw std::invalid_argument("gather: on one rank `mine` is all of `all`");
    if (mine.data != all.data && mine.bytes() > 0) std::memmove(all.data, mine.data, mine.bytes());
  }
  void barrier() override {}
  void all_gather_doubles(const double* in, int n, double* out) override {
    if (n > 0 && in != out) std::memmove(out, in, static_cast<size_t>(n) * sizeof(double));
  }
  void all_gather_bytes(const void* in, size_t n, void* out) override {
    if (n > 0 && in != out) std::memmove(out, in, n);
  }
  void broadcast_bytes(void*, size_t, int root) override { check_root(root, "broadcast_bytes"); }
  std::unique_ptr<Communicator> split(int, int) override {
    return std::make_unique<LocalCommunicator>();
  }
  [[noreturn]] void abort(int code) override {
    // _Exit skips destructors (a hung thread could block them), so flush what we need first.
    spdlog::apply_all([](const std::shared_ptr<spdlog::logger>& l) { l->flush(); });
    std::fflush(nullptr);
    std::_Exit(code);
  }

 private:
  static void check_root(int root, const char* op) {
    if (root != 0)
      throw std::invalid_argument(std::string(op) + ": root must be 0 on a local communicator");
  }
  std::string host_ = hostname();
};

}  // namespace

std::unique_ptr<Communicator> make_local_communicator() {
  return std::make_unique<LocalCommunicator>();
}

}  // namespace trainrun
