// One BPF_PROG_TEST_RUN of a frame through a TC or XDP program, for the
// packet tests, the benchmarks and the fuzzers alike.
#pragma once

#include <bpf/bpf.h>
#include <linux/bpf.h>

#include <cstdint>
#include <vector>

namespace rg::test {

struct TestRun {
  int err = 0;            // 0, or the negative errno of the syscall
  uint32_t retval = 0;    // the program's verdict
  uint32_t duration = 0;  // ns per run, as the kernel measured it
  uint32_t size_out = 0;  // bytes of the frame after the program
  uint32_t skb_priority = 0;  // TC: skb->priority after the program
  uint64_t tstamp = 0;        // TC: skb->tstamp after the program (0 on the way in)
};

// Runs prog_fd on in, the output frame written to out (which must have room
// for what the program adds); ifindex is the device the context names. A TC
// program starts with skb_priority in skb->priority, as if the stack had set
// it, and the context it leaves is read back.
inline TestRun test_run_frame(int prog_fd, bool xdp, uint32_t ifindex, const std::vector<uint8_t>& in,
                              std::vector<uint8_t>& out, uint32_t repeat = 1, uint32_t skb_priority = 0) {
  __sk_buff skb{}, skb_out{};
  xdp_md md{};
  skb.ifindex = ifindex;
  skb.priority = skb_priority;
  md.data_end = static_cast<uint32_t>(in.size());
  md.ingress_ifindex = ifindex;
  bpf_test_run_opts o{};
  o.sz = sizeof(o);
  o.data_in = in.data();
  o.data_size_in = static_cast<uint32_t>(in.size());
  o.data_out = out.data();
  o.data_size_out = static_cast<uint32_t>(out.size());
  o.ctx_in = xdp ? static_cast<const void*>(&md) : static_cast<const void*>(&skb);
  o.ctx_size_in = xdp ? sizeof(md) : sizeof(skb);
  if (!xdp) {
    o.ctx_out = &skb_out;
    o.ctx_size_out = sizeof(skb_out);
  }
  o.repeat = repeat;
  TestRun r;
  r.err = bpf_prog_test_run_opts(prog_fd, &o);
  r.retval = o.retval;
  r.duration = o.duration;
  r.size_out = o.data_size_out;
  r.skb_priority = skb_out.priority;
  r.tstamp = skb_out.tstamp;
  return r;
}

}  // namespace rg::test
