// pnaverage: averages the last N checkpoints of a run into one (launcher/pn average-checkpoints).
//   pnaverage --inputs SAVE_DIR --num N --output DIR
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>

#include "trainer/average_checkpoints.h"

int main(int argc, char** argv) {
  std::string inputs, output;
  int num = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--inputs")) inputs = argv[i + 1];
    else if (!std::strcmp(argv[i], "--num")) num = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--output")) output = argv[i + 1];
    else {
      std::fprintf(stderr, "pnaverage: unknown flag '%s'\n", argv[i]);
      return 2;
    }
  }
  if (inputs.empty() || output.empty() || num < 1) {
    std::fprintf(stderr, "usage: pnaverage --inputs SAVE_DIR --num N --output DIR\n");
    return 2;
  }
  try {
    const auto dirs = pn::newest_checkpoints(inputs, num);
    pn::average_checkpoints(dirs, output);
    std::printf("averaged %zu checkpoints (%s .. %s) into %s\n", dirs.size(), dirs.front().c_str(),
                dirs.back().c_str(), output.c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "pnaverage: %s\n", e.what());
    return 2;
  }
  return 0;
}
