// Benchmark corpora (see bench_corpus.h).
#include "bench_corpus.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <vector>

namespace pagedkv::bench {

namespace {

std::vector<std::string> sorted_files(const std::string& dir, const std::string& suffix) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    if (e.is_regular_file() && e.path().string().ends_with(suffix))
      out.push_back(e.path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

void append_file(const std::string& path, std::string* out) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  *out += ss.str();
}

void cut_utf8(std::string* s, size_t bytes) {
  if (s->size() <= bytes) return;
  size_t n = bytes;
  while (n > 0 && (static_cast<unsigned char>((*s)[n]) & 0xC0) == 0x80) --n;
  s->resize(n);
}

}  // namespace

std::string english_code_corpus(size_t bytes) {
  std::string text;
  for (const auto& f : sorted_files("/usr/share/common-licenses", "")) {
    if (text.size() >= bytes / 2) break;
    append_file(f, &text);
  }
  std::string include_dir;
  for (int v = 20; v >= 8; --v) {
    std::string d = "/usr/include/c++/" + std::to_string(v) + "/bits";
    if (std::filesystem::is_directory(d)) {
      include_dir = d;
      break;
    }
  }
  if (text.empty() || include_dir.empty()) return std::string();
  for (const auto& f : sorted_files(include_dir, ".h")) {
    if (text.size() >= bytes) break;
    append_file(f, &text);
  }
  cut_utf8(&text, bytes);
  return text;
}

std::string cjk_corpus(size_t bytes) {
  // Common Chinese characters, most frequent first, then kana.
  static const char kHan[] =
      "的一是不了人我在有他这中大来上国个到说们为子和你地出道也时年得就那要下以生会自着去之过家学对"
      "可她里后小么心多天而能好都然没日于起还发成事只作当想看文无开手十用主行方又如前所本见经头面公"
      "同"
      "三已老从动两长知民样现分将外但身些与高意进把法此实回二理美点月明其种声全工己话儿者向情部正名"
      "定"
      "女问力机给等几很业最间新什打便位因重被走电四第门相次东政海口使教西再平真听世气信北少关并内加"
      "化"
      "由却代军产入先山五太水万市眼体别处总才场师书比住员九笑性通目华报立马命张活难神数件安表原车白"
      "应"
      "路期叫死常提感金何更反合放做系计或司利受光王果亲界及今京务制解各任至清物台象记边共风战干接它"
      "许"
      "八特觉望直服毛林题建南度统色字请交爱让认算论百吃义科怎元社术结六功指思非流每青管夫连远资队跟"
      "带"
      "花快条院变联言权往展该领传近留红治决周保达办运武半候七必城父强步完革深区即求品士转量空甚众技"
      "轻"
      "程告江语英基派满式李息写呢识极令黄德收脸钱党倒未持取设始版双历越史商千片容研像找友孩站广改议"
      "形"
      "委早房音火际则首单据导影失拿网香似斯专石若兵弟谁校志飞观争究包组造落视济喜离虽坐集编宝谈府拉"
      "黑";
  static const char kKana[] =
      "のにをはがとでてしたいるなれかもうりすくこあまっつよおけさだやせきめえそわんみろねひほふへ"
      "アイウエオカキクケコサシスセソタチツテトナニヌネノハヒフヘホマミムメモヤユヨラリルレロワン";
  static const char* kPunct[] = {"，", "。", "、", "！", "？", "：", "；", "“", "”", "（", "）"};
  auto split = [](const char* s) {
    std::vector<std::string> v;
    std::string str(s);
    for (size_t i = 0; i < str.size(); i += 3) v.push_back(str.substr(i, 3));
    return v;
  };
  const std::vector<std::string> han = split(kHan), kana = split(kKana);
  std::mt19937_64 rng(20260101);
  // Zipf-like: index = floor(n * u^3) favours the frequent head of the list.
  auto pick = [&](const std::vector<std::string>& v) -> const std::string& {
    double u = std::uniform_real_distribution<double>(0.0, 1.0)(rng);
    size_t i = static_cast<size_t>(static_cast<double>(v.size()) * u * u * u);
    return v[std::min(i, v.size() - 1)];
  };
  std::string text;
  while (text.size() < bytes) {
    bool japanese = rng() % 4 == 0;
    int clauses = 1 + static_cast<int>(rng() % 4);
    for (int c = 0; c < clauses; ++c) {
      int len = 3 + static_cast<int>(rng() % 14);
      for (int k = 0; k < len; ++k) text += (japanese && rng() % 2) ? pick(kana) : pick(han);
      text += c + 1 < clauses ? kPunct[rng() % 2 == 0 ? 0 : 2 + rng() % 9] : kPunct[1];
    }
    if (rng() % 5 == 0) text += "\n";
  }
  cut_utf8(&text, bytes);
  return text;
}

}  // namespace pagedkv::bench
