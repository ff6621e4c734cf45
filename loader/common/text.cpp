#include "common/text.h"

#include <cstdint>

namespace rg {
namespace {

// Length of the UTF-8 character that starts at bytes[i] when it is text,
// 0 when the byte there is not (a control character, a stray continuation
// byte, an overlong form, a surrogate, beyond U+10FFFF, cut short).
size_t text_char_length(std::string_view bytes, size_t i) {
  const auto c = static_cast<unsigned char>(bytes[i]);
  if (c < 0x20 || c == 0x7f) return 0;
  if (c < 0x80) return 1;
  const size_t n = (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xe ? 3 : (c >> 3) == 0x1e ? 4 : 0;
  if (!n || i + n > bytes.size()) return 0;
  uint32_t cp = c & (0x7f >> n);
  for (size_t k = 1; k < n; ++k) {
    const auto d = static_cast<unsigned char>(bytes[i + k]);
    if ((d & 0xc0) != 0x80) return 0;
    cp = (cp << 6) | (d & 0x3f);
  }
  static constexpr uint32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
  if (cp < kMin[n] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return 0;
  return n;
}

}  // namespace

bool is_text(std::string_view bytes) {
  for (size_t i = 0; i < bytes.size();) {
    const size_t n = text_char_length(bytes, i);
    if (!n) return false;
    i += n;
  }
  return true;
}

std::string printable(std::string_view bytes) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size());
  for (size_t i = 0; i < bytes.size();) {
    if (const size_t n = text_char_length(bytes, i)) {
      out.append(bytes.substr(i, n));
      i += n;
      continue;
    }
    const auto c = static_cast<unsigned char>(bytes[i++]);
    out += "\\x";
    out += kHex[c >> 4];
    out += kHex[c & 0xf];
  }
  return out;
}

}  // namespace rg
