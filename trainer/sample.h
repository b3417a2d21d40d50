// Text from a trained language model (pntrain --restore-file CK --sample N).
//
// Each of N samples continues the prompt: the context is <eos> (a sentence start, as in the
// training stream) followed by the prompt's words (unknown ones as <unk>). Every step runs the
// model's inference forward (running norm statistics, no dropout) over the last
// --tokens-per-sample tokens of all N contexts at once and draws each next token from
// softmax(logits / temperature) (never <pad>), restricted to the top-k logits when top_k > 0
// (temperature 0: the most likely token). A sample ends at <eos> or after max_len tokens.
//
// Draws come from one 64-bit Mersenne Twister seeded with `seed` through our own uniform
// mapping, so a seed gives the same text on every machine and rank count: every rank computes
// the same samples (with the --pn-eval-state evaluation state) and rank 0 prints them.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "trainer/trainer.h"

namespace pn {

struct SampleOptions {
  int count = 1;
  std::string prompt;
  double temperature = 1.0;
  int top_k = 0;      // 0: the whole vocabulary
  int max_len = 50;   // generated tokens per sample at most
  uint64_t seed = 1;
};

struct TextSample {
  std::vector<int32_t> tokens;  // generated ids (without the prompt; <eos> included if drawn)
  std::string text;             // prompt words then generated words (<eos> not shown)
};

// The next token from one row of logits (exposed for tests): temperature, top-k, uniform u.
int32_t draw_token(const float* logits, int vocab, double temperature, int top_k, double u);

// N samples from the trainer's language model. Throws std::invalid_argument on bad options.
std::vector<TextSample> sample_text(Trainer& trainer, const SampleOptions& options);

// pntrain --sample: samples from the restored checkpoint (--prompt, --temperature, --top-k,
// --max-len, --seed), printed by rank 0 as "sample <i> | <text>". Returns the exit status.
int print_samples(const Options& options, Trainer& trainer, int rank);

}  // namespace pn
