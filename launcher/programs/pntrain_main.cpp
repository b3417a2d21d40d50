// pntrain: the training executable. Runs single-process, or one rank per process under mpirun.
#include <glog/logging.h>

#include <chrono>
#include <cstdlib>
#include <cmath>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <map>
#include <sstream>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "comm/communicator.h"
#include "kernels/device.h"
#include "launcher/programs/log_format.h"
#include "launcher/programs/openblas_core.h"
#include "launcher/programs/threads.h"
#include "trainer/checkpoint.h"
#include "trainer/data.h"
#include "trainer/interrupt.h"
#include "trainer/options.h"
#include "trainer/sample.h"
#include "trainer/trainer.h"

namespace {

// Startup errors (flags, config, data, save directory, checkpoint) are found the same way on
// every rank before any work: the ranks agree on whether any failed, the lowest failing rank
// prints its message once, and every rank leaves through MPI_Finalize with the same exit code
// (no MPI_Abort, so no abort banner). Returns true when no rank failed.
bool all_ranks_fine(pn::Communicator& comm, const std::string& error) {
  double who = error.empty() ? 0.0 : double(comm.size() - comm.rank());
  comm.allreduce_max(&who, 1);
  if (who == 0) return true;
  const int first = comm.size() - int(who);
  if (comm.rank() == first) {
    if (first == 0)
      std::fprintf(stderr, "pntrain: error: %s\n", error.c_str());
    else
      std::fprintf(stderr, "pntrain: error on rank %d: %s\n", first, error.c_str());
    std::fflush(stderr);
  }
  return false;
}

// The outcome for `launcher/pn run`, which restarts a failed job but neither bad input nor an
// interruption, whatever mpirun's own exit status says: rank 0 appends "save_dir DIR" when
// training starts and "exit CODE REASON" when it ends to the file $PN_STATUS_FILE names.
const char* status_file() {
  const char* path = std::getenv("PN_STATUS_FILE");
  return path && *path ? path : nullptr;
}

void report_status(const pn::Communicator& comm, const std::string& line) {
  if (comm.rank() == 0 && status_file())
    std::ofstream(status_file(), std::ios::app) << line << std::endl;
}

// Under a status file every rank exits 0 from an end it reported: a non-zero exit would make
// mpirun tear the job down, which takes it twice odls_base_sigkill_timeout seconds.
int exit_status(const pn::Communicator& comm, int code) {
  const char* reason = code == 0 ? "done" : code == 2 ? "refused" : code == 3 ? "save-failed"
                                                                    : "interrupted";
  report_status(comm, "exit " + std::to_string(code) + " " + reason);
  return status_file() ? 0 : code;
}

// --arch transformer --eval-only: the valid loss and the BLEU of beam search on --gen-subset.
int eval_translation(const pn::Options& opt, pn::Communicator& comm, pn::Trainer& trainer) {
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

int eval_lm(pn::Communicator& comm, pn::Trainer& trainer) {
  const pn::EvalResult v = trainer.evaluate(trainer.corpus().valid);
  const pn::EvalResult t = trainer.evaluate(trainer.corpus().test);
  trainer.record_test(t);  // into --metrics, when given
  if (comm.rank() == 0)
    std::printf("eval | update %lld | valid loss %.4f ppl %.2f | test loss %.4f ppl %.2f\n",
                (long long)trainer.start_update(), v.nll, std::exp(v.nll), t.nll,
                std::exp(t.nll));
  return 0;
}

// The closing line, and the exit code: 128 + signal when interrupted, 3 when the final
// checkpoint could not be written.
int finish(const pn::Options& opt, pn::Communicator& comm, const pn::TrainResult& r) {
  std::string closing;
  if (comm.rank() == 0 && opt.log_format == pn::LogFormat::json) {
    nlohmann::json j = {{"done", true},          {"updates", r.updates},
                        {"max_update", opt.max_update}, {"wall_s", r.wall_s},
                        {"tokens_per_s", r.wall_s > 0 ? r.tokens / r.wall_s : 0.0},
                        {"last_loss", r.last_loss}, {"checkpoint", r.checkpoint}};
    if (r.best_valid_nll >= 0) j["best_valid_loss"] = r.best_valid_nll;
    if (r.ended_in_pn_warmup) j["pn_warmup"] = true;
    closing = j.dump();
    LOG(INFO) << closing;
  } else if (comm.rank() == 0) {
    std::ostringstream line;
    line << std::fixed << std::setprecision(1) << "done | " << r.updates << "/" << r.update_limit
         << " updates | wall " << r.wall_s << "s | " << std::setprecision(0)
         << (r.wall_s > 0 ? r.tokens / r.wall_s : 0.0) << " tok/s (mean of this run) | "
         << std::setprecision(3) << "training loss " << r.last_loss << " (last update)";
    if (r.best_valid_nll >= 0)
      line << " | best valid loss " << r.best_valid_nll << " ppl " << std::setprecision(2)
           << std::exp(r.best_valid_nll);
    line << " | checkpoint "
         << (r.checkpoint.empty() ? (opt.save_dir.empty() ? "none (--save-dir DIR saves one)"
                                                          : "none")
                                  : r.checkpoint)
         << " | metrics "
         << (opt.metrics.empty() ? "none (--metrics FILE.jsonl writes them)" : opt.metrics);
    closing = line.str();
    LOG(INFO) << closing;
    if (r.ended_in_pn_warmup)
      LOG(INFO) << "note: the run ended inside PN's warmup (update " << r.updates << " of its "
                << r.pn_warmup_updates << "): its validation and the checkpoint's inference use "
                << "the warmup's lagging running psi^2, not the model's: --pn-warmup "
                << r.pn_warmup_shorter << " (statistics batches: a fifth of this run) or a "
                << "--max-update above " << r.pn_warmup_updates << " ends it inside the run";
  }
  // A terminated mpirun holds its ranks' last lines until its grace is over, and `pn run` ends
  // it before: the launcher prints this one from the status file instead.
  if (r.interrupted)
    report_status(comm, "closing interrupted (" + pn::interrupt_description(r.interrupted) +
                            ") at update " + std::to_string(r.updates) + " | " + closing);
  if (r.final_save_failed) {
    if (comm.rank() == 0)
      std::fprintf(stderr, "pntrain: error: the checkpoint of update %lld was not saved (see "
                   "above)%s\n", (long long)r.updates,
                   r.checkpoint.empty() ? "" : ("; the newest on disk is " + r.checkpoint).c_str());
    return 3;
  }
  if (r.interrupted) return 128 + r.interrupted;
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  pn::rerun_with_openblas_core(argv);  // before MPI and any thread: OpenBLAS's kernels
  FLAGS_logtostderr = true;
  FLAGS_minloglevel = 0;
  google::InitGoogleLogging(argv[0]);
  std::unique_ptr<pn::Communicator> comm = pn::make_communicator(&argc, &argv);
  if (comm->rank() != 0) FLAGS_minloglevel = 1;  // progress lines from rank 0 only
  pn::install_interrupt_handlers();
  pn::Options opt;
  std::string error, early_text;
  bool early_exit = false;
  pn::Corpus corpus;
  pn::ParallelCorpus parallel;
  pn::Device device = pn::Device::CPU;
  // 1. What every rank checks alike: flags, the checkpoint's configuration, the save directory
  //    and the data.
  try {
    if (!pn::parse_options(argc, argv, &opt, &early_text)) {
      early_exit = true;
    } else {
      // An explicit --restore-file is taken as given (and refused when it fails verification);
      // a resume from --save-dir falls back from a newest checkpoint that fails it.
      std::string restore = opt.restore_file;
      if (!restore.empty()) {
        pn::check_checkpoint_dir(restore);
      } else if (!opt.save_dir.empty() && std::filesystem::is_directory(opt.save_dir)) {
        const pn::ResumePoint resume = pn::checkpoint_to_resume(opt.save_dir);
        if (!resume.warning.empty()) opt.notes.push_back(resume.warning);
        restore = resume.dir;
      }
      if (!restore.empty()) {
        pn::take_checkpoint_flags(pn::checkpoint_flags(restore), restore, &opt);
        opt.restore_file = restore;  // the trainer restores the checkpoint chosen here
        // Samples the same at any rank count: the mean of the saved ranks' running norm state
        // (what a restore at another rank count starts from), unless --pn-eval-state is given.
        if (opt.sample > 0 && !opt.given.count("pn-eval-state"))
          opt.pn_eval_state = pn::EvalState::mean;
      } else if (opt.eval_only) {
        throw std::invalid_argument("--eval-only needs a checkpoint: give --restore-file DIR or "
                                    "a --save-dir that holds one");
      }
      pn::validate_options(opt);
      if (const std::string e = pn::sync_group_error(opt.sync_group_size, comm->size());
          !e.empty())
        throw std::invalid_argument(e);
      pn::set_log_format(opt.log_format == pn::LogFormat::glog);
      if (!opt.save_dir.empty() && !opt.eval_only) pn::check_writable_dir(opt.save_dir, comm->rank());
      device = pn::resolve_device(opt.device, comm->rank() == 0);
      if (opt.arch == pn::Arch::transformer)
        parallel = pn::load_parallel_corpus(opt.data, opt.source_lang, opt.target_lang,
                                            opt.share_all_embeddings, opt.train_subset,
                                            opt.valid_subset, opt.gen_subset);
      else
        corpus = opt.data == "builtin"
                     ? pn::builtin_corpus()
                     : pn::load_corpus(opt.data, {opt.vocab_size, opt.vocab_min_count});
    }
  } catch (const std::exception& e) {
    error = e.what();
  }
  if (!all_ranks_fine(*comm, error)) return exit_status(*comm, 2);
  if (early_exit) {
    if (comm->rank() == 0) std::cout << early_text << std::endl;
    return 0;
  }
  if (comm->rank() == 0)
    for (const std::string& note : opt.notes) LOG(WARNING) << note;
  // The threads from this rank's share of its allocation (collective: after every rank is fine).
  const pn::ThreadChoice threads = pn::choose_threads(opt.threads, *comm);
  pn::set_num_threads(threads.threads, threads.source);
  // Everything the run allocates lives on the chosen device, on the stream of this scope (which
  // outlives the trainer). A GPU run's ranks talk through NCCL.
  std::unique_ptr<pn::DeviceScope> scope;
  try {
    if (comm->size() > 1) pn::set_error_context("rank " + std::to_string(comm->rank()));
    if (device == pn::Device::CUDA) comm = pn::make_device_communicator(std::move(comm));
    scope = std::make_unique<pn::DeviceScope>(device, comm->local_rank(),
                                              pn::parse_gemm_math(opt.precision));
    pn::current_context().attention = pn::parse_attention(opt.attention);
    if (comm->rank() == 0) LOG(INFO) << "device: " << pn::device_summary();
  } catch (const std::exception& e) {
    error = e.what();
  }
  if (!all_ranks_fine(*comm, error)) return exit_status(*comm, 2);
  // 2. The model and its checkpoint (shape and vocabulary checks, identical on every rank but
  //    for a rank's own corrupt file).
  std::unique_ptr<pn::Trainer> trainer;
  try {
    trainer = opt.arch == pn::Arch::transformer
                  ? std::make_unique<pn::Trainer>(opt, *comm, std::move(parallel))
                  : std::make_unique<pn::Trainer>(opt, *comm, std::move(corpus));
  } catch (const std::exception& e) {
    error = e.what();
  }
  if (!all_ranks_fine(*comm, error)) return exit_status(*comm, 2);
  // 3. The work. An error every rank meets alike is reported once and ends the ranks cleanly;
  //    any other ends the whole job through the communicator.
  try {
    if (opt.sample > 0) return pn::print_samples(opt, *trainer, comm->rank());
    if (opt.eval_only)
      return opt.arch == pn::Arch::transformer ? eval_translation(opt, *comm, *trainer)
                                       : eval_lm(*comm, *trainer);
    report_status(*comm, "save_dir " + opt.save_dir);
    trainer->record_start();
    const pn::TrainResult r = trainer->train();
    trainer->record_end(r.interrupted ? "interrupted" : r.final_save_failed ? "failed" : "done");
    return exit_status(*comm, finish(opt, *comm, r));
  } catch (const pn::AgreedError& e) {
    // Every rank met it alike (a diverged loss, parameters that differ): a restart repeats it.
    if (comm->rank() == 0) std::fprintf(stderr, "pntrain: error: %s\n", e.what());
    trainer->record_end("failed");
    return exit_status(*comm, 2);
  } catch (const std::exception& e) {
    trainer->record_end("failed");
    comm->abort(e.what(), 2);
  }
  return 0;
}
