// rdma_device_names through ibv_get_device_list (devices.h).
#include "rdma/devices.h"

#if MAESTRO_HAVE_RDMA
#include <infiniband/verbs.h>
#endif

namespace maestro {

std::vector<std::string> rdma_device_names() {
  std::vector<std::string> names;
#if MAESTRO_HAVE_RDMA
  int count = 0;
  ibv_device** list = ibv_get_device_list(&count);
  if (!list) return names;
  for (int i = 0; i < count; ++i) names.emplace_back(ibv_get_device_name(list[i]));
  ibv_free_device_list(list);
#endif
  return names;
}

}  // namespace maestro
