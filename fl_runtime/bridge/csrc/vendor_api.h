// A device's vendor entry points, as the bridge calls them without the interpreter: the
// plugin's fl_api table (fl_sdk/include/fl_abi.h, the ABI's one source of truth) and the
// device's index inside its plugin.  The runtime passes the table's address at install time
// (fl_runtime/bridge/__init__.py); a table lives as long as its plugin, i.e. the process.
#pragma once

#include "../../../fl_sdk/include/fl_abi.h"

namespace fl_bridge {

struct VendorDevice {
  const fl_api* api = nullptr;
  int32_t local = 0;                 // the device's index inside its plugin
  uint64_t alignment = 1;            // fl_device_properties.alignment (blocks are checked against it)
  uint64_t total_memory = 0;
};

}  // namespace fl_bridge
