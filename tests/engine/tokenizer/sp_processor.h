// A std-only facade over libsentencepiece, the independent reference that the tokenizer tests
// compare manyshot's own tokenizer.model reader against. Test binaries only: libsentencepiece
// bundles a protobuf that clashes with gRPC's, so nothing in engine/ or server/ may link it.
//
// sentencepiece_processor.h declares `namespace absl { using std::string_view; }`, which clashes
// with this abseil build's own absl::string_view class: no file may include both. The tests talk
// to libsentencepiece through this header, which includes neither.
#ifndef MANYSHOT_TESTS_ENGINE_TOKENIZER_SP_PROCESSOR_H_
#define MANYSHOT_TESTS_ENGINE_TOKENIZER_SP_PROCESSOR_H_

#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace sentencepiece {
class SentencePieceProcessor;
}

namespace manyshot {

class SpProcessor {
 public:
  SpProcessor();
  ~SpProcessor();
  SpProcessor(const SpProcessor&) = delete;
  SpProcessor& operator=(const SpProcessor&) = delete;

  // Errors are returned as text ("" = success), to be wrapped by the caller.
  std::string LoadFromSerializedProto(std::string_view proto);
  std::string LoadFromFile(const std::string& path);
  // Plain libsentencepiece encoding: no special-token handling, no bos/eos.
  std::string Encode(std::string_view text, std::vector<int>& ids) const;
  std::vector<std::string> EncodeAsPieces(std::string_view text) const;
  std::string DecodeIds(const std::vector<int>& ids) const;

  int GetPieceSize() const;
  std::string IdToPiece(int id) const;
  int PieceToId(std::string_view piece) const;
  bool IsByte(int id) const;
  bool IsControl(int id) const;
  bool IsUnknown(int id) const;
  int bos_id() const;
  int eos_id() const;

  // SentencePieceTrainer::Train with key/value flags; the model proto goes to *model.
  static std::string Train(const std::unordered_map<std::string, std::string>& args,
                           std::string* model);

 private:
  std::unique_ptr<sentencepiece::SentencePieceProcessor> sp_;
};

}  // namespace manyshot

#endif  // MANYSHOT_TESTS_ENGINE_TOKENIZER_SP_PROCESSOR_H_
