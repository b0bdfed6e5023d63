// Tensors across processes by one-sided puts (peer_tensors.h).
#include "actors/peer_tensors.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>

#include "actors/messages.h"

namespace maestro {

PeerTensors::PeerTensors(std::shared_ptr<UcxTransport> transport, size_t first_pool_bytes)
    : transport_(std::move(transport)) {
  pools_.emplace_back(transport_->register_pool(first_pool_bytes, Device::Host), first_pool_bytes);
}

uint64_t PeerTensors::export_tensor(const TensorRef& t) {
  std::lock_guard<std::mutex> lock(mu_);
  const uint64_t key = next_key_++;
  exports_[key] = t;
  return key;
}

TensorRef PeerTensors::imported(uint64_t owner_id, uint64_t key, std::vector<int64_t> shape, DType dtype) {
  if (owner_id == owner()) {  // back home: its one use, so the export goes
    TensorRef t = exported(key);
    if (t.empty()) throw std::invalid_argument(fmt::format("tensor handle {} is not (or no longer) exported here", key));
    drop_export(key);
    return t;
  }
  auto b = std::make_shared<Buffer>();  // a placeholder: no bytes, the owner and key
  b->owner = owner_id;
  b->pool = kRemotePlaceholderPool;
  b->offset = key;
  return TensorRef{std::move(b), std::move(shape), dtype};
}

uint64_t PeerTensors::export_geometry(std::shared_ptr<const StageGeometry> g) {
  std::lock_guard<std::mutex> lock(mu_);
  const uint64_t key = next_key_++;
  geometries_[key] = std::move(g);
  return key;
}

std::shared_ptr<const StageGeometry> PeerTensors::exported_geometry(uint64_t key) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = geometries_.find(key);
  return it == geometries_.end() ? nullptr : it->second;
}

TensorRef PeerTensors::exported(uint64_t key) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = exports_.find(key);
  return it == exports_.end() ? TensorRef{} : it->second;
}

void PeerTensors::drop_export(uint64_t key) {
  std::lock_guard<std::mutex> lock(mu_);
  exports_.erase(key);
}

void PeerTensors::forget_exports() {
  std::lock_guard<std::mutex> lock(mu_);
  exports_.clear();
  geometries_.clear();
}

size_t PeerTensors::exports() const {
  std::lock_guard<std::mutex> lock(mu_);
  return exports_.size();
}

TensorRef PeerTensors::receive_buffer(std::vector<int64_t> shape, DType dtype) {
  std::lock_guard<std::mutex> lock(pools_mu_);
  size_t total = 0;
  for (const auto& [pool, bytes] : pools_) {
    try {
      return transport_->allocate(shape, dtype, pool);
    } catch (const std::runtime_error&) {  // full (a bad shape is std::invalid_argument, from the first pool)
    }
    total += bytes;
  }
  // Blocks have power-of-two capacities (transport/local_transport.h).
  size_t need = dtype_size(dtype);
  for (int64_t d : shape) need *= size_t(d);
  const size_t block = std::bit_ceil(std::max<size_t>(need, 256));
  const size_t bytes = std::max({pools_.front().second, block, total});
  pools_.emplace_back(transport_->register_pool(bytes, Device::Host), bytes);
  return transport_->allocate(std::move(shape), dtype, pools_.back().first);
}

std::vector<uint8_t> PeerTensors::announcement(const TensorRef& dst) const {
  {
    std::lock_guard<std::mutex> lock(pools_mu_);
    if (!dst.buffer || dst.buffer->pool == pools_.front().first) return {};
  }
  const std::vector<std::byte> info = transport_->endpoint_info();
  const auto* p = reinterpret_cast<const uint8_t*>(info.data());
  return {p, p + info.size()};
}

size_t PeerTensors::receive_pools() const {
  std::lock_guard<std::mutex> lock(pools_mu_);
  return pools_.size();
}

void PeerTensors::set_servers(std::map<uint64_t, std::pair<caf::actor, std::string>> servers) {
  std::lock_guard<std::mutex> lock(mu_);
  servers_ = std::move(servers);
}

std::pair<caf::actor, std::string> PeerTensors::server_of(uint64_t owner_id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = servers_.find(owner_id);
  return it == servers_.end() ? std::pair<caf::actor, std::string>{} : it->second;
}

PeerTensors* peer_tensors() { return static_cast<PeerTensors*>(tensor_exporter().load()); }

void install_peer_tensors(PeerTensors* p) { tensor_exporter().store(p); }

bool has_remote_inputs(const std::vector<FlowTensor>& inputs) {
  for (const FlowTensor& f : inputs)
    if (is_remote_placeholder(f.tensor)) return true;
  return false;
}

namespace {

struct ServerState {
  uint64_t next = 1;
  struct Put {
    caf::typed_response_promise<std::string> rp;
    uint64_t key;  // the export being put
  };
  std::unordered_map<uint64_t, Put> pending;  // by token
};

caf::behavior tensor_server(caf::stateful_actor<ServerState>* self, PeerTensors* tensors) {
  return {
      [=](const FetchTensor& f) -> caf::result<std::string> {
        const TensorRef src = tensors->exported(f.key);
        if (src.empty()) return fmt::format("tensor {} is not (or no longer) exported by this process", f.key);
        if (!f.announcement.empty()) {  // the consumer's pool is newer than the handshake: learn its rkey
          try {
            tensors->transport().connect(std::as_bytes(std::span(f.announcement)));
          } catch (const std::exception& e) {
            return fmt::format("the consumer's new receive pool cannot be reached: {}", e.what());
          }
        }
        const uint64_t token = self->state.next++;
        auto rp = self->make_response_promise<std::string>();
        self->state.pending.emplace(token, ServerState::Put{rp, f.key});
        caf::actor me = caf::actor_cast<caf::actor>(self);
        // `done` runs inside put() or on the transport's progress thread: back to this actor by message.
        tensors->transport().put(src, f.dst, [me, token, src](const std::string& error) {
          caf::anon_send(me, PutEnded{token, error, src.bytes()});
        });
        return rp;
      },
      [=](const PutEnded& e) {
        auto it = self->state.pending.find(e.token);
        if (it == self->state.pending.end()) return;
        if (e.error.empty()) {  // the handle's one use is done: the tensor goes (the put held it so far)
          tensors->count_put(e.bytes);
          tensors->drop_export(it->second.key);
        }
        it->second.rp.deliver(e.error);
        self->state.pending.erase(it);
      },
  };
}

}  // namespace

caf::actor spawn_tensor_server(caf::actor_system& sys, PeerTensors* tensors) {
  return sys.spawn(tensor_server, tensors);
}

}  // namespace maestro
