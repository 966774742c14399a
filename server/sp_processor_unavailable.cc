// manyshot-server's SpProcessor: SentencePiece tokenizer.model files are refused with a clear
// error, and libsentencepiece is not linked into the server.
//
// Why: Debian's libsentencepiece.so.0 bundles its own protobuf-lite 3.14 and exports those
// symbols; gRPC needs libprotobuf.so.32 (3.21). In one process one of them interposes the
// other's symbols: with libsentencepiece first, libprotobuf's static initialisers crash
// (SIGSEGV in ReflectionOps::FindInitializationErrors before main); with libprotobuf first,
// sentencepiece aborts in its version check. So the server links this file (an object of the
// executable, so the linker never pulls engine/tokenizer/sp_processor.cc out of
// libmanyshot_tokenizer.a) and drops libsentencepiece with --as-needed (server/CMakeLists.txt).
// tokenizer.json and vocab.json + merges.txt are unaffected; a Llama-style directory that has
// only tokenizer.model needs a tokenizer.json (Hugging Face ships one with every such model).
//
// Must not include any abseil header (see sp_processor.h).
#include <sentencepiece_processor.h>

#include "engine/tokenizer/sp_processor.h"

namespace manyshot {
namespace {

constexpr char kUnavailable[] =
    "SentencePiece tokenizer.model files are not supported by manyshot-server (libsentencepiece "
    "bundles a protobuf that clashes with gRPC's); put the model's tokenizer.json in the model "
    "directory instead";

}  // namespace

// sp_ stays null: nothing here constructs a SentencePieceProcessor (deleting a null pointer
// through its virtual destructor needs no libsentencepiece symbol).
SpProcessor::SpProcessor() = default;
SpProcessor::~SpProcessor() = default;

std::string SpProcessor::LoadFromSerializedProto(std::string_view) { return kUnavailable; }
std::string SpProcessor::LoadFromFile(const std::string&) { return kUnavailable; }
std::string SpProcessor::Encode(std::string_view, std::vector<int>& ids) const {
  ids.clear();
  return kUnavailable;
}
std::vector<std::string> SpProcessor::EncodeAsPieces(std::string_view) const { return {}; }
std::string SpProcessor::DecodeIds(const std::vector<int>&) const { return ""; }
int SpProcessor::GetPieceSize() const { return 0; }
std::string SpProcessor::IdToPiece(int) const { return ""; }
int SpProcessor::PieceToId(std::string_view) const { return 0; }
bool SpProcessor::IsByte(int) const { return false; }
bool SpProcessor::IsControl(int) const { return false; }
bool SpProcessor::IsUnknown(int) const { return false; }
int SpProcessor::bos_id() const { return -1; }
int SpProcessor::eos_id() const { return -1; }

std::string SpProcessor::Train(const std::unordered_map<std::string, std::string>&,
                               std::string* model) {
  if (model != nullptr) model->clear();
  return kUnavailable;
}

}  // namespace manyshot
