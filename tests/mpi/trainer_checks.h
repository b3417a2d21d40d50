// Checks shared by the LM and translation tests under mpirun: loss-curve differences, contract §4's
// three ways to make one update (one process with the whole update in one micro-batch, one
// process in `micro_steps` accumulated micro-steps, the world's R ranks with 1/R each), and the
// running state of every norm of a trainer's model (contract §6 resume checks).
#pragma once
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "mpi_env.h"
#include "trainer/trainer.h"

namespace pn::test {

// Largest relative difference of two loss curves (1e30 when their lengths differ).
inline double max_rel_diff(const std::vector<double>& a, const std::vector<double>& b) {
  double m = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i)
    m = std::max(m, std::abs(a[i] - b[i]) / std::abs(b[i]));
  return a.size() == b.size() ? m : 1e30;
}

struct ThreeWays {
  std::vector<double> one_big, accumulated, ranks;
};

// make(norm) gives the options of a run with that norm; data is a Corpus or ParallelCorpus.
// `norm` runs at R ranks, `single_norm` (its one-process twin) in the two single runs.
template <class MakeOptions, class Data>
ThreeWays three_ways(MakeOptions make, const Data& data, int update_tokens, int micro_steps,
                     const std::string& norm, const std::string& single_norm) {
  Communicator& w = world();
  auto single = make_single_communicator();
  ThreeWays r;
  Options a = make(single_norm);
  a.max_tokens = update_tokens;
  r.one_big = Trainer(a, *single, data).train().losses;
  Options b = make(single_norm);
  b.max_tokens = update_tokens / micro_steps, b.update_freq = micro_steps;
  r.accumulated = Trainer(b, *single, data).train().losses;
  Options c = make(norm);
  c.max_tokens = update_tokens / w.size();
  r.ranks = Trainer(c, w, data).train().losses;
  return r;
}

// Every running statistic of every norm of this rank's model, flattened in model order.
inline std::vector<double> norm_state(Trainer& t) {
  std::vector<double> s;
  for (Norm<float>* n : t.norms())
    for (const StateTensor& st : n->state()) s.insert(s.end(), st.data, st.data + st.n);
  return s;
}

}  // namespace pn::test
