// pntrain: the training executable. Runs single-process, or one rank per process under mpirun.
#include <glog/logging.h>

#include <cmath>
#include <cstdio>
#include <stdexcept>
#include <exception>
#include <iostream>

#include "comm/communicator.h"
#include "kernels/device.h"
#include "trainer/data.h"
#include "trainer/options.h"
#include "trainer/trainer.h"

int main(int argc, char** argv) {
  FLAGS_logtostderr = true;
  FLAGS_minloglevel = 0;
  google::InitGoogleLogging(argv[0]);
  std::unique_ptr<pn::Communicator> comm = pn::make_communicator(&argc, &argv);
  if (comm->rank() != 0) FLAGS_minloglevel = 1;  // progress lines from rank 0 only
  try {
    pn::Options opt;
    std::string help;
    if (!pn::parse_options(argc, argv, &opt, &help)) {
      if (comm->rank() == 0) std::cout << help << std::endl;
      return 0;
    }
    pn::validate_options(opt);
    const int threads =
        opt.threads > 0 ? opt.threads : std::max(1, pn::hardware_cores() / comm->local_size());
    pn::set_num_threads(threads);
    pn::Corpus corpus = opt.data == "builtin" ? pn::builtin_corpus() : pn::load_corpus(opt.data);
    pn::Trainer trainer(opt, *comm, std::move(corpus));
    if (opt.eval_only) {
      if (!trainer.restored())
        throw std::invalid_argument("--eval-only needs a checkpoint: give --restore-file DIR or a "
                                    "--save-dir that holds one");
      const pn::EvalResult v = trainer.evaluate(trainer.corpus().valid);
      const pn::EvalResult t = trainer.evaluate(trainer.corpus().test);
      if (comm->rank() == 0)
        std::printf("eval | update %lld | valid loss %.4f ppl %.2f | test loss %.4f ppl %.2f\n",
                    (long long)trainer.start_update(), v.nll, std::exp(v.nll), t.nll,
                    std::exp(t.nll));
      return 0;
    }
    const pn::TrainResult r = trainer.train();
    if (comm->rank() == 0)
      LOG(INFO) << "done: " << r.updates << " updates, last training loss " << r.last_loss
                << (r.valid_nll >= 0 ? ", valid ppl " + std::to_string(std::exp(r.valid_nll))
                                     : std::string());
  } catch (const std::exception& e) {
    comm->abort(e.what(), 2);
  }
  return 0;
}
