// The CreateTask progress display on stderr: one \r-rewritten bar on a terminal, plain periodic
// lines otherwise (logs, CI).
#pragma once

#include <cstdio>
#include <string>

#include "manyshot/v1/manyshot.pb.h"

namespace manyshot::client {

// "receiving", "tokenizing", "encoding", "storing" (or "working").
std::string PhaseName(v1::CreateTaskProgress::Phase phase);

// One progress line without line ending, e.g.
// "encoding   [##########----------]  12/24 groups  49152 tokens  3.1 s" (the bar when the groups
// total is known, demonstrations received while receiving).
std::string FormatProgress(const v1::CreateTaskProgress& progress, int bar_width = 30);

class ProgressDisplay {
 public:
  // `interactive`: rewrite one line with \r (a TTY); otherwise print a line when the phase changes
  // or at most every `min_interval_seconds`.
  ProgressDisplay(std::FILE* out, bool interactive, double min_interval_seconds = 2.0);

  // `now_seconds`: a monotonic clock reading (injected for tests).
  void Update(const v1::CreateTaskProgress& progress, double now_seconds);
  // Ends the bar's line (interactive) and prints the last state not yet printed (non-interactive).
  void Finish();

 private:
  std::FILE* out_;
  bool interactive_;
  double min_interval_;
  bool any_ = false;
  bool pending_ = false;
  int last_phase_ = -1;
  double last_print_ = 0;
  size_t last_width_ = 0;
  v1::CreateTaskProgress last_;
};

}  // namespace manyshot::client
