#include "common/error.h"

#include <cstring>

namespace rg {

std::string errno_text(int err) { return std::strerror(err < 0 ? -err : err); }

}  // namespace rg
