// Named points inside the all-or-nothing sections of attach and detach, where
// a test build can stop the process to deliver a signal in the middle of
// one, and inside a scrape ("scrape"), where an exporter test holds the
// HTTP workers. The roceguard binary installs no handler: a pause point is
// then a null check and nothing else.
#pragma once

namespace rg {

using PauseHandler = void (*)(const char* point);

void set_pause_handler(PauseHandler handler);
void pause_point(const char* point);

}  // namespace rg
