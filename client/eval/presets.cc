#include "client/eval/presets.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace manyshot::client {
namespace {

constexpr char kPaper[] = "paper Table 6";
constexpr char kLuConfig[] = "label_configs_lu (the paper has no CR/MPQA template)";
constexpr char kDataIcl[] =
    "DataICL files: inputs arrive templated, label words are the file's options";

// Templates of the paper's Table 6, with a line break before the answer cue.
constexpr char kSst[] = "Sentence: {text}\nLabel:";
constexpr char kMr[] = "Review: {text}\nSentiment:";
constexpr char kSubj[] = "Input: {text}\nType:";
constexpr char kTrec[] = "Question: {text}\nType:";
constexpr char kAgnewsIntro[] =
    "Classify the news articles into the categories of World, Sports, Business, and "
    "Technology.\nNews: ";
constexpr char kCb[] = "{premise} Question: {hypothesis} True, False, or Neither?\nAnswer:";
constexpr char kRte[] = "Passage: {premise}\nQuestion: {hypothesis} Yes or No?\nAnswer:";

const std::vector<std::string> kBinaryWords = {"Negative", "Positive"};
const std::vector<std::string> kBinaryRaw = {"0", "1"};
const std::vector<std::string> kSst5Words = {"terrible", "bad", "neutral", "good", "great"};
const std::vector<std::string> kSst5Raw = {"0", "1", "2", "3", "4"};
// harvardnlp and yaolu number Subj 0 = subjective, 1 = objective; the paper lists objective first.
const std::vector<std::string> kSubjWords = {"objective", "subjective"};
const std::vector<std::string> kSubjRaw = {"1", "0"};
// TREC coarse classes in harvardnlp/yaolu order 0..5 (DESC, ENTY, ABBR, HUM, LOC, NUM); the
// paper's words: ABBR (abbreviation) is "Expression", HUM is "Person".
const std::vector<std::string> kTrecWords = {"Description", "Entity",   "Expression",
                                             "Person",      "Location", "Number"};
const std::vector<std::string> kTrecRaw = {"0", "1", "2", "3", "4", "5"};
const std::vector<std::string> kTrecCoarse = {"DESC", "ENTY", "ABBR", "HUM", "LOC", "NUM"};
const std::vector<std::string> kAgnewsWords = {"World", "Sports", "Business", "Technology"};
const std::vector<std::string> kAgnewsRaw = {"1", "2", "3", "4"};
const std::vector<std::string> kDbpediaWords = {
    "company", "school",  "artist", "athlete", "politics", "transportation", "building",
    "nature",  "village", "animal", "plant",   "album",    "film",           "book"};
const std::vector<std::string> kDbpediaRaw = {"1", "2", "3",  "4",  "5",  "6",  "7",
                                              "8", "9", "10", "11", "12", "13", "14"};
const std::vector<std::string> kCbWords = {"True", "False", "Neither"};
const std::vector<std::string> kCbRaw = {"entailment", "contradiction", "neutral"};
const std::vector<std::string> kRteWords = {"Yes", "No"};
const std::vector<std::string> kRteRaw = {"entailment", "not_entailment"};
const std::vector<std::string> kCrWords = {"negative", "positive"};

DatasetPreset LabelFirst(std::string name, std::string folder, std::string train, std::string test,
                         std::string input_template, std::vector<std::string> labels,
                         std::vector<std::string> raw, std::string source = kPaper) {
  DatasetPreset p;
  p.name = std::move(name);
  p.folder = std::move(folder);
  p.train_file = std::move(train);
  p.test_file = std::move(test);
  p.layout = DatasetFileLayout::kLabelFirst;
  p.input_template = std::move(input_template);
  p.labels = std::move(labels);
  p.raw_labels = std::move(raw);
  p.source = std::move(source);
  return p;
}

// yaolu/ordered-prompt files: {"sentence": ..., "label": "0"}.
DatasetPreset LuJsonl(std::string name, std::string train, std::string test,
                      std::string input_template, std::vector<std::string> labels,
                      std::vector<std::string> raw, std::string source = kPaper) {
  DatasetPreset p =
      LabelFirst(std::move(name), "", std::move(train), std::move(test), std::move(input_template),
                 std::move(labels), std::move(raw), std::move(source));
  p.folder = p.name;
  p.layout = DatasetFileLayout::kJsonl;
  p.text_field = "sentence";
  return p;
}

// terarachang/DataICL files: {"input": templated text, "output": word, "options": [...]}.
DatasetPreset DataIcl(std::string name, std::string stem, std::vector<std::string> words) {
  DatasetPreset p;
  p.name = name;
  p.folder = name;
  p.train_file = stem + "_train.jsonl";
  p.test_file = stem + "_test.jsonl";
  p.layout = DatasetFileLayout::kJsonl;
  p.text_field = "input";
  p.label_field = "output";
  p.input_template = "{input}";
  p.labels = words;
  p.raw_labels = words;
  p.source = kDataIcl;
  return p;
}

// `preset` with room for test inputs of up to `tokens` tokens: the longest test input with the
// GPT-2 tokenizer, measured against a server, plus about a quarter for tokenizers that cut finer.
DatasetPreset WithQueryRoom(DatasetPreset preset, uint32_t tokens) {
  preset.max_query_tokens = tokens;
  return preset;
}

std::vector<DatasetPreset> MakePresets() {
  std::vector<DatasetPreset> all;
  // SST-2
  all.push_back(LabelFirst("sst2_cbu", "sst2_cbu", "stsa.binary.train", "stsa.binary.dev", kSst,
                           kBinaryWords, kBinaryRaw));
  all.push_back(DataIcl("sst2_dataicl", "glue-sst2_500_0", {"negative", "positive"}));
  // SST-5
  all.push_back(LabelFirst("sst5_harvard", "sst5_harvard", "stsa.fine.train", "stsa.fine.dev", kSst,
                           kSst5Words, kSst5Raw));
  all.push_back(LuJsonl("sst5_lu", "train.jsonl", "dev.jsonl", kSst, kSst5Words, kSst5Raw));
  // MR
  all.push_back(
      LabelFirst("mr_harvard", "mr_harvard", "rt-polarity.all", "", kMr, kBinaryWords, kBinaryRaw));
  all.push_back(LuJsonl("mr_lu", "train.jsonl", "test.jsonl", kMr, kBinaryWords, kBinaryRaw));
  // Subj
  all.push_back(WithQueryRoom(
      LabelFirst("subj_harvard", "subj_harvard", "subj.all", "", kSubj, kSubjWords, kSubjRaw),
      224));
  all.push_back(WithQueryRoom(
      LuJsonl("subj_lu", "train.jsonl", "test.jsonl", kSubj, kSubjWords, kSubjRaw), 192));
  all.push_back(DataIcl("subj_dataicl", "subj_500_0", kSubjWords));
  // TREC
  DatasetPreset trec_cbu =
      LabelFirst("trec_cbu", "trec_cbu", "train.txt", "test.txt", kTrec, kTrecWords, kTrecCoarse);
  trec_cbu.label_delimiter = ':';
  all.push_back(trec_cbu);
  all.push_back(LabelFirst("trec_harvard", "trec_harvard", "TREC.train.all", "TREC.test.all", kTrec,
                           kTrecWords, kTrecRaw));
  all.push_back(LuJsonl("trec_lu", "train.jsonl", "test.jsonl", kTrec, kTrecWords, kTrecRaw));
  // AGNews: no training split is shipped in agnews_cbu (test.csv only) or agnews_lu (test and a
  // 256-example dev subsample): agnews_cbu holds out every tenth example of test.csv, agnews_lu
  // draws demonstrations from test.jsonl and tests on dev_subsample.jsonl.
  DatasetPreset agnews_cbu;
  agnews_cbu.name = "agnews_cbu";
  agnews_cbu.folder = "agnews_cbu";
  agnews_cbu.train_file = "test.csv";
  agnews_cbu.layout = DatasetFileLayout::kCsv;
  agnews_cbu.fields = {{"title", "Title"}, {"description", "Description"}};
  agnews_cbu.label_field = "Class Index";
  agnews_cbu.input_template = absl::StrCat(kAgnewsIntro, "{title}. {description}\nType:");
  agnews_cbu.labels = kAgnewsWords;
  agnews_cbu.raw_labels = kAgnewsRaw;
  agnews_cbu.source = kPaper;
  all.push_back(WithQueryRoom(agnews_cbu, 256));
  all.push_back(
      WithQueryRoom(LuJsonl("agnews_lu", "test.jsonl", "dev_subsample.jsonl",
                            absl::StrCat(kAgnewsIntro, "{text}\nType:"), kAgnewsWords, kAgnewsRaw),
                    256));
  all.push_back(WithQueryRoom(DataIcl("agnews_dataicl", "ag_news_500_0", kAgnewsWords), 256));
  // DBPedia: dbpedia_cbu ships no examples; dbpedia_lu only a 256-example subsample.
  all.push_back(WithQueryRoom(
      LuJsonl("dbpedia_lu", "dev_subsample.jsonl", "", kSubj, kDbpediaWords, kDbpediaRaw), 192));
  // CB and RTE (their test files carry no labels: the validation split is the test split).
  DatasetPreset cb = LuJsonl("cb_cbu", "train.jsonl", "val.jsonl", kCb, kCbWords, kCbRaw);
  cb.fields = {{"premise", "premise"}, {"hypothesis", "hypothesis"}};
  all.push_back(WithQueryRoom(cb, 384));
  DatasetPreset rte_cbu = LuJsonl("rte_cbu", "train.jsonl", "val.jsonl", kRte, kRteWords, kRteRaw);
  rte_cbu.fields = {{"premise", "premise"}, {"hypothesis", "hypothesis"}};
  all.push_back(WithQueryRoom(rte_cbu, 320));
  DatasetPreset rte_lu = LuJsonl("rte_lu", "train.jsonl", "dev.jsonl", kRte, kRteWords, kRteRaw);
  rte_lu.fields = {{"premise", "sentence_1"}, {"hypothesis", "sentence_2"}};
  all.push_back(WithQueryRoom(rte_lu, 320));
  // BoolQ
  all.push_back(WithQueryRoom(DataIcl("boolq_dataicl", "boolq_500_0", {"no", "yes"}), 640));
  // CR and MPQA (not in the paper).
  all.push_back(
      LuJsonl("cr_lu", "train.jsonl", "test.jsonl", kMr, kCrWords, kBinaryRaw, kLuConfig));
  all.push_back(
      LuJsonl("mpqa_lu", "train.jsonl", "test.jsonl", kMr, kCrWords, kBinaryRaw, kLuConfig));
  all.push_back(LabelFirst("cr_harvard", "cr_mpqa_harvard", "custrev.all", "", kMr, kCrWords,
                           kBinaryRaw, kLuConfig));
  all.push_back(LabelFirst("mpqa_harvard", "cr_mpqa_harvard", "mpqa.all", "", kMr, kCrWords,
                           kBinaryRaw, kLuConfig));
  return all;
}

}  // namespace

const std::vector<DatasetPreset>& DatasetPresets() {
  static const std::vector<DatasetPreset>* presets = new std::vector<DatasetPreset>(MakePresets());
  return *presets;
}

absl::StatusOr<DatasetPreset> FindDatasetPreset(std::string_view name) {
  std::vector<std::string> names;
  for (const DatasetPreset& preset : DatasetPresets()) {
    if (preset.name == name) return preset;
    names.push_back(preset.name);
  }
  return absl::NotFoundError(absl::StrCat("unknown preset '", std::string(name),
                                          "'; presets: ", absl::StrJoin(names, ", ")));
}

std::map<std::string, std::string> PresetLabelMap(const DatasetPreset& preset) {
  std::map<std::string, std::string> map;
  for (size_t i = 0; i < preset.labels.size() && i < preset.raw_labels.size(); ++i) {
    map[preset.raw_labels[i]] = preset.labels[i];
  }
  return map;
}

}  // namespace manyshot::client
