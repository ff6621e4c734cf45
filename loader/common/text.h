// Bytes the system hands over as names (an interface name is any bytes but
// NUL, '/', ':' and whitespace to the kernel) against what JSON, Prometheus
// labels and messages can carry: UTF-8 text.
#pragma once

#include <string>
#include <string_view>

namespace rg {

// True when bytes are UTF-8 (RFC 3629) without control characters (C0, DEL).
bool is_text(std::string_view bytes);

// bytes as text: UTF-8 without control characters passes unchanged; every
// other byte is written \xNN (two lowercase hex digits), so a name that is
// not text still shows, as the same text every time.
std::string printable(std::string_view bytes);

}  // namespace rg
