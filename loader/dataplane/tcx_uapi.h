// The part of Linux 6.6's BPF uapi (include/uapi/linux/bpf.h, "bpf: Add
// generic attach/detach/query API for multi-progs" and "bpf: Add fd-based
// tcx multi-prog infra with link support") that tcx needs and that the
// headers this builds against lack: Debian 12's linux-libc-dev (Linux 6.1)
// and libbpf 1.1 predate tcx. Only the commands' layouts are here; the
// values are the kernel's and never change (uapi). A kernel without tcx
// answers both commands for these attach types with EINVAL.
#pragma once

#include <cstdint>

namespace rg::tcx {

// enum bpf_attach_type
inline constexpr uint32_t kAttachIngress = 46;  // BPF_TCX_INGRESS
inline constexpr uint32_t kAttachEgress = 47;   // BPF_TCX_EGRESS

// Flags of BPF_LINK_CREATE (link_create.flags) for multi-program hooks.
inline constexpr uint32_t kFlagBefore = 1U << 3;  // BPF_F_BEFORE
inline constexpr uint32_t kFlagAfter = 1U << 4;   // BPF_F_AFTER
inline constexpr uint32_t kFlagId = 1U << 5;      // BPF_F_ID
inline constexpr uint32_t kFlagLink = 1U << 13;   // BPF_F_LINK

// union bpf_attr for BPF_LINK_CREATE, its link_create.tcx member.
struct LinkCreateAttr {
  uint32_t prog_fd;
  uint32_t target_ifindex;
  uint32_t attach_type;
  uint32_t flags;
  uint32_t relative_fd_or_id;  // tcx.relative_fd / tcx.relative_id
  uint32_t pad;
  uint64_t expected_revision;  // tcx.expected_revision
};
static_assert(sizeof(LinkCreateAttr) == 32);

// union bpf_attr for BPF_PROG_QUERY, with the fields Linux 6.6 added.
struct QueryAttr {
  uint32_t target_ifindex;
  uint32_t attach_type;
  uint32_t query_flags;
  uint32_t attach_flags;
  uint64_t prog_ids;
  uint32_t count;  // prog_cnt
  uint32_t pad;
  uint64_t prog_attach_flags;
  uint64_t link_ids;
  uint64_t link_attach_flags;
  uint64_t revision;
};
static_assert(sizeof(QueryAttr) == 64);

// struct bpf_link_info as BPF_OBJ_GET_INFO_BY_FD fills it for a tcx link:
// the common head, then the tcx member of the union. ifindex is 0 once the
// link's interface is gone (the link is defunct).
struct LinkInfo {
  uint32_t type;
  uint32_t id;
  uint32_t prog_id;
  uint32_t pad;
  uint32_t ifindex;      // tcx.ifindex
  uint32_t attach_type;  // tcx.attach_type
};
static_assert(sizeof(LinkInfo) == 24);

}  // namespace rg::tcx
