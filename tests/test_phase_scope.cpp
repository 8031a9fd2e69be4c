// PhaseScope (src/train/phase_scope.h), the step loop's one line per phase: the watchdog is told
// the phase, its time lands in its own StepTimes field and in no other, and the trace gets a span
// named for it unless the phase's spans are its collectives' own.
#include <doctest/doctest.h>

#include <chrono>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <thread>

#include "../src/train/phase_scope.h"
#include "../src/train/step_times.h"
#include "../src/train/watchdog.h"
#include "temp_dir.h"
#include "trainrun/backend/backend.h"
#include "trainrun/comm/comm.h"
#include "trainrun/obs/trace.h"

using namespace trainrun;
using trainrun::testing::TempDir;

namespace {

void sleep_ms(int ms) {
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
}

// Every field but the one named, which must hold at least `at_least` seconds.
void only(const StepTimes& t, const double StepTimes::*field, double at_least) {
  for (const double StepTimes::*f :
       {&StepTimes::data, &StepTimes::forward, &StepTimes::backward, &StepTimes::optimizer,
        &StepTimes::checkpoint, &StepTimes::comm_wait, &StepTimes::comm_total, &StepTimes::total}) {
    if (f == field)
      CHECK(t.*f >= at_least);
    else
      CHECK(t.*f == 0);
  }
}

}  // namespace

TEST_CASE("a phase scope tells the watchdog its phase and adds its time to its own field") {
  TempDir dir;
  auto comm = make_local_communicator();
  Watchdog wd(*comm, dir.str(), 600);
  auto be = make_cpu_backend();
  const PhaseObservers at{&wd, nullptr, be.get(), 4};
  StepTimes t;
  {
    const PhaseScope forward(at, Phase::forward, &t.forward);
    CHECK(wd.phase() == Phase::forward);
    sleep_ms(20);
  }
  only(t, &StepTimes::forward, 0.02);
  const double forward = t.forward;
  {
    const PhaseScope optimizer(at, Phase::optimizer, &t.optimizer);
    CHECK(wd.phase() == Phase::optimizer);
    sleep_ms(10);
  }
  CHECK(t.optimizer >= 0.01);
  CHECK(t.forward == forward);
  // Time adds up over the scopes of a field (the micro-batches of a step).
  t = StepTimes{};
  for (int m = 0; m < 2; ++m) {
    const PhaseScope backward(at, Phase::backward, &t.backward, PhaseMarks::none);
    CHECK(wd.phase() == Phase::backward);
    sleep_ms(10);
  }
  only(t, &StepTimes::backward, 0.02);
  // A phase whose time is measured otherwise (the loader's wait) is told, and timed nowhere.
  t = StepTimes{};
  {
    const PhaseScope data(at, Phase::data);
    CHECK(wd.phase() == Phase::data);
    sleep_ms(5);
  }
  only(t, nullptr, 0);
}

TEST_CASE("a phase scope's trace span is named for its phase; comm's spans are its collectives'") {
  TempDir dir;
  auto be = make_cpu_backend();
  std::string file;
  {
    Tracer tracer(dir.str(), 0, "1:2");
    tracer.set_step(1);
    const PhaseObservers at{nullptr, &tracer, be.get(), 0};
    StepTimes t;
    { const PhaseScope s(at, Phase::forward, &t.forward); }
    { const PhaseScope s(at, Phase::comm, nullptr, PhaseMarks::range_only); }
    { const PhaseScope s(at, Phase::data, &t.data, PhaseMarks::none); }
    tracer.flush();
    file = tracer.written_file();
  }
  REQUIRE(!file.empty());
  std::ifstream in(file);
  const std::string json((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  CHECK(json.find("\"name\":\"forward\"") != std::string::npos);
  CHECK(json.find("\"name\":\"comm\"") == std::string::npos);
  CHECK(json.find("\"name\":\"data\"") == std::string::npos);
}
