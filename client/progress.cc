#include "client/progress.h"

#include <algorithm>

#include "absl/strings/str_format.h"

namespace manyshot::client {

std::string PhaseName(v1::CreateTaskProgress::Phase phase) {
  switch (phase) {
    case v1::CreateTaskProgress::PHASE_RECEIVING:
      return "receiving";
    case v1::CreateTaskProgress::PHASE_TOKENIZING:
      return "tokenizing";
    case v1::CreateTaskProgress::PHASE_ENCODING:
      return "encoding";
    case v1::CreateTaskProgress::PHASE_STORING:
      return "storing";
    default:
      return "working";
  }
}

std::string FormatProgress(const v1::CreateTaskProgress& progress, int bar_width) {
  std::string line = absl::StrFormat("%-10s", PhaseName(progress.phase()));
  if (progress.groups_total() > 0) {
    uint64_t done = std::min(progress.groups_encoded(), progress.groups_total());
    int filled =
        static_cast<int>(done * static_cast<uint64_t>(bar_width) / progress.groups_total());
    line += absl::StrFormat(" [%s%s] %3d%% %llu/%llu groups", std::string(filled, '#'),
                            std::string(bar_width - filled, '-'),
                            static_cast<int>(done * 100 / progress.groups_total()),
                            static_cast<unsigned long long>(done),
                            static_cast<unsigned long long>(progress.groups_total()));
  }
  if (progress.phase() == v1::CreateTaskProgress::PHASE_RECEIVING || progress.groups_total() == 0) {
    line += absl::StrFormat(" %llu demonstrations",
                            static_cast<unsigned long long>(progress.demonstrations_received()));
  }
  if (progress.tokens_encoded() > 0) {
    line +=
        absl::StrFormat(" %llu tokens", static_cast<unsigned long long>(progress.tokens_encoded()));
  }
  line += absl::StrFormat(" %.1f s", progress.elapsed_seconds());
  return line;
}

ProgressDisplay::ProgressDisplay(std::FILE* out, bool interactive, double min_interval_seconds)
    : out_(out), interactive_(interactive), min_interval_(min_interval_seconds) {}

void ProgressDisplay::Update(const v1::CreateTaskProgress& progress, double now_seconds) {
  last_ = progress;
  std::string line = FormatProgress(progress);
  if (interactive_) {
    // Pad with spaces over a longer previous line.
    size_t width = line.size();
    if (line.size() < last_width_) line.append(last_width_ - line.size(), ' ');
    last_width_ = width;
    std::fprintf(out_, "\r%s", line.c_str());
    std::fflush(out_);
    any_ = true;
    return;
  }
  bool phase_changed = static_cast<int>(progress.phase()) != last_phase_;
  if (!any_ || phase_changed || now_seconds - last_print_ >= min_interval_) {
    std::fprintf(out_, "%s\n", line.c_str());
    std::fflush(out_);
    any_ = true;
    pending_ = false;
    last_print_ = now_seconds;
    last_phase_ = static_cast<int>(progress.phase());
  } else {
    pending_ = true;
  }
}

void ProgressDisplay::Finish() {
  if (interactive_) {
    if (any_) std::fprintf(out_, "\n");
  } else if (pending_) {
    std::fprintf(out_, "%s\n", FormatProgress(last_).c_str());
  }
  pending_ = false;
  any_ = false;
  std::fflush(out_);
}

}  // namespace manyshot::client
