// Exporter cost: time, heap allocations and peak heap held by one
// /metrics scrape with --qps tracked QPs (64 k and 1 M in bench/README.md),
// per-QP series off and on (--top-qps of them), and what gzip makes of the
// body (the exporter compresses it for clients that accept gzip): its size
// and the time zlib takes at the default level.
//
// The roceguard object is loaded with its maps pinned in a private bpffs
// directory, rg_qp4 is filled from userspace (QpSlotTable::place) with QPs
// that carry traffic and a few counter rows are written; the exporter (loader/metrics/exporter.cpp, as
// `roceguard run` starts it) serves them on a loopback port and this
// process scrapes it over HTTP. Allocations are counted by replacing the
// global operator new, which sees every C++ allocation in the process: the
// exporter's worker thread, the map reader and prometheus-cpp's serializer.
// C allocations (libmicrohttpd's request buffers, libbpf) are not counted. The
// peak is the most C++ heap held at once during a scrape beyond what was
// held before it (malloc_usable_size of every live allocation).
//
//   bench_exporter_scrape [--qps N] [--top-qps N] [--scrapes N] [--json FILE]
#include <arpa/inet.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <malloc.h>
#include <new>

#include "bench_util.h"
#include "dataplane/maps.h"
#include "dataplane/state.h"
#include "metrics/exporter.h"
#include "roceguard.skel.h"

namespace {
std::atomic<uint64_t> g_allocs{0}, g_alloc_bytes{0};
std::atomic<int64_t> g_live{0}, g_peak{0};

void note_alloc(void* p) {
  const int64_t live = g_live.fetch_add(static_cast<int64_t>(malloc_usable_size(p))) +
                       static_cast<int64_t>(malloc_usable_size(p));
  int64_t peak = g_peak.load(std::memory_order_relaxed);
  while (live > peak && !g_peak.compare_exchange_weak(peak, live)) {
  }
}

void release(void* p) {
  if (p) g_live.fetch_sub(static_cast<int64_t>(malloc_usable_size(p)));
  std::free(p);
}
}  // namespace

// The replacements pair malloc with free themselves; GCC cannot see that
// the operator delete it warns about is this one.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

void* operator new(std::size_t n) {
  g_allocs.fetch_add(1, std::memory_order_relaxed);
  g_alloc_bytes.fetch_add(n, std::memory_order_relaxed);
  if (void* p = std::malloc(n ? n : 1)) {
    note_alloc(p);
    return p;
  }
  throw std::bad_alloc();
}
void* operator new[](std::size_t n) { return operator new(n); }
void operator delete(void* p) noexcept { release(p); }
void operator delete[](void* p) noexcept { release(p); }
void operator delete(void* p, std::size_t) noexcept { release(p); }
void operator delete[](void* p, std::size_t) noexcept { release(p); }

namespace {

using namespace rg::bench;

// GET /metrics into buf; returns the body size. buf is reused so the client
// adds no allocations of its own to the count.
size_t scrape(uint16_t port, std::vector<char>& buf) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    close(fd);
    throw std::runtime_error("connect to the exporter failed");
  }
  const char req[] = "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
  if (write(fd, req, sizeof(req) - 1) != static_cast<ssize_t>(sizeof(req) - 1)) {
    close(fd);
    throw std::runtime_error("request write failed");
  }
  size_t got = 0;
  for (;;) {
    if (got == buf.size()) throw std::runtime_error("response larger than the buffer");
    ssize_t n = read(fd, buf.data() + got, buf.size() - got);
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  close(fd);
  const std::string_view resp(buf.data(), got);
  if (resp.substr(0, 12) != "HTTP/1.1 200") throw std::runtime_error("scrape failed: " + std::string(resp.substr(0, 200)));
  return got - resp.find("\r\n\r\n") - 4;
}

// The body as the exporter gzips it for a client that accepts gzip: its
// size, and the time the compression took in ms.
std::pair<size_t, double> gzip_cost(std::string_view text) {
  const auto t0 = std::chrono::steady_clock::now();
  const size_t size = rg::gzip_body(text).size();
  return {size, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count()};
}

// Pins the object's maps in a private directory; unpins on destruction.
class Pins {
 public:
  Pins(roceguard* skel, const std::string& dir) : dir_(dir) {
    rg::ensure_bpffs(dir_);
    if (mkdir(dir_.c_str(), 0700) != 0) throw std::runtime_error("mkdir " + dir_ + ": " + std::strerror(errno));
    for (const char* name : rg::kPinnedMaps) {
      bpf_map* m = bpf_object__find_map_by_name(skel->obj, name);
      if (!m || bpf_map__pin(m, (dir_ + "/" + name).c_str())) {
        rg::remove_pins(dir_);
        throw std::runtime_error(std::string("pinning ") + name + " failed");
      }
    }
  }
  ~Pins() { rg::remove_pins(dir_); }

 private:
  std::string dir_;
};

struct Result {
  bool per_qp;
  std::vector<double> ms;
  uint64_t allocs = 0, alloc_bytes = 0;
  int64_t peak_held = 0;  // most bytes held at once by one scrape
  size_t body = 0, series = 0;
  size_t gzip_body = 0;
  std::vector<double> gzip_ms;
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"roceguard exporter: time and allocations per scrape"};
  uint32_t qps = 65536;
  uint32_t top_qps = 50;
  unsigned scrapes = 20;
  std::string json_path = "exporter_scrape.json";
  app.add_option("--qps", qps, "tracked QPs in rg_qp4")->check(CLI::Range(1u, 1u << 22));
  app.add_option("--top-qps", top_qps, "per-QP series exported when on (metrics.top_qps)")
      ->check(CLI::Range(1u, 10000u));
  app.add_option("--scrapes", scrapes, "scrapes per setting")->check(CLI::Range(1u, 10000u));
  app.add_option("--json", json_path, "JSON output");
  CLI11_PARSE(app, argc, argv);

  try {
    quiet_libbpf();
    Object obj(config(RG_CFG_F_DEFAULT), qps);
    const std::string dir = "/sys/fs/bpf/rglb-" + std::to_string(getpid()) + "-bench";
    Pins pins(obj.skel(), dir);

    // Traffic on every QP, some with losses, so the top-N selection has
    // work. A gateway sees a QP in one direction: half of them leave
    // (retransmissions), half arrive (losses), one rg_qp4 slot each,
    // placed through the table's mapping where the programs would claim it.
    {
      rg::QpSlotTable slots(bpf_map__fd(obj.skel()->maps.rg_qp4), AF_INET, true);
      rg_qp_key qp{};
      qp.family = AF_INET;
      inet_pton(AF_INET, kHost4, qp.src);
      inet_pton(AF_INET, kRemoteHost4, qp.dst);
      const uint32_t now = rg::qp_clock_now();
      for (uint32_t q = 0; q < qps; ++q) {
        rg_qp_dir v{};
        qp.dest_qp = q;
        const uint32_t dir = q % 2 ? RG_DIR_INGRESS : RG_DIR_EGRESS;
        v.packets = 1000 + q;
        v.bytes = (1000 + q) * 1024ull;
        if (dir == RG_DIR_EGRESS)
          v.retransmits = q % 97;
        else
          v.lost = q % 89;
        v.flags = RG_QP_F_SEEN;
        if (!slots.place(qp, dir, v, now))
          throw std::runtime_error("filling rg_qp4: QP " + std::to_string(q) + " found both its buckets full");
      }
    }
    const int ncpu = libbpf_num_possible_cpus();
    std::vector<rg_counters> per_cpu(static_cast<size_t>(ncpu));
    for (auto& c : per_cpu)
      for (auto& e : c.ev) e = {1000, 1024000};
    for (uint32_t ifindex : {1u, 2u})
      for (uint32_t d = 0; d < RG_DIR_MAX; ++d) {
        rg_counter_key ck{ifindex, d};
        if (bpf_map_update_elem(bpf_map__fd(obj.skel()->maps.rg_counters), &ck, per_cpu.data(), BPF_ANY))
          throw std::runtime_error("filling rg_counters: " + std::string(std::strerror(errno)));
      }

    std::vector<char> buf(64 << 20);
    std::vector<Result> results;
    for (bool per_qp : {false, true}) {
      rg::ExporterOptions eo;
      eo.listen = "127.0.0.1:0";
      eo.pin_path = dir;
      eo.per_qp = per_qp;
      eo.top_qps = top_qps;
      rg::Exporter ex(eo);
      const std::string addr = ex.listen_address();
      const uint16_t port = static_cast<uint16_t>(std::stoul(addr.substr(addr.rfind(':') + 1)));
      Result r;
      r.per_qp = per_qp;
      r.ms.reserve(scrapes);
      scrape(port, buf);  // first scrape: the HTTP server and prometheus-cpp warm up
      for (unsigned i = 0; i < scrapes; ++i) {
        const uint64_t a0 = g_allocs, b0 = g_alloc_bytes;
        const int64_t held0 = g_live.load();
        g_peak = held0;
        const auto t0 = std::chrono::steady_clock::now();
        r.body = scrape(port, buf);
        r.ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
        r.allocs += g_allocs - a0;
        r.alloc_bytes += g_alloc_bytes - b0;
        r.peak_held = std::max(r.peak_held, g_peak.load() - held0);
      }
      std::string_view body(buf.data(), buf.size());
      size_t hdr = body.find("\r\n\r\n") + 4;
      std::string_view text = body.substr(hdr, r.body);
      for (unsigned i = 0; i < scrapes; ++i) {
        const auto [size, ms] = gzip_cost(text);
        r.gzip_body = size;
        r.gzip_ms.push_back(ms);
      }
      for (size_t pos = 0; pos < text.size();) {
        size_t eol = text.find('\n', pos);
        if (eol == std::string_view::npos) eol = text.size();
        if (eol > pos && text[pos] != '#') ++r.series;
        pos = eol + 1;
      }
      results.push_back(std::move(r));
    }

    std::cout << qps << " tracked QPs, " << scrapes << " scrapes per setting over HTTP on loopback\n\n";
    Table t({"per-QP series", "ms/scrape (median)", "ms (min)", "allocations/scrape", "KiB allocated/scrape",
             "peak KiB held", "series", "body KiB", "gzip KiB", "gzip ms (median)"});
    nlohmann::json out = nlohmann::json::array();
    for (const auto& r : results) {
      const double allocs = static_cast<double>(r.allocs) / scrapes, kib = r.alloc_bytes / 1024.0 / scrapes;
      t.row({r.per_qp ? "on (top " + std::to_string(top_qps) + ")" : "off", fmt("%.2f", median(r.ms)),
             fmt("%.2f", *std::min_element(r.ms.begin(), r.ms.end())), fmt("%.0f", allocs), fmt("%.0f", kib),
             fmt("%.0f", r.peak_held / 1024.0), std::to_string(r.series), fmt("%.1f", r.body / 1024.0),
             fmt("%.1f", r.gzip_body / 1024.0), fmt("%.2f", median(r.gzip_ms))});
      out.push_back({{"per_qp", r.per_qp},
                     {"top_qps", top_qps},
                     {"ms_median", median(r.ms)},
                     {"ms_min", *std::min_element(r.ms.begin(), r.ms.end())},
                     {"allocations_per_scrape", allocs},
                     {"allocated_kib_per_scrape", kib},
                     {"peak_held_kib", r.peak_held / 1024.0},
                     {"series", r.series},
                     {"body_bytes", r.body},
                     {"gzip_body_bytes", r.gzip_body},
                     {"gzip_ms_median", median(r.gzip_ms)}});
    }
    t.print();
    write_json(json_path, {{"benchmark", "exporter_scrape"}, {"qps", qps}, {"scrapes", scrapes}, {"results", out}});
  } catch (const std::exception& e) {
    std::cerr << "bench_exporter_scrape: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
