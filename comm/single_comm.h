// The single-process communicator: every collective is the identity (one rank). Public so that
// tests can derive fakes from it that change one behaviour (a rank count, a device error).
#pragma once
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "comm/communicator.h"

namespace pn {

struct SingleCommunicator : Communicator {
  int rank() const override { return 0; }
  int size() const override { return 1; }
  int local_rank() const override { return 0; }
  int local_size() const override { return 1; }
  std::string name() const override { return "single"; }
  void allreduce_sum(float*, size_t) override {}
  void allreduce_sum(double*, size_t) override {}
  void allreduce_max(double*, size_t) override {}
  void broadcast(void*, size_t, int) override {}
  void barrier() override {}
  std::unique_ptr<Communicator> split(int) override {
    auto c = std::make_unique<SingleCommunicator>();
    c->program = program;
    c->timeout_s = timeout_s;
    c->parent = this;
    return c;
  }
  Request iallreduce_sum(float*, size_t) override { return {}; }
  Request iallreduce_sum(double*, size_t) override { return {}; }
  bool test(Request) override { return true; }
  void wait(Request) override {}
  [[noreturn]] void abort(const std::string& msg, int code) override {
    std::fprintf(stderr, "%s: error: %s\n", program.c_str(), msg.c_str());
    std::fflush(stderr);
    std::exit(code);
  }
};

}  // namespace pn
