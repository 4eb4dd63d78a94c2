#include "emulator/rnic/metrics.h"

#include <array>

#include "emulator/device/metrics_endpoint.h"

namespace pollux::emu::rnic {
namespace {

using device::LabelList;

// Samples appended to `out` (families merged by name).
struct Add {
  std::vector<prometheus::MetricFamily>& out;
  void counter(const char* name, const char* help, const LabelList& l, double v) {
    device::add_sample(out, name, help, prometheus::MetricType::Counter, l).counter.value = v;
  }
  void gauge(const char* name, const char* help, const LabelList& l, double v) {
    device::add_sample(out, name, help, prometheus::MetricType::Gauge, l).gauge.value = v;
  }
};

double n(uint64_t v) {
  return static_cast<double>(v);
}

}  // namespace

void append_nic_metrics(const NicMetricsInput& in, std::vector<prometheus::MetricFamily>& out) {
  Add b{out};
  const Rnic& r = *in.nic;
  const RnicCounters& c = r.counters();
  const LabelList l = {{"nic", in.name}, {"port", std::to_string(in.port)}};
  b.counter("pollux_rnic_tx_packets_total", "RoCEv2 packets the NIC sent", l, n(c.tx_packets));
  b.counter("pollux_rnic_rx_packets_total", "RoCEv2 packets the NIC received", l, n(c.rx_packets));
  b.counter("pollux_rnic_tx_bytes_total", "Bytes the NIC sent (BTH to ICRC)", l, n(c.tx_bytes));
  b.counter("pollux_rnic_rx_bytes_total", "Bytes the NIC received (BTH to ICRC)", l, n(c.rx_bytes));
  b.counter("pollux_rnic_retransmitted_packets_total",
            "Request packets sent again (ACK timeout, NAK, RNR)", l, n(c.retransmitted_packets));
  b.counter("pollux_rnic_ack_timeouts_total", "Local ACK timeouts (go back to the oldest PSN)", l,
            n(c.timeouts));
  b.counter("pollux_rnic_rnr_naks_sent_total", "RNR NAKs sent (a SEND found no receive WQE)", l,
            n(c.rnr_naks_sent));
  b.counter("pollux_rnic_rnr_naks_received_total", "RNR NAKs received (the requester waits)", l,
            n(c.rnr_naks_received));
  b.counter("pollux_rnic_seq_naks_sent_total", "PSN sequence error NAKs sent (a gap)", l,
            n(c.seq_naks_sent));
  b.counter("pollux_rnic_duplicate_requests_total", "Request packets received twice", l,
            n(c.duplicate_requests));
  b.counter("pollux_rnic_icrc_errors_total", "Packets dropped for a bad ICRC (corrupted)", l,
            n(c.icrc_errors));
  b.counter("pollux_rnic_dropped_packets_total",
            "Packets dropped: unknown or unready QP, stale response, malformed", l,
            n(c.dropped_packets));
  b.counter("pollux_rnic_cq_overflows_total", "Completion queues that overflowed", l,
            n(c.cq_overflows));
  b.gauge("pollux_rnic_link_up", "The NIC's link is up (0: a flap or a partition)", l,
          in.link_up ? 1 : 0);
  b.gauge("pollux_rnic_enabled", "The NIC is enabled (0: reset, its driver not back yet)", l,
          r.enabled() ? 1 : 0);
  std::array<uint64_t, 7> by_state{};
  r.for_each_qp([&](uint32_t qpn, sr::QpState st, const QpCounters& q) {
    const auto k = static_cast<std::size_t>(st);
    if (k < by_state.size()) ++by_state[k];
    LabelList ql = l;
    ql.push_back({"qpn", std::to_string(qpn)});
    b.counter("pollux_rnic_qp_tx_packets_total", "Packets the QP sent", ql, n(q.tx_packets));
    b.counter("pollux_rnic_qp_rx_packets_total", "Packets the QP received", ql, n(q.rx_packets));
    b.counter("pollux_rnic_qp_tx_bytes_total", "Bytes the QP sent", ql, n(q.tx_bytes));
    b.counter("pollux_rnic_qp_rx_bytes_total", "Bytes the QP received", ql, n(q.rx_bytes));
    b.counter("pollux_rnic_qp_retransmitted_packets_total", "Packets the QP sent again", ql,
              n(q.retransmitted_packets));
    b.counter("pollux_rnic_qp_ack_timeouts_total", "The QP's local ACK timeouts", ql,
              n(q.timeouts));
    b.counter("pollux_rnic_qp_rnr_naks_total", "RNR NAKs the QP sent and received", ql,
              n(q.rnr_naks_sent + q.rnr_naks_received));
    b.counter("pollux_rnic_qp_seq_naks_sent_total", "PSN sequence NAKs the QP sent", ql,
              n(q.seq_naks_sent));
    b.counter("pollux_rnic_qp_error_completions_total",
              "Work completions in error (flushes included)", ql, n(q.error_completions));
    b.counter("pollux_rnic_qp_errors_total", "Times the QP entered the Error state", ql,
              n(q.errors));
    b.counter("pollux_rnic_qp_messages_total", "Send work requests completed successfully", ql,
              n(q.messages));
    b.counter("pollux_rnic_qp_message_latency_seconds_total",
              "Sum of send work requests' time from fetch to completion (over messages: the "
              "mean)",
              ql, static_cast<double>(q.latency_ns_sum) * 1e-9);
    b.gauge("pollux_rnic_qp_message_latency_max_seconds",
            "Longest send work request from fetch to completion", ql,
            static_cast<double>(q.latency_ns_max) * 1e-9);
  });
  b.counter("pollux_rnic_wqes_pushed_total",
            "Send WQEs that came with their doorbell through the push window (no DMA read)", l,
            n(c.pushed_wqes));
  static const char* kStates[] = {"reset", "init", "rtr", "rts", "sqd", "sqe", "error"};
  for (std::size_t k = 0; k < by_state.size(); ++k) {
    LabelList sl = l;
    sl.push_back({"state", kStates[k]});
    b.gauge("pollux_rnic_qps", "QPs on the NIC by state", sl, n(by_state[k]));
  }
}

void append_wire_metrics(const WireStats& w, std::vector<prometheus::MetricFamily>& out) {
  Add b{out};
  b.counter("pollux_rnic_wire_packets_total", "Packets put on the wire", {}, n(w.sent));
  b.counter("pollux_rnic_wire_dropped_packets_total",
            "Packets the wire lost (loss, a link down, no such port)", {}, n(w.dropped));
  b.counter("pollux_rnic_wire_corrupted_packets_total",
            "Packets the wire corrupted (the receiver's ICRC drops them)", {}, n(w.corrupted));
}

}  // namespace pollux::emu::rnic
