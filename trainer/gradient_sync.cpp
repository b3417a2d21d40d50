// The gradient's sum over every rank, in buckets started as the backward finishes with them,
// and the cross-rank check that every rank still holds the same parameters.
#include <algorithm>
#include <cstring>

#include "kernels/device.h"
#include "layers/device_allreduce.h"
#include "trainer/trainer.h"

namespace pn {

// Buckets of the flat gradient buffer, from its end (the first parameters the backward
// finishes with) to its start; each is all-reduced as soon as the backward is past it.
void Trainer::plan_buckets() {
  const size_t n = params().size();
  const size_t per = opt_.bucket_mb > 0 ? std::max<size_t>(1, size_t(opt_.bucket_mb * 262144.0))
                                        : n;  // floats per bucket
  buckets_.clear();
  for (size_t end = n; end > 0;) {
    const size_t begin = end > per ? end - per : 0;
    Bucket b;
    b.begin = begin;
    b.end = end;
    buckets_.push_back(b);
    end = begin;
  }
}

void Trainer::start_gradient_allreduce(Bucket& bk) {
  bk.sum = start_allreduce_sum_here(comm_, params().grad.data() + bk.begin, bk.end - bk.begin);
}

void Trainer::finish_gradient_allreduce() {
  for (Bucket& bk : buckets_) finish_sum(comm_, &bk.sum);
}

void Trainer::check_consistency(int64_t update) {
  // Per-tensor checksums (sum of the raw bits as integers, exact and order-free) compared
  // against rank 0's; the first differing tensor is named.
  const auto& specs = params().specs;
  std::vector<double> mine(specs.size()), ref;
  const std::vector<float> values = params().data.to_host();
  for (size_t i = 0; i < specs.size(); ++i) {
    const uint32_t* bits = reinterpret_cast<const uint32_t*>(values.data() + specs[i].offset);
    uint64_t sum = 0;
    for (size_t j = 0; j < specs[i].numel; ++j) sum += bits[j] * (j % 65521 + 1);
    mine[i] = double(sum % (uint64_t(1) << 52));
  }
  ref = mine;
  comm_.broadcast(ref.data(), ref.size() * sizeof(double), 0);
  double first_bad = -1;
  for (size_t i = 0; i < specs.size(); ++i)
    if (ref[i] != mine[i]) {
      first_bad = double(i);
      break;
    }
  // The synchronized norms' running state is identical within a sync group (and may differ
  // between groups): compared against the group's first rank.
  std::vector<double> state_sums;
  std::vector<std::string> state_names;
  const auto norms = this->norms();
  for (size_t l = 0; l < norms.size(); ++l) {
    if (!norms[l]->synchronized()) continue;
    for (const StateTensor& t : norms[l]->state()) {
      const std::vector<double> v = read_state(t);
      uint64_t sum = 0;
      for (size_t j = 0; j < v.size(); ++j) {
        uint64_t bits;
        std::memcpy(&bits, &v[j], sizeof bits);
        sum += (bits % 1000003) * (j % 65521 + 1);
      }
      state_sums.push_back(double(sum % (uint64_t(1) << 52)));
      state_names.push_back("norm " + std::to_string(l) + " " + t.name);
    }
  }
  std::vector<double> group_ref = state_sums;
  stats_communicator().broadcast(group_ref.data(), group_ref.size() * sizeof(double), 0);
  double state_bad = -1;
  for (size_t i = 0; i < state_sums.size(); ++i)
    if (group_ref[i] != state_sums[i]) {
      state_bad = double(i);
      break;
    }
  double worst[4] = {first_bad, first_bad >= 0 ? double(comm_.rank()) : -1, state_bad,
                     state_bad >= 0 ? double(comm_.rank()) : -1};
  comm_.allreduce_max(worst, 4);
  if (worst[0] >= 0)
    throw AgreedError(
        "parameters differ across ranks at update " + std::to_string(update) + ": tensor '" +
        specs[size_t(worst[0])].name + "' on rank " + std::to_string(int(worst[1])) +
        " differs from rank 0 (a bug, a bit flip or non-deterministic hardware): " +
        "restart from the last checkpoint");
  if (worst[2] >= 0)
    throw AgreedError(
        "synchronized norm state differs within a sync group at update " +
        std::to_string(update) + ": " + state_names[size_t(worst[2])] + " on rank " +
        std::to_string(int(worst[3])) + " differs from its group's first rank (a bug, a bit " +
        "flip or non-deterministic hardware): restart from the last checkpoint");
}

}  // namespace pn
