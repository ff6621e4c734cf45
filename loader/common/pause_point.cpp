#include "common/pause_point.h"

namespace rg {
namespace {
PauseHandler g_handler = nullptr;
}  // namespace

void set_pause_handler(PauseHandler handler) { g_handler = handler; }

void pause_point(const char* point) {
  if (g_handler) g_handler(point);
}

}  // namespace rg
