// UcxTransport (see ucx_transport.h): a UCP context and worker, regions
// allocated and registered by UCX as LocalTransport adds them, peers from
// endpoint info, ucp_put_nbx + ucp_ep_flush_nbx with completions delivered
// in issue order (inline when the flush completes at once), and the
// progress thread, which stands down while a waiter progresses itself
// (progress()).
#include "rdma/ucx_transport.h"

#include <fmt/format.h>
#include <ucp/api/ucp.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <deque>
#include <limits>
#include <map>
#include <mutex>
#include <random>
#include <stdexcept>
#include <thread>

#include "transport/local_transport.h"

namespace maestro {

namespace {

constexpr char kMagic[8] = {'M', 'U', 'C', 'X', 'I', 'N', 'F', '1'};

void check(ucs_status_t s, const char* call) {
  if (s != UCS_OK) throw std::runtime_error(fmt::format("ucx: {} failed: {}", call, ucs_status_string(s)));
}

// Endpoint info: magic, id, worker address, regions (id, base, size, rkey).
struct Writer {
  std::vector<std::byte> out;
  void u64(uint64_t v) { bytes(&v, 8); }
  void bytes(const void* p, size_t n) {
    const auto* b = static_cast<const std::byte*>(p);
    out.insert(out.end(), b, b + n);
  }
  void blob(const void* p, size_t n) {
    u64(n);
    bytes(p, n);
  }
};
struct Reader {
  std::span<const std::byte> in;
  size_t at = 0;
  std::span<const std::byte> take(size_t n) {
    if (n > in.size() - at)
      throw std::invalid_argument(
          fmt::format("ucx endpoint info: truncated at byte {} ({} more wanted, {} total)", at, n, in.size()));
    auto s = in.subspan(at, n);
    at += n;
    return s;
  }
  uint64_t u64() {
    uint64_t v;
    std::memcpy(&v, take(8).data(), 8);
    return v;
  }
  std::span<const std::byte> blob() { return take(u64()); }
};

// The UCP context and the memory UCX allocated in it for the pools: shared
// by the transport and its pools (whose memory outlives the transport while
// TensorRefs hold it), so ucp_mem_unmap and ucp_cleanup run after the last
// of them is gone.
struct UcpMemory {
  struct Region {
    std::byte* base = nullptr;
    size_t size = 0;
    ucp_mem_h memh = nullptr;
    std::vector<std::byte> rkey;  // packed
  };
  ucp_context_h context = nullptr;
  mutable std::mutex mu;
  std::map<uint64_t, Region> regions;  // region id (a descriptor's `pool`) -> region

  ~UcpMemory() {
    for (auto& [rid, r] : regions) ucp_mem_unmap(context, r.memh);
    if (context) ucp_cleanup(context);
  }

  // UCX allocates the region (UCP_MEM_MAP_ALLOCATE): with shared-memory
  // transports its memory domains hand out segments a peer on the host can
  // map, so a put there is the producer's memcpy into the consumer's memory
  // — malloc'd memory, registered after the fact, is reachable only through
  // CMA or the receiver's own progress (docs/PERFORMANCE.md §8).
  std::byte* allocate(uint64_t rid, size_t size) {
    ucp_mem_map_params_t p{};
    p.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH | UCP_MEM_MAP_PARAM_FIELD_FLAGS |
                   UCP_MEM_MAP_PARAM_FIELD_MEMORY_TYPE;
    p.address = nullptr;
    p.length = size;
    p.flags = UCP_MEM_MAP_ALLOCATE;
    p.memory_type = UCS_MEMORY_TYPE_HOST;
    Region r;
    check(ucp_mem_map(context, &p, &r.memh), "ucp_mem_map");
    ucp_mem_attr_t attr{};
    attr.field_mask = UCP_MEM_ATTR_FIELD_ADDRESS | UCP_MEM_ATTR_FIELD_LENGTH;
    void* packed = nullptr;
    size_t packed_size = 0;
    ucs_status_t s = ucp_mem_query(r.memh, &attr);
    if (s == UCS_OK && (attr.length < size || reinterpret_cast<uintptr_t>(attr.address) % 64 != 0))
      s = UCS_ERR_NO_MEMORY;
    if (s == UCS_OK) s = ucp_rkey_pack(context, r.memh, &packed, &packed_size);
    if (s != UCS_OK) {
      ucp_mem_unmap(context, r.memh);
      check(s, "ucp_mem_query / ucp_rkey_pack of a pool region");
    }
    r.base = static_cast<std::byte*>(attr.address);
    r.size = size;
    const auto* b = static_cast<const std::byte*>(packed);
    r.rkey.assign(b, b + packed_size);
    ucp_rkey_buffer_release(packed);
    std::lock_guard lock(mu);
    return regions.emplace(rid, std::move(r)).first->second.base;
  }

  void release(uint64_t rid) {
    std::lock_guard lock(mu);
    auto it = regions.find(rid);
    if (it == regions.end()) return;
    ucp_mem_unmap(context, it->second.memh);
    regions.erase(it);
  }
};

}  // namespace

struct UcxTransport::Impl {
  struct RemoteRegion {
    uint64_t base = 0, size = 0;
    ucp_rkey_h rkey = nullptr;
  };
  // One put in flight: its completion, delivered in issue order.
  struct Pending {
    bool complete = false;
    std::string error;
    PutCompletion done;
    uint64_t bytes = 0;
    TensorDescriptor dst;  // the put, for an error
  };
  struct Peer {
    uint64_t id = 0;
    std::string name;
    ucp_ep_h ep = nullptr;
    std::map<uint64_t, RemoteRegion> regions;
    std::atomic<bool> failed{false};
    std::string failure;
    // Under Impl::pending_mu: puts to this peer waiting for remote
    // completion, oldest first, and the one flush request outstanding for
    // them, which covers the first `covered` (a flush completes every
    // operation issued on the endpoint before it); puts issued meanwhile
    // wait for the next flush, so a stream of puts costs a flush per round
    // trip, not one per put. No flush outstanding: none waiting.
    std::deque<std::shared_ptr<Pending>> unflushed;
    void* flush = nullptr;
    size_t covered = 0;
  };

  uint64_t id = 0;
  bool detect_peer_failure = false;
  std::shared_ptr<UcpMemory> memory = std::make_shared<UcpMemory>();  // the context; the pools' regions
  ucp_worker_h worker = nullptr;
  std::vector<std::byte> address;  // the worker's

  std::mutex peers_mu;
  std::map<uint64_t, std::unique_ptr<Peer>> peers;

  // Completions (and the peers' flush state). UCX is called under it only to
  // issue or poll flushes (no UCX callback takes it).
  std::mutex pending_mu;
  std::deque<std::shared_ptr<Pending>> pending;
  bool delivering = false;
  std::vector<Peer*> flushing;        // peers with a flush outstanding
  std::atomic<int64_t> in_flight{0};  // puts whose completion has not run to its end
  std::atomic<int64_t> requests{0};   // flushing.size(), read without the lock
  std::atomic<int64_t> puts{0}, bytes_put{0}, refused{0};
  std::atomic<int64_t> caller_progress{std::numeric_limits<int64_t>::min() / 2};  // steady_clock ns of the last progress()

  std::atomic<bool> stop{false};
  std::atomic<bool> quiesced{false};  // every endpoint flushed since the last put or connect (quiesce())
  std::thread progress;

  std::unique_ptr<LocalTransport> pools;  // its regions' memory from `memory`

  void run_progress() {
    using clock = std::chrono::steady_clock;
    auto last_work = clock::now();
    while (!stop.load(std::memory_order_relaxed)) {
      if (clock::now().time_since_epoch().count() - caller_progress.load(std::memory_order_relaxed) < 200'000) {
        std::this_thread::sleep_for(std::chrono::microseconds(50));  // a waiter progresses (UcxTransport::progress)
        continue;
      }
      const unsigned events = ucp_worker_progress(worker);
      if (requests.load(std::memory_order_relaxed) > 0) {
        poll_flushes();
        last_work = clock::now();
        continue;
      }
      if (events != 0) {
        last_work = clock::now();
        continue;
      }
      if (clock::now() - last_work > std::chrono::milliseconds(1))
        std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }

  // The progress thread: completes the puts covered by every flush that
  // has finished and flushes the puts that waited for it.
  void poll_flushes() {
    std::vector<std::pair<std::shared_ptr<Pending>, std::string>> finished;
    {
      std::lock_guard lock(pending_mu);
      for (size_t i = 0; i < flushing.size();) {
        Peer& peer = *flushing[i];
        const ucs_status_t status = ucp_request_check_status(peer.flush);
        if (status == UCS_INPROGRESS) {
          ++i;
          continue;
        }
        ucp_request_free(peer.flush);
        peer.flush = nullptr;
        flushed(peer, status, finished);
        if (!peer.unflushed.empty()) {
          ucp_request_param_t fp{};
          void* flush = ucp_ep_flush_nbx(peer.ep, &fp);
          peer.covered = peer.unflushed.size();
          if (UCS_PTR_IS_PTR(flush)) {
            peer.flush = flush;
            ++i;
            continue;
          }
          flushed(peer, UCS_PTR_STATUS(flush), finished);
        }
        flushing.erase(flushing.begin() + ptrdiff_t(i));
        requests--;
      }
    }
    for (auto& [p, error] : finished) complete(p, std::move(error));
  }
  // The first `covered` puts of `peer` ended with `status`. Under pending_mu.
  static void flushed(Peer& peer, ucs_status_t status,
                      std::vector<std::pair<std::shared_ptr<Pending>, std::string>>& finished) {
    for (; peer.covered > 0; --peer.covered) {
      std::shared_ptr<Pending> p = std::move(peer.unflushed.front());
      peer.unflushed.pop_front();
      std::string error = status == UCS_OK ? std::string()
                                           : fmt::format("{} failed: {}", describe_put(p->dst, peer.name),
                                                         ucs_status_string(status));
      finished.emplace_back(std::move(p), std::move(error));
    }
  }

  // Runs `done` now when nothing is in flight (issue order holds: every
  // earlier put's completion has run), else queues it behind them.
  void finish(PutCompletion& done, uint64_t bytes, std::string error) {
    if (in_flight.load() == 0) {
      if (error.empty()) {
        puts++;
        bytes_put += int64_t(bytes);
      }
      done(error);
      return;
    }
    auto p = std::make_shared<Pending>();
    p->done = std::move(done);
    p->bytes = bytes;
    {
      std::lock_guard lock(pending_mu);
      pending.push_back(p);
      in_flight++;
    }
    complete(p, std::move(error));
  }

  // After ucp_put_nbx to `peer`: remote completion. With no flush
  // outstanding for the peer, one is issued; into memory a shared-memory
  // transport maps (the pools UCX allocated) the put was a memcpy and that
  // flush completes at once, so `done` runs inline. Otherwise the put waits
  // for the progress thread (behind the outstanding flush, or in its own).
  void flush_after_put(Peer& peer, PutCompletion& done, const TensorDescriptor& dst) {
    std::unique_lock lock(pending_mu);
    if (!peer.flush) {
      ucp_request_param_t fp{};
      void* flush = ucp_ep_flush_nbx(peer.ep, &fp);
      if (!UCS_PTR_IS_PTR(flush)) {
        lock.unlock();
        return finish(done, dst.bytes,
                      UCS_PTR_STATUS(flush) == UCS_OK
                          ? std::string()
                          : fmt::format("{}: ucp_ep_flush_nbx failed: {}", describe_put(dst, peer.name),
                                        ucs_status_string(UCS_PTR_STATUS(flush))));
      }
      peer.flush = flush;
      peer.covered = 1;
      flushing.push_back(&peer);
      requests++;
    }
    auto p = std::make_shared<Pending>();
    p->done = std::move(done);
    p->bytes = dst.bytes;
    p->dst = dst;
    pending.push_back(p);
    peer.unflushed.push_back(std::move(p));
    in_flight++;
  }

  // Marks `p` complete and runs every completion whose predecessors have
  // all completed, in issue order; one thread delivers at a time.
  void complete(const std::shared_ptr<Pending>& p, std::string error) {
    std::unique_lock lock(pending_mu);
    p->complete = true;
    p->error = std::move(error);
    if (delivering) return;
    delivering = true;
    while (!pending.empty() && pending.front()->complete) {
      std::shared_ptr<Pending> head = std::move(pending.front());
      pending.pop_front();
      lock.unlock();
      if (head->error.empty()) {
        puts++;
        bytes_put += int64_t(head->bytes);
      }
      head->done(head->error);
      in_flight--;  // after `done`: a put completing inline meanwhile must not overtake it
      lock.lock();
    }
    delivering = false;
  }

  static std::string describe_put(const TensorDescriptor& d, const std::string& peer) {
    return fmt::format("put of {} bytes into (owner {:#x}, pool {}, offset {}) on peer {}", d.bytes, d.owner, d.pool,
                       d.offset, peer);
  }

  // Flushes `ep` — its wire-up included — and waits, at most `bound`, for the
  // progress thread to complete it: "" when done, else what went wrong. A
  // flush still in flight at the bound stays owned by `abandoned` until the
  // worker is destroyed (its callback may still run until then).
  struct FlushWait {
    std::atomic<bool> done{false};
    ucs_status_t status = UCS_OK;
  };
  std::mutex abandoned_mu;
  std::vector<std::shared_ptr<FlushWait>> abandoned;
  static void flush_waited(void* request, ucs_status_t status, void* user) {
    auto* w = static_cast<FlushWait*>(user);
    w->status = status;
    w->done = true;
    ucp_request_free(request);
  }
  std::string flush_and_wait(ucp_ep_h ep, std::chrono::milliseconds bound) {
    auto w = std::make_shared<FlushWait>();
    ucp_request_param_t fp{};
    fp.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    fp.cb.send = &flush_waited;
    fp.user_data = w.get();
    void* req = ucp_ep_flush_nbx(ep, &fp);
    if (!UCS_PTR_IS_PTR(req)) return UCS_PTR_STATUS(req) == UCS_OK ? "" : ucs_status_string(UCS_PTR_STATUS(req));
    const auto until = std::chrono::steady_clock::now() + bound;
    while (!w->done && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(std::chrono::microseconds(50));
    if (!w->done) {
      std::lock_guard lock(abandoned_mu);
      abandoned.push_back(w);
      return fmt::format("no answer within {} ms", bound.count());
    }
    return w->status == UCS_OK ? "" : ucs_status_string(w->status);
  }

  static void peer_failed(void* arg, ucp_ep_h, ucs_status_t status) {
    auto* peer = static_cast<Peer*>(arg);
    peer->failure = ucs_status_string(status);
    peer->failed = true;
  }
};

UcxTransport::UcxTransport(UcxOptions options) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  std::random_device rd;
  while (m.id == 0) m.id = (uint64_t(rd()) << 32) ^ rd();

  m.detect_peer_failure = !options.tls.empty();
  for (const char* shm : {"sm", "shm", "sysv", "posix", "xpmem", "knem", "cma", "self", "all"})
    for (size_t at = 0; (at = options.tls.find(shm, at)) != std::string::npos; ++at)
      if ((at == 0 || options.tls[at - 1] == ',' || options.tls[at - 1] == '^') &&
          (at + std::strlen(shm) == options.tls.size() || options.tls[at + std::strlen(shm)] == ','))
        m.detect_peer_failure = false;
  ucp_config_t* config = nullptr;
  check(ucp_config_read(nullptr, nullptr, &config), "ucp_config_read");
  if (!options.tls.empty()) {
    if (ucs_status_t s = ucp_config_modify(config, "TLS", options.tls.c_str()); s != UCS_OK) {
      ucp_config_release(config);
      throw std::runtime_error(
          fmt::format("ucx: transports (UCX_TLS) \"{}\" not accepted: {}", options.tls, ucs_status_string(s)));
    }
  }
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES;
  params.features = UCP_FEATURE_RMA;
  ucs_status_t s = ucp_init(&params, config, &m.memory->context);
  ucp_config_release(config);
  check(s, "ucp_init");

  ucp_worker_params_t wp{};
  wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  wp.thread_mode = UCS_THREAD_MODE_MULTI;  // callers put, the progress thread progresses
  check(ucp_worker_create(m.memory->context, &wp, &m.worker), "ucp_worker_create");
  ucp_address_t* address = nullptr;
  size_t address_length = 0;
  if (s = ucp_worker_get_address(m.worker, &address, &address_length); s != UCS_OK) {
    ucp_worker_destroy(m.worker);
    check(s, "ucp_worker_get_address");
  }
  const auto* a = reinterpret_cast<const std::byte*>(address);
  m.address.assign(a, a + address_length);
  ucp_worker_release_address(m.worker, address);

  m.pools = std::make_unique<LocalTransport>(LocalTransport::RegionMemory{
      [memory = m.memory](uint64_t rid, size_t size) { return memory->allocate(rid, size); },
      [memory = m.memory](uint64_t rid, std::byte*, size_t) { memory->release(rid); }});
  m.progress = std::thread([impl = &m] { impl->run_progress(); });
}

bool UcxTransport::progress() {
  Impl& m = *impl_;
  m.caller_progress.store(std::chrono::steady_clock::now().time_since_epoch().count(), std::memory_order_relaxed);
  const unsigned events = ucp_worker_progress(m.worker);
  if (m.requests.load(std::memory_order_relaxed) > 0) m.poll_flushes();
  return events != 0;
}

UcxTransport::~UcxTransport() {
  Impl& m = *impl_;
  // Puts in flight finish (or fail) first: their completions may touch the caller's state.
  for (int i = 0; i < 100000 && m.in_flight.load() > 0; ++i) std::this_thread::sleep_for(std::chrono::microseconds(100));
  // Every endpoint's wire-up finishes before it is torn down: UCX 1.13
  // asserts when a worker is destroyed with a wire-up reply still queued
  // (a peer that connected and is closed before its first put). Bounded:
  // a dead peer's endpoint gives up after 2 s. Not again after quiesce().
  if (!m.quiesced || m.in_flight.load() > 0)
    for (auto& [id, peer] : m.peers)
      if (!peer->failed) m.flush_and_wait(peer->ep, std::chrono::milliseconds(2000));
  m.stop = true;
  m.progress.join();
  for (auto& [id, peer] : m.peers) {
    for (auto& [rid, r] : peer->regions) ucp_rkey_destroy(r.rkey);
    ucp_request_param_t p{};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    p.flags = UCP_EP_CLOSE_FLAG_FORCE;
    void* req = ucp_ep_close_nbx(peer->ep, &p);
    if (UCS_PTR_IS_PTR(req)) {
      while (ucp_request_check_status(req) == UCS_INPROGRESS) ucp_worker_progress(m.worker);
      ucp_request_free(req);
    }
  }
  m.peers.clear();
  // The pools' memory, and with it the context, outlives the transport while TensorRefs hold it.
  m.pools.reset();
  ucp_worker_destroy(m.worker);
  m.abandoned.clear();
}

uint64_t UcxTransport::id() const { return impl_->id; }

uint64_t UcxTransport::register_pool(size_t bytes, Device device) {
  if (device != Device::Host)
    throw std::invalid_argument(fmt::format(
        "ucx transport: cannot register {} memory (this UCX registers host memory; stage GPU tensors through a host pool)",
        device_name(device)));
  return impl_->pools->register_pool(bytes, device);
}

TensorRef UcxTransport::allocate(std::vector<int64_t> shape, DType dtype, uint64_t pool) {
  return impl_->pools->allocate(std::move(shape), dtype, pool);
}

TensorDescriptor UcxTransport::describe(const TensorRef& tensor) const {
  TensorDescriptor d;
  try {
    d = impl_->pools->describe(tensor);
  } catch (const std::invalid_argument&) {
    throw std::invalid_argument("ucx transport: describe() of a tensor it did not allocate");
  }
  d.owner = impl_->id;
  return d;
}

void UcxTransport::put(const TensorRef& src, const TensorDescriptor& dst, PutCompletion done) {
  Impl& m = *impl_;
  if (dst.owner == m.id) {  // into this transport's own memory: a copy
    TensorDescriptor inner = dst;
    inner.owner = m.pools->id();
    return m.pools->put(src, inner, std::move(done));
  }
  auto refuse = [&](const std::string& why) {
    m.refused++;
    m.finish(done, 0, fmt::format("put of {} bytes into (owner {:#x}, pool {}, offset {}) refused: {}", src.bytes(), dst.owner,
                     dst.pool, dst.offset, why));
  };
  if (src.dtype != dst.dtype)
    return refuse(fmt::format("the source is {}, the target {}", dtype_name(src.dtype), dtype_name(dst.dtype)));
  if (src.bytes() != dst.bytes)
    return refuse(fmt::format("the source has {} bytes, the target {}", src.bytes(), dst.bytes));
  if (dst.device != Device::Host || src.device() != Device::Host) return refuse("device memory");
  ucp_ep_h ep = nullptr;
  ucp_rkey_h rkey = nullptr;
  uint64_t remote_address = 0;
  Impl::Peer* target = nullptr;  // peers live as long as the transport
  std::string why;               // a refusal, said once peers_mu is released (`done` may run then)
  {
    std::lock_guard lock(m.peers_mu);
    auto p = m.peers.find(dst.owner);
    if (p == m.peers.end()) {
      why = "no such peer (connect() its endpoint info first)";
    } else if (Impl::Peer& peer = *p->second; peer.failed) {
      why = fmt::format("peer {} failed: {}", peer.name, peer.failure);
    } else if (auto r = peer.regions.find(dst.pool); r == peer.regions.end()) {
      why = fmt::format("peer {} announced no pool {}", peer.name, dst.pool);
    } else if (const uint64_t size = r->second.size; dst.block > size || dst.capacity > size - dst.block) {
      // [offset, offset + bytes) ⊆ [block, block + capacity) ⊆ [0, size), without overflow.
      why = fmt::format("the block [{}, {}) leaves the pool of {} bytes peer {} registered", dst.block,
                        dst.block + dst.capacity, size, peer.name);
    } else if (dst.offset < dst.block || dst.offset - dst.block > dst.capacity ||
               dst.bytes > dst.capacity - (dst.offset - dst.block)) {
      why = fmt::format("bytes [{}, {}) leave the block [{}, {})", dst.offset, dst.offset + dst.bytes, dst.block,
                        dst.block + dst.capacity);
    } else {
      target = &peer;
      ep = peer.ep;
      rkey = r->second.rkey;
      remote_address = r->second.base + dst.offset;
    }
  }
  if (!target) return refuse(why);
  if (dst.bytes == 0) return m.finish(done, 0, "");
  m.quiesced = false;
  ucp_request_param_t pp{};
  void* req = ucp_put_nbx(ep, src.buffer->data, dst.bytes, remote_address, rkey, &pp);
  if (UCS_PTR_IS_ERR(req))
    return m.finish(done, dst.bytes,
                    fmt::format("{}: ucp_put_nbx failed: {}", Impl::describe_put(dst, target->name),
                                ucs_status_string(UCS_PTR_STATUS(req))));
  if (req) ucp_request_free(req);  // completes in the flush
  m.flush_after_put(*target, done, dst);
}

void UcxTransport::quiesce(std::chrono::milliseconds bound) {
  Impl& m = *impl_;
  std::lock_guard lock(m.peers_mu);
  for (auto& [id, peer] : m.peers)
    if (!peer->failed) m.flush_and_wait(peer->ep, bound);
  m.quiesced = true;
}

void UcxTransport::pin_host_memory(HostPinning pinning) { impl_->pools->pin_host_memory(std::move(pinning)); }

TransportStats UcxTransport::stats() const {
  TransportStats s = impl_->pools->stats();
  s.puts += impl_->puts;
  s.bytes_put += impl_->bytes_put;
  s.refused += impl_->refused;
  return s;
}

std::vector<std::byte> UcxTransport::endpoint_info() const {
  const Impl& m = *impl_;
  Writer w;
  w.bytes(kMagic, sizeof kMagic);
  w.u64(m.id);
  w.blob(m.address.data(), m.address.size());
  std::lock_guard lock(m.memory->mu);
  w.u64(m.memory->regions.size());
  for (const auto& [rid, r] : m.memory->regions) {
    w.u64(rid);
    w.u64(reinterpret_cast<uint64_t>(r.base));
    w.u64(r.size);
    w.blob(r.rkey.data(), r.rkey.size());
  }
  return std::move(w.out);
}

uint64_t UcxTransport::connect(std::span<const std::byte> peer_info, const std::string& name) {
  Impl& m = *impl_;
  Reader r{peer_info};
  if (std::memcmp(r.take(sizeof kMagic).data(), kMagic, sizeof kMagic) != 0)
    throw std::invalid_argument("ucx endpoint info: bad magic (not a Maestro UCX endpoint, or another version)");
  const uint64_t peer_id = r.u64();
  if (peer_id == 0 || peer_id == m.id) throw std::invalid_argument("ucx endpoint info: the peer's id is 0 or ours");
  const auto address = r.blob();
  struct Announced {
    uint64_t base, size;
    std::span<const std::byte> rkey;
  };
  std::map<uint64_t, Announced> announced;
  const uint64_t n = r.u64();
  if (n > peer_info.size()) throw std::invalid_argument("ucx endpoint info: region count past the end");
  for (uint64_t i = 0; i < n; ++i) {
    const uint64_t rid = r.u64(), base = r.u64(), size = r.u64();
    announced[rid] = {base, size, r.blob()};
  }
  if (r.at != peer_info.size()) throw std::invalid_argument("ucx endpoint info: trailing bytes");

  std::lock_guard lock(m.peers_mu);
  m.quiesced = false;
  std::unique_ptr<Impl::Peer>& slot = m.peers[peer_id];
  if (!slot) {
    auto peer = std::make_unique<Impl::Peer>();
    peer->id = peer_id;
    peer->name = name.empty() ? fmt::format("{:#x}", peer_id) : name;
    ucp_ep_params_t ep{};
    ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                    UCP_EP_PARAM_FIELD_ERR_HANDLER;
    ep.address = reinterpret_cast<const ucp_address_t*>(address.data());
    ep.err_mode = UCP_ERR_HANDLING_MODE_PEER;
    ep.err_handler.cb = &Impl::peer_failed;
    ep.err_handler.arg = peer.get();
    // Shared memory and `self` have no peer-failure detection in UCX 1.13
    // (asking for it leaves them out): it is asked for only when `tls` names
    // network transports alone; else a dead peer is noticed by the control
    // plane's heartbeats, not by the put.
    if (!m.detect_peer_failure)
      ep.field_mask &= ~uint64_t(UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | UCP_EP_PARAM_FIELD_ERR_HANDLER);
    const ucs_status_t s = ucp_ep_create(m.worker, &ep, &peer->ep);
    if (s != UCS_OK) {
      m.peers.erase(peer_id);
      throw std::runtime_error(
          fmt::format("ucx: ucp_ep_create to peer {} failed: {}", peer->name, ucs_status_string(s)));
    }
    // Wire-up completes here, bounded, so an unreachable peer is named now
    // rather than at its first put.
    if (std::string why = m.flush_and_wait(peer->ep, std::chrono::seconds(10)); !why.empty()) {
      ucp_request_param_t p{};
      p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
      p.flags = UCP_EP_CLOSE_FLAG_FORCE;
      if (void* req = ucp_ep_close_nbx(peer->ep, &p); UCS_PTR_IS_PTR(req)) {
        while (ucp_request_check_status(req) == UCS_INPROGRESS) std::this_thread::sleep_for(std::chrono::microseconds(50));
        ucp_request_free(req);
      }
      m.peers.erase(peer_id);
      throw std::runtime_error(fmt::format("ucx: peer {} not reachable: {}", peer->name, why));
    }
    slot = std::move(peer);
  }
  // A refresh keeps the rkey of every region announced as before: a put
  // may have looked it up and be issuing with it (put() reads it under
  // peers_mu and uses it after). Only new, moved and withdrawn regions
  // change, and nothing does unless every new rkey unpacks.
  Impl::Peer& peer = *slot;
  std::map<uint64_t, Impl::RemoteRegion> regions;
  auto unchanged = [&](uint64_t rid, const Announced& a) {
    auto it = peer.regions.find(rid);
    return it != peer.regions.end() && it->second.base == a.base && it->second.size == a.size;
  };
  for (const auto& [rid, a] : announced) {
    if (unchanged(rid, a)) continue;
    ucp_rkey_h rkey = nullptr;
    if (ucs_status_t s = ucp_ep_rkey_unpack(peer.ep, a.rkey.data(), &rkey); s != UCS_OK) {
      for (auto& [unpacked, r] : regions) ucp_rkey_destroy(r.rkey);
      throw std::invalid_argument(fmt::format("ucx endpoint info of peer {}: the rkey of pool {} does not unpack: {}",
                                              peer.name, rid, ucs_status_string(s)));
    }
    regions[rid] = {a.base, a.size, rkey};
  }
  for (auto& [rid, old] : peer.regions) {
    if (auto a = announced.find(rid); a != announced.end() && unchanged(rid, a->second))
      regions[rid] = old;
    else
      ucp_rkey_destroy(old.rkey);
  }
  peer.regions = std::move(regions);
  return peer_id;
}

}  // namespace maestro
