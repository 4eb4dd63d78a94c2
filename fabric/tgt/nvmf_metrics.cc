#include "fabric/tgt/nvmf_metrics.h"

#include "fabric/tcp/target_transport.h"

namespace pollux::fabric::tgt {

metrics::Source nvmf_source(const target::Target& tgt) {
  return [&tgt](metrics::Builder& b) {
    auto* tcp = dynamic_cast<tcp::TcpTargetTransport*>(tgt.transport("TCP"));
    for (const auto& g : tgt.groups()) {
      const metrics::Labels l = {{"poll_group", g->thread()->name()}};
      const target::PollGroupStats& s = g->stats();
      auto d = [](uint64_t v) { return static_cast<double>(v); };
      b.counter("pollux_nvmf_admin_qpairs_total", "Admin queues connected (associations made)", l,
                d(s.admin_qpairs));
      b.counter("pollux_nvmf_io_qpairs_total", "I/O queues connected", l, d(s.io_qpairs));
      b.gauge("pollux_nvmf_admin_qpairs", "Admin queues connected now", l,
              d(s.current_admin_qpairs));
      b.gauge("pollux_nvmf_io_qpairs", "I/O queues connected now", l, d(s.current_io_qpairs));
      b.gauge("pollux_nvmf_pending_bdev_io", "NVM commands in the bdev layer now", l,
              d(s.pending_bdev_io));
      b.counter("pollux_nvmf_completed_io_total", "NVM commands the bdev layer completed", l,
                d(s.completed_nvme_io));
      b.counter("pollux_nvmf_io_errors_total", "NVM commands that completed with an error", l,
                d(s.io_errors));
      b.counter("pollux_nvmf_authentications_total",
                "Queues authenticated in-band (DH-HMAC-CHAP)", l, d(s.authentications));
      b.counter("pollux_nvmf_authentication_failures_total",
                "In-band authentications that failed (AUTH_Failure1/2, timeout)", l,
                d(s.authentication_failures));
      b.counter("pollux_nvmf_bdev_io_retries_total",
                "NVM commands that waited for a bdev_io (the bdev layer's pool was empty)", l,
                d(s.bdev_io_retries));
      if (tcp == nullptr) continue;
      const tcp::TcpTargetGroup* tg = tcp->group_of(*g);
      if (tg == nullptr) continue;
      const auto& t = tg->stats();
      b.counter("pollux_nvmf_tcp_connections_accepted_total", "TCP connections the group took", l,
                d(t.accepted));
      b.counter("pollux_nvmf_tcp_connections_closed_total", "TCP connections the group ended", l,
                d(t.closed));
      b.counter("pollux_nvmf_tcp_buffer_waits_total",
                "Commands that waited for a data buffer (the transport's pool was empty)", l,
                d(t.buffer_waits));
    }
  };
}

}  // namespace pollux::fabric::tgt
