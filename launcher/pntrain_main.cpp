// pntrain: the training executable. Runs single-process, or one rank per process under mpirun.
#include <glog/logging.h>

#include <chrono>
#include <cmath>
#include <fstream>
#include <cstdio>
#include <stdexcept>
#include <exception>
#include <iostream>

#include "comm/communicator.h"
#include "kernels/device.h"
#include "trainer/data.h"
#include "trainer/options.h"
#include "trainer/sample.h"
#include "trainer/trainer.h"

// --arch transformer: train on --train-subset, or with --eval-only report the valid loss and
// the BLEU of beam search on --gen-subset.
static int run_translation(const pn::Options& opt, pn::Communicator& comm) {
  pn::ParallelCorpus corpus =
      pn::load_parallel_corpus(opt.data, opt.source_lang, opt.target_lang,
                               opt.share_all_embeddings, opt.train_subset, opt.valid_subset,
                               opt.gen_subset);
  pn::Trainer trainer(opt, comm, std::move(corpus));
  if (!opt.eval_only) {
    const pn::TrainResult r = trainer.train();
    if (comm.rank() == 0)
      LOG(INFO) << "done: " << r.updates << " updates, last training loss " << r.last_loss
                << (r.valid_nll >= 0 ? ", valid loss " + std::to_string(r.valid_nll) : "");
    return 0;
  }
  if (!trainer.restored())
    throw std::invalid_argument("--eval-only needs a checkpoint: give --restore-file DIR or a "
                                "--save-dir that holds one");
  const pn::EvalResult v = trainer.evaluate(trainer.parallel_corpus().valid);
  pn::GenerateOptions g;
  g.beam = opt.beam;
  g.lenpen = opt.lenpen;
  g.max_len_a = opt.max_len_a;
  g.max_len_b = opt.max_len_b;
  g.max_tokens = opt.max_tokens;
  const auto t0 = std::chrono::steady_clock::now();
  const pn::GenerateResult gen = trainer.generate(trainer.parallel_corpus().test, g,
                                                  !opt.remove_bpe.empty(), opt.bleu_lowercase);
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!opt.results_path.empty()) {
    const std::string path = comm.size() > 1 ? opt.results_path + ".r" +
                                                   std::to_string(comm.rank())
                                             : opt.results_path;
    std::ofstream out(path);
    if (!out) throw std::runtime_error("cannot write --results-path '" + path + "'");
    for (const std::string& h : gen.hyps) out << h << '\n';
  }
  if (comm.rank() == 0)
    std::printf("eval | update %lld | valid loss %.4f ppl %.2f | %s beam %d lenpen %.2f | %s | "
                "%.1fs\n",
                (long long)trainer.start_update(), v.nll, std::exp(v.nll), opt.gen_subset.c_str(),
                opt.beam, opt.lenpen, gen.bleu.summary().c_str(), secs);
  return 0;
}

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
    if (opt.arch == "transformer") return run_translation(opt, *comm);
    pn::Corpus corpus = opt.data == "builtin" ? pn::builtin_corpus() : pn::load_corpus(opt.data);
    pn::Trainer trainer(opt, *comm, std::move(corpus));
    if (opt.sample > 0) return pn::print_samples(opt, trainer, comm->rank());
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
