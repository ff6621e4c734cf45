#include "exporter.h"

#include "error.h"

namespace rg {

struct Exporter::Impl {
  ExporterOptions opts;
};

Exporter::Exporter(ExporterOptions opts) : impl_(std::make_unique<Impl>()) {
  impl_->opts = std::move(opts);
}
Exporter::~Exporter() = default;
void Exporter::set_attach_state(const std::string&, const std::string&, bool) {}
std::string Exporter::listen_address() const { return impl_->opts.listen; }

}  // namespace rg
