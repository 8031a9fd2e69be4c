// OpCheck: the generic checks behind Backend's public op methods (backend.cpp), bound to one op
// and one backend. Every failure is std::invalid_argument("<op>: <what>") naming the tensors and
// their shapes, except a host-resident token id out of range, which is a DataError. Messages are
// built only on failure, so a passing check costs a few comparisons.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>

#include "trainrun/backend/backend.h"
#include "trainrun/core/errors.h"

namespace trainrun {

struct Named {
  const char* name;
  const Tensor& t;
};

class OpCheck {
 public:
  OpCheck(const Backend& be, Op op) : be_(be), op_(op) {}

  // Required tensors present, optional ones present or empty; all on the backend's device, of one
  // float dtype that supports(op) accepts. Returns that dtype.
  DType floats(std::initializer_list<Named> required, std::initializer_list<Named> optional = {});
  // Saved statistics: present, on the device, one dtype, equal to dt or f32 when dt is bf16.
  void stats(DType dt, std::initializer_list<Named> ts);
  // Parameter gradients (required present, optional present or empty): on the device, one dtype,
  // equal to dt, or f32 when dt is bf16 and the backend says f32_param_grads_with_bf16().
  void param_grads(DType dt, std::initializer_list<Named> required,
                   std::initializer_list<Named> optional = {});
  // An i32 tensor of n token ids on the device; when it is host memory, every id in [0, limit).
  // kNoId (core/no_id.h) is allowed too: the embedding and cross-entropy take it.
  void ids(const Named& ids, int64_t n, int64_t limit);
  // Document starts for [B,T] rows (Backend::attention): empty, or an i32 [B,T] tensor on the
  // device; when it is host memory, every value in [0, t].
  void doc_starts(const Named& starts, int64_t B, int64_t T);
  // Every tensor has the first one's element count.
  void same_numel(std::initializer_list<Named> ts);
  // Throws "<op>: <name shape> ...: expected <layout>" unless ok.
  void shapes(bool ok, std::initializer_list<Named> ts, const char* layout) const;
  void require(bool ok, const char* what) const;
  [[noreturn]] void fail(const std::string& what) const;

  void on_device(const Named& t) const;
  void present(const Named& t) const;

 private:
  const Backend& be_;
  Op op_;
};

// The DataError for token id `value` at position `index` of `name`, outside [0, limit): one
// wording for every backend (host ids are checked here, device ids by the implementation).
DataError out_of_range_id(Op op, const char* name, int64_t index, int64_t value, int64_t limit);

// "name [d0,d1] name2 none ..." for messages.
std::string describe_shapes(std::initializer_list<Named> ts);

}  // namespace trainrun
