// Reading sysfs (and configfs) attributes. Attributes come and go with
// devices, and some answer an error instead of a value (an unpopulated GID
// slot reads EINVAL, a removed device ENODEV): a read that fails is "no
// value", never fatal.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace rg::nic {

// The first line of the attribute, trailing whitespace removed.
std::optional<std::string> read_attr(const std::filesystem::path& p);
// The attribute as a decimal unsigned number.
std::optional<uint64_t> read_u64_attr(const std::filesystem::path& p);
// The entries of a sysfs directory, sorted; empty when it is missing.
std::vector<std::filesystem::path> sorted_entries(const std::filesystem::path& dir);

// The kernel driver of an RDMA device (dev_dir is class/infiniband/<dev>):
// the driver of the bus device it hangs off ("mlx5_core", "bnxt_en"), or
// "rxe" for soft-RoCE, which has no bus device but names its netdev as
// parent (and is named rxe<n> by convention). "" when none says it.
std::string ib_device_driver(const std::filesystem::path& dev_dir);

}  // namespace rg::nic
