// ucx_peer TLS FLOATS: the consumer process of the two-process UCX
// conformance test (transport_conformance_test.cpp). It registers a tensor
// of FLOATS floats in a UcxTransport over UCX_TLS=TLS and writes two lines
// to stdout: its endpoint info in hex, and the tensor's descriptor
// (owner pool offset bytes block capacity). Then it waits for a line on
// stdin ("check") and answers "ok" when the tensor holds (i & 0xfffff) + 1
// at every i — what the producer put — else "mismatch at i: value".
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>

#include "rdma/ucx_transport.h"

using namespace maestro;

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: ucx_peer TLS FLOATS\n");
    return 2;
  }
  UcxTransport transport(UcxOptions{argv[1]});
  const int64_t n = std::atoll(argv[2]);
  TensorRef dst = transport.allocate({n});
  for (std::byte b : transport.endpoint_info()) std::printf("%02x", unsigned(b));
  const TensorDescriptor d = transport.describe(dst);
  std::printf("\n%" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64 "\n", d.owner, d.pool, d.offset,
              d.bytes, d.block, d.capacity);
  std::fflush(stdout);
  std::string line;
  if (!std::getline(std::cin, line) || line != "check") return 1;
  const auto v = dst.values();
  for (int64_t i = 0; i < n; ++i)
    if (v[size_t(i)] != float(i & 0xfffff) + 1) {
      std::printf("mismatch at %" PRId64 ": %g\n", i, double(v[size_t(i)]));
      return 1;
    }
  std::printf("ok\n");
  return 0;
}
