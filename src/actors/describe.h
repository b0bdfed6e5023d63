// What every actor puts in its answer to Describe (messages.h): who and
// where it is — process, host, its own mailbox depth — filled in from
// inside the actor's handler, so no thread reads another's state.
#pragma once

#include <unistd.h>

#include <array>
#include <string>

#include "actors/messages.h"

namespace maestro {

inline const std::string& this_host() {
  static const std::string host = [] {
    std::array<char, 256> buf{};
    return gethostname(buf.data(), buf.size() - 1) == 0 ? std::string(buf.data()) : std::string("?");
  }();
  return host;
}

// `self`: the answering actor (a caf::scheduled_actor), from its own handler.
template <class Self>
ActorInfo describe_self(Self* self, std::string name, std::string kind, std::string state, std::string detail = "{}") {
  ActorInfo i;
  i.name = std::move(name);
  i.kind = std::move(kind);
  i.process = int64_t(getpid());
  i.host = this_host();
  i.device = "host";
  i.mailbox = int64_t(self->mailbox().size());
  i.state = std::move(state);
  i.detail = std::move(detail);
  return i;
}

}  // namespace maestro
