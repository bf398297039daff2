#include "json.h"

#include <cstdio>

#include "kiln/runtime/error.h"

namespace kiln::serialize_detail {

const char* Json::kind_name() const {
  switch (kind) {
    case Kind::Null:
      return "null";
    case Kind::Bool:
      return "a boolean";
    case Kind::Number:
      return "a number";
    case Kind::String:
      return "a string";
    case Kind::Array:
      return "an array";
    case Kind::Object:
      return "an object";
  }
  return "?";
}

std::optional<uint64_t> Json::as_u64() const {
  if (kind != Kind::Number || text.empty()) return std::nullopt;
  uint64_t v = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
    const uint64_t d = static_cast<uint64_t>(c - '0');
    if (v > (UINT64_MAX - d) / 10) return std::nullopt;
    v = v * 10 + d;
  }
  return v;
}

namespace {

class Parser {
 public:
  Parser(std::string_view s, const char* op, const std::string& source)
      : s_(s), op_(op), source_(source) {}

  Json document() {
    ws();
    Json j = value(0);
    ws();
    if (i_ != s_.size()) bad("unexpected text after the JSON value");
    return j;
  }

 private:
  [[noreturn]] void bad(const char* what) {
    fail(op_, source_, ": bad JSON header: ", what, " at byte ", i_);
  }
  char peek() const { return i_ < s_.size() ? s_[i_] : '\0'; }
  bool at_end() const { return i_ >= s_.size(); }
  void ws() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\n' || s_[i_] == '\r'))
      ++i_;
  }
  void literal(std::string_view word) {
    if (s_.substr(i_, word.size()) != word) bad("invalid literal");
    i_ += word.size();
  }

  Json value(int depth) {
    if (depth > 64) bad("nesting deeper than 64 levels");
    if (at_end()) bad("unexpected end of the header");
    Json j;
    const char c = peek();
    if (c == '{') {
      j.kind = Json::Kind::Object;
      ++i_;
      ws();
      if (peek() == '}') return ++i_, j;
      for (;;) {
        ws();
        if (peek() != '"') bad("expected a string key");
        std::string key = string();
        ws();
        if (peek() != ':') bad("expected ':'");
        ++i_;
        ws();
        j.object.emplace_back(std::move(key), value(depth + 1));
        ws();
        if (peek() == ',') {
          ++i_;
          continue;
        }
        if (peek() == '}') return ++i_, j;
        bad("expected ',' or '}'");
      }
    }
    if (c == '[') {
      j.kind = Json::Kind::Array;
      ++i_;
      ws();
      if (peek() == ']') return ++i_, j;
      for (;;) {
        ws();
        j.array.push_back(value(depth + 1));
        ws();
        if (peek() == ',') {
          ++i_;
          continue;
        }
        if (peek() == ']') return ++i_, j;
        bad("expected ',' or ']'");
      }
    }
    if (c == '"') {
      j.kind = Json::Kind::String;
      j.text = string();
      return j;
    }
    if (c == 't') return literal("true"), j.kind = Json::Kind::Bool, j.boolean = true, j;
    if (c == 'f') return literal("false"), j.kind = Json::Kind::Bool, j;
    if (c == 'n') return literal("null"), j;
    if (c == '-' || (c >= '0' && c <= '9')) {
      j.kind = Json::Kind::Number;
      j.text = number();
      return j;
    }
    bad("unexpected character");
  }

  static bool digit(char c) { return c >= '0' && c <= '9'; }

  std::string number() {
    const size_t start = i_;
    if (peek() == '-') ++i_;
    if (peek() == '0') {
      ++i_;
    } else if (digit(peek())) {
      while (digit(peek())) ++i_;
    } else {
      bad("invalid number");
    }
    if (peek() == '.') {
      ++i_;
      if (!digit(peek())) bad("invalid number");
      while (digit(peek())) ++i_;
    }
    if (peek() == 'e' || peek() == 'E') {
      ++i_;
      if (peek() == '+' || peek() == '-') ++i_;
      if (!digit(peek())) bad("invalid number");
      while (digit(peek())) ++i_;
    }
    return std::string(s_.substr(start, i_ - start));
  }

  unsigned hex4() {
    unsigned v = 0;
    for (int k = 0; k < 4; ++k) {
      const char c = peek();
      unsigned d;
      if (c >= '0' && c <= '9')
        d = c - '0';
      else if (c >= 'a' && c <= 'f')
        d = c - 'a' + 10;
      else if (c >= 'A' && c <= 'F')
        d = c - 'A' + 10;
      else
        bad("invalid \\u escape");
      v = v * 16 + d;
      ++i_;
    }
    return v;
  }

  static void utf8(std::string& out, uint32_t cp) {
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xC0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      out += static_cast<char>(0xE0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (cp >> 18));
      out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }

  // Validates one UTF-8 sequence starting at i_ and appends it.
  void utf8_raw(std::string& out) {
    const auto b0 = static_cast<unsigned char>(s_[i_]);
    int n;
    uint32_t cp;
    if (b0 < 0x80)
      n = 0, cp = b0;
    else if ((b0 & 0xE0) == 0xC0)
      n = 1, cp = b0 & 0x1F;
    else if ((b0 & 0xF0) == 0xE0)
      n = 2, cp = b0 & 0x0F;
    else if ((b0 & 0xF8) == 0xF0)
      n = 3, cp = b0 & 0x07;
    else
      bad("invalid UTF-8");
    if (s_.size() - i_ <= static_cast<size_t>(n)) bad("invalid UTF-8");
    for (int k = 1; k <= n; ++k) {
      const auto b = static_cast<unsigned char>(s_[i_ + k]);
      if ((b & 0xC0) != 0x80) bad("invalid UTF-8");
      cp = (cp << 6) | (b & 0x3F);
    }
    static const uint32_t min_cp[] = {0, 0x80, 0x800, 0x10000};
    if (cp < min_cp[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) bad("invalid UTF-8");
    out.append(s_.substr(i_, n + 1));
    i_ += n + 1;
  }

  std::string string() {
    ++i_;  // opening quote
    std::string out;
    for (;;) {
      if (at_end()) bad("unterminated string");
      const char c = s_[i_];
      if (c == '"') {
        ++i_;
        return out;
      }
      if (static_cast<unsigned char>(c) < 0x20) bad("control character in a string");
      if (c != '\\') {
        utf8_raw(out);
        continue;
      }
      ++i_;
      const char e = peek();
      ++i_;
      switch (e) {
        case '"':
          out += '"';
          break;
        case '\\':
          out += '\\';
          break;
        case '/':
          out += '/';
          break;
        case 'b':
          out += '\b';
          break;
        case 'f':
          out += '\f';
          break;
        case 'n':
          out += '\n';
          break;
        case 'r':
          out += '\r';
          break;
        case 't':
          out += '\t';
          break;
        case 'u': {
          uint32_t cp = hex4();
          if (cp >= 0xD800 && cp <= 0xDBFF) {
            if (peek() != '\\' || i_ + 1 >= s_.size() || s_[i_ + 1] != 'u')
              bad("unpaired surrogate in \\u escape");
            i_ += 2;
            const uint32_t lo = hex4();
            if (lo < 0xDC00 || lo > 0xDFFF) bad("unpaired surrogate in \\u escape");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
            bad("unpaired surrogate in \\u escape");
          }
          utf8(out, cp);
          break;
        }
        default:
          --i_, bad("invalid escape");
      }
    }
  }

  std::string_view s_;
  size_t i_ = 0;
  const char* op_;
  const std::string& source_;
};

}  // namespace

Json parse_json(std::string_view text, const char* op, const std::string& source) {
  return Parser(text, op, source).document();
}

}  // namespace kiln::serialize_detail
