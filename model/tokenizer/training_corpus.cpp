#include "model/tokenizer/training_corpus.hpp"

#include <array>
#include <vector>

#include "model/tokenizer/utf8.hpp"

namespace kiln::model {

std::string_view embedded_corpus() {
    static const std::string text = R"(The kiln runtime serves large mixture-of-experts models. It compiles its kernels when they are first needed,
keeps them in a cache, and reuses them on the next run. Tokens are counted, batched and scheduled; the scheduler
decides which request runs next, and the cache remembers what was already computed. We're testing whether it's
working, and they'll tell us if something is off. I've seen the numbers: 1,024 tokens in 3.5 ms, or 292,571 per second.
Please don't change the configuration file unless you know what you're doing!

Kiln là một hệ thống phục vụ mô hình ngôn ngữ lớn. Người dùng gửi yêu cầu, máy chủ trả lời từng từ một.
Tiếng Việt có nhiều dấu thanh: sắc, huyền, hỏi, ngã, nặng. Chúng tôi đang kiểm tra bộ tách từ với văn bản này.
Hôm nay trời đẹp, chúng ta đi dạo ở công viên gần nhà và uống cà phê sữa đá.

语言模型把文本切分成词元，然后逐个生成新的词元。这个系统在没有显卡的机器上也可以运行和测试。
我们今天测试分词器：中文、日本語、한국어以及其他文字。北京、上海、广州和深圳都是大城市。

東京は日本の首都です。私たちは新しいモデルを試しています。ひらがなとカタカナと漢字が混ざった文章です。
서울은 한국의 수도입니다. 우리는 토크나이저를 시험하고 있습니다. 오늘 날씨가 정말 좋네요.
Москва — столица России. Мы проверяем, как работает токенизатор на кириллице и смешанном тексте.
Η Αθήνα είναι η πρωτεύουσα της Ελλάδας. Δοκιμάζουμε τον διαχωριστή λέξεων σε ελληνικό κείμενο.
नमस्ते, यह एक परीक्षण वाक्य है। हम हिंदी पाठ पर टोकनाइज़र की जाँच कर रहे हैं।
مرحبا بالعالم، هذا نص تجريبي باللغة العربية لاختبار المقسم.
Emoji too: 👋 🙂 🚀 🔥 👍🏽 👨‍👩‍👧‍👦 🏳️‍🌈 ❤️ — and symbols like © ® ™ € £ ¥ § ¶ ° ± × ÷ → ← ≤ ≥ ≠ ∞ √ ∑.

def tokenize(text: str, allow_special: bool = False) -> list[int]:
    """Split text into pieces and merge bytes by rank."""
    ids = []
    for piece in PATTERN.findall(text):
        ids.extend(bpe(piece))
    return ids

int main(int argc, char** argv) {
    std::vector<uint32_t> ids = tokenizer.encode(argv[1], SpecialTokens::text);
    for (size_t i = 0; i < ids.size(); ++i) {
        if (i) std::printf(" ");
        std::printf("%u", ids[i]);
    }
    return 0;
}

{"model": "k3-tiny", "layers": 4, "hidden_size": 256, "vocab_size": 4096, "rope_theta": 10000.0}
SELECT id, name, created_at FROM requests WHERE status = 'done' ORDER BY created_at DESC LIMIT 10;
)";
    return text;
}

namespace {

struct Rng {
    uint64_t s;
    explicit Rng(uint64_t seed) : s(seed * 0x9E3779B97F4A7C15ull + 0x2545F4914F6CDD1Dull) {}
    uint64_t next() {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        return s;
    }
    size_t below(size_t n) { return static_cast<size_t>(next() % n); }
    bool chance(unsigned percent) { return below(100) < percent; }
};

template <size_t N>
const char* pick(Rng& r, const std::array<const char*, N>& a) {
    return a[r.below(N)];
}

const std::array<const char*, 64> english = {
    "the", "of", "and", "to", "in", "is", "it", "that", "for", "on", "with", "as", "was", "be", "by", "this",
    "are", "from", "at", "or", "an", "have", "not", "but", "which", "one", "all", "they", "we", "can", "more",
    "model", "token", "kernel", "cache", "server", "request", "batch", "memory", "layer", "expert", "attention",
    "compile", "runtime", "device", "value", "state", "output", "input", "number", "time", "people", "world",
    "water", "house", "little", "because", "through", "between", "another", "should", "every", "during",
    "without"};
const std::array<const char*, 24> latin_onset = {"b", "c", "d", "f", "g", "h", "j", "k", "l", "m", "n", "p",
                                                 "r", "s", "t", "v", "w", "z", "br", "st", "tr", "ch", "sh", "pl"};
const std::array<const char*, 8> latin_vowel = {"a", "e", "i", "o", "u", "ea", "ou", "ie"};
const std::array<const char*, 10> latin_coda = {"", "", "n", "r", "s", "t", "l", "nd", "ng", "ck"};
const std::array<const char*, 18> viet_onset = {"", "b", "c", "d", "đ", "g", "h", "k", "l", "m",
                                                "n", "ng", "nh", "ph", "qu", "th", "tr", "v"};
// Vowels with tone marks, precomposed (NFC).
const std::array<const char*, 36> viet_vowel = {"a", "á", "à", "ả", "ã", "ạ", "ă", "ắ", "ằ", "ặ", "â", "ấ",
                                                "ầ", "ậ", "e", "é", "è", "ê", "ế", "ề", "ệ", "i", "í", "ì",
                                                "o", "ó", "ò", "ô", "ố", "ồ", "ơ", "ớ", "ờ", "u", "ú", "ư"};
const std::array<const char*, 8> viet_coda = {"", "", "n", "ng", "nh", "t", "c", "m"};
const std::array<const char*, 8> code_words = {"return", "const", "auto", "if", "for", "while", "int", "std::vector"};
const std::array<const char*, 10> code_ops = {" = ", " == ", " + ", " - ", " * ", " / ", "->", "::", " && ", " || "};
const std::array<const char*, 16> emoji = {"🙂", "🚀", "🔥", "👍", "👍🏽", "👨‍👩‍👧", "🏳️‍🌈", "❤️", "✅",
                                           "🎉", "🤖", "🌍", "😂", "🥲", "🧪", "🐍"};
const std::array<const char*, 8> punct = {".", ",", "!", "?", ";", ":", " -", "..."};
const std::array<const char*, 6> cjk_punct = {"，", "。", "、", "！", "？", "："};

// Common Han characters (a fixed list keeps the generated text deterministic and realistic).
const char* han_chars =
    "的一是不了人我在有他这中大来上国个到说们为子和你地出道也时年得就那要下以生会自着去之过家学对可她里后小么"
    "心多天而能好都然没日于起还发成事只作当想看文无开手十用主行方又如前所本见经头面公同三已老从动两长知民样现"
    "分将外但身些与高意进把法此实回二理美点月明其种声全工己话儿者向情部正名定女问力机给等几很业最间新什打便位"
    "因重被走电四第门相次东政海口使教西再平真听世气信北少关并内加化由却代军产入先山五太水万市眼体别处总才场师";

const std::array<const char*, 20> kana = {"あ", "い", "う", "か", "き", "く", "さ", "し", "た", "の",
                                          "に", "は", "を", "ン", "カ", "タ", "ト", "ス", "ル", "ー"};
const std::array<const char*, 20> cyrillic = {"а", "б", "в", "г", "д", "е", "ж", "з", "и", "к",
                                              "л", "м", "н", "о", "п", "р", "с", "т", "у", "я"};
const std::array<const char*, 16> greek = {"α", "β", "γ", "δ", "ε", "ζ", "η", "θ", "ι", "κ", "λ", "μ", "ν", "ο", "π", "σ"};
const std::array<const char*, 12> deva = {"क", "ख", "ग", "त", "न", "म", "र", "स", "ह", "ा", "ि", "्"};
const std::array<const char*, 12> arabic = {"ا", "ب", "ت", "ج", "د", "ر", "س", "ع", "ل", "م", "ن", "ي"};

void han(Rng& r, std::string& out, size_t n) {
    static const std::vector<char32_t> chars = [] {
        std::vector<char32_t> v;
        std::string_view s = han_chars;
        for (size_t p = 0; p < s.size();) v.push_back(utf8::next(s, p));
        return v;
    }();
    for (size_t i = 0; i < n; ++i) utf8::append(out, chars[r.below(chars.size())]);
}

void hangul(Rng& r, std::string& out, size_t n) {
    for (size_t i = 0; i < n; ++i) {
        // Composed syllable from a small set of leads/vowels/tails so words repeat.
        const char32_t l = static_cast<char32_t>(r.below(8)), v = static_cast<char32_t>(r.below(6)),
                       t = static_cast<char32_t>(r.chance(40) ? r.below(5) * 4 : 0);
        utf8::append(out, 0xAC00 + (l * 21 + v) * 28 + t);
    }
}

template <size_t N>
void letters(Rng& r, std::string& out, const std::array<const char*, N>& alphabet, size_t n) {
    for (size_t i = 0; i < n; ++i) out += pick(r, alphabet);
}

void sentence(Rng& r, std::string& out) {
    const size_t kind = r.below(20);
    const size_t words = 3 + r.below(10);
    for (size_t w = 0; w < words; ++w) {
        if (w) out += ' ';
        switch (kind) {
        case 0: case 1: case 2: case 3: case 4: case 5:
            if (w == 0 || r.chance(10)) {
                std::string word = pick(r, english);
                word[0] = static_cast<char>(word[0] - 'a' + 'A');
                out += word;
            } else if (r.chance(75)) {
                out += pick(r, english);
            } else {
                out += pick(r, latin_onset);
                out += pick(r, latin_vowel);
                out += pick(r, latin_coda);
                if (r.chance(10)) out += r.chance(50) ? "'s" : "'ll";
            }
            break;
        case 6: case 7:
            out += pick(r, viet_onset);
            out += pick(r, viet_vowel);
            out += pick(r, viet_coda);
            break;
        case 8: case 9:
            out.pop_back();  // Han text runs without spaces
            han(r, out, 1 + r.below(4));
            if (r.chance(20)) out += pick(r, cjk_punct);
            break;
        case 10:
            letters(r, out, kana, 2 + r.below(4));
            break;
        case 11:
            hangul(r, out, 1 + r.below(4));
            break;
        case 12:
            letters(r, out, cyrillic, 2 + r.below(7));
            break;
        case 13:
            letters(r, out, greek, 2 + r.below(6));
            break;
        case 14:
            letters(r, out, deva, 2 + r.below(5));
            break;
        case 15:
            letters(r, out, arabic, 2 + r.below(5));
            break;
        case 16:
            out += std::to_string(r.next() % (r.chance(50) ? 100 : 10'000'000));
            if (r.chance(30)) {
                out += '.';
                out += std::to_string(r.below(100));
            }
            break;
        case 17:
            out += pick(r, emoji);
            break;
        default:
            out += pick(r, code_words);
            out += pick(r, code_ops);
            out += pick(r, latin_onset);
            out += pick(r, latin_vowel);
            out += r.chance(50) ? "();" : "[i]";
            break;
        }
    }
    if (kind < 8 || kind > 9) out += pick(r, punct);
}

}  // namespace

std::string generate_corpus(uint64_t seed, size_t bytes) {
    Rng r(seed);
    std::string out;
    out.reserve(bytes + 256);
    while (out.size() < bytes) {
        sentence(r, out);
        const size_t ws = r.below(100);
        if (ws < 60) {
            out += ' ';
        } else if (ws < 80) {
            out += '\n';
        } else if (ws < 88) {
            out += "\n\n";
        } else if (ws < 92) {
            out += "\r\n";
        } else if (ws < 96) {
            out += "\n    ";
        } else {
            out += std::string(2 + r.below(12), ' ');
        }
    }
    return out;
}

}  // namespace kiln::model
