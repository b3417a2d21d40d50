// pnexport: a checkpoint as one safetensors file (launcher/pn export; trainer/export.h).
//   pnexport CHECKPOINT_DIR --out FILE.safetensors [--pn-eval-state rank0|mean] [--data DIR where
//            the corpus has moved] [model flags: only for checkpoints older than their stored
//            configuration; a flag that differs from the checkpoint's is refused]
#include <glog/logging.h>

#include <cstdio>
#include <cstring>
#include <exception>
#include <iostream>
#include <string>
#include <vector>

#include "trainer/export.h"
#include "trainer/options.h"

int main(int argc, char** argv) {
  FLAGS_logtostderr = true;
  google::InitGoogleLogging(argv[0]);
  std::string checkpoint, out;
  std::vector<char*> rest = {argv[0]};
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--out") && i + 1 < argc) out = argv[++i];
    else if (checkpoint.empty() && argv[i][0] != '-') checkpoint = argv[i];
    else rest.push_back(argv[i]);
  }
  if (checkpoint.empty() || out.empty()) {
    std::fprintf(stderr, "usage: pnexport CHECKPOINT_DIR --out FILE.safetensors "
                         "[--pn-eval-state rank0|mean] [--data DIR where the corpus has moved]\n"
                         "  (the model comes from the checkpoint; a flag that differs from it is "
                         "refused)\n");
    return 2;
  }
  try {
    pn::Options opt;
    std::string help;
    if (!pn::parse_options(int(rest.size()), rest.data(), &opt, &help)) {
      std::cout << help << std::endl;
      return 0;
    }
    for (const std::string& note : opt.notes) std::fprintf(stderr, "pnexport: %s\n", note.c_str());
    const pn::ExportSummary s = pn::export_checkpoint(opt, checkpoint, out);
    std::printf("exported %s (update %lld, %d ranks, %zu parameters) to %s: %zu tensors\n",
                checkpoint.c_str(), (long long)s.update, s.world_size, s.parameters, out.c_str(),
                s.tensors);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "pnexport: %s\n", e.what());
    return 2;
  }
  return 0;
}
