// Must not include any abseil header (see sp_processor.h).
#include "tests/engine/tokenizer/sp_processor.h"

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

namespace manyshot {
namespace {

std::string ErrorText(const sentencepiece::util::Status& s) {
  if (s.ok()) return "";
  std::string text = s.ToString();
  return text.empty() ? "unknown sentencepiece error" : text;
}

}  // namespace

SpProcessor::SpProcessor() : sp_(std::make_unique<sentencepiece::SentencePieceProcessor>()) {}
SpProcessor::~SpProcessor() = default;

std::string SpProcessor::LoadFromSerializedProto(std::string_view proto) {
  return ErrorText(sp_->LoadFromSerializedProto(proto));
}

std::string SpProcessor::LoadFromFile(const std::string& path) {
  return ErrorText(sp_->Load(path));
}

std::string SpProcessor::Encode(std::string_view text, std::vector<int>& ids) const {
  return ErrorText(sp_->Encode(text, &ids));
}

std::vector<std::string> SpProcessor::EncodeAsPieces(std::string_view text) const {
  return sp_->EncodeAsPieces(text);
}

std::string SpProcessor::DecodeIds(const std::vector<int>& ids) const {
  return sp_->DecodeIds(ids);
}

int SpProcessor::GetPieceSize() const { return sp_->GetPieceSize(); }
std::string SpProcessor::IdToPiece(int id) const { return sp_->IdToPiece(id); }
int SpProcessor::PieceToId(std::string_view piece) const { return sp_->PieceToId(piece); }
bool SpProcessor::IsByte(int id) const { return sp_->IsByte(id); }
bool SpProcessor::IsControl(int id) const { return sp_->IsControl(id); }
bool SpProcessor::IsUnknown(int id) const { return sp_->IsUnknown(id); }
int SpProcessor::bos_id() const { return sp_->bos_id(); }
int SpProcessor::eos_id() const { return sp_->eos_id(); }

std::string SpProcessor::Train(const std::unordered_map<std::string, std::string>& args,
                               std::string* model) {
  return ErrorText(sentencepiece::SentencePieceTrainer::Train(args, nullptr, model));
}

}  // namespace manyshot
