// NVMe controller front end "queue engine": doorbell register file, SQ arbitration (round robin,
// or weighted round robin with urgent class, both with arbitration burst), command-fetch grants
// that reserve a CQ slot, and CQ tail/phase tracking. Every rule (shared with the C++ reference
// model, queue_engine_ref.cc) is in README.md next to this file.
//
// Structure: all state is registered. The arbiter's choice is combinational logic of registered
// state only (no input feeds it), so it settles once per edge; inputs gate the grant and update
// state at the edge. One grant and one completion at most per edge.
module queue_engine #(
    parameter int NQ = 32  // queues, ids 0..NQ-1; a power of two <= 64 (C++: kQueues = 32)
) (
    input logic clk,
    input logic i_reset,  // synchronous, wins over every other input
    // Queue configuration: enable (create) or delete one SQ or CQ.
    input logic i_cfg_valid,
    input logic i_cfg_cq,
    input logic [7:0] i_cfg_qid,
    input logic i_cfg_enable,
    input logic [15:0] i_cfg_size,  // entries - 1
    input logic [7:0] i_cfg_cqid,
    input logic [1:0] i_cfg_prio,  // 0 urgent, 1 high, 2 medium, 3 low
    // Arbitration configuration.
    input logic i_arb_valid,
    input logic i_arb_wrr,
    input logic [2:0] i_arb_burst,
    input logic [7:0] i_arb_lpw,
    input logic [7:0] i_arb_mpw,
    input logic [7:0] i_arb_hpw,
    // Doorbell write: SQ tail or CQ head.
    input logic i_db_valid,
    input logic i_db_cq,
    input logic [7:0] i_db_qid,
    input logic [15:0] i_db_value,
    // Command fetch port and completion request.
    input logic i_fetch_ready,
    input logic i_cpl_valid,
    input logic [7:0] i_cpl_cqid,
    input logic i_cpl_unreserved,  // an entry no fetch reserved: needs free room
    // Registered results of the last edge (fields are 0 when not valid).
    output logic o_fetch_valid,
    output logic [7:0] o_fetch_sqid,
    output logic [15:0] o_fetch_slot,
    output logic o_cpl_valid,
    output logic [7:0] o_cpl_cqid,
    output logic [15:0] o_cpl_slot,
    output logic o_cpl_phase,
    output logic o_busy  // some SQ is eligible now: a grant at the next edge if fetch_ready
);
  localparam int QW = $clog2(NQ);
  localparam logic [7:0] NQ8 = 8'(NQ);
  // Rings: 0 is the only ring in RR mode and the urgent class in WRR mode; 1..3 are the high,
  // medium and low classes (a class's ring index equals its priority value).
  localparam int NR = 4;

  typedef logic [QW-1:0] qid_t;

  // ---------------------------------------------------------------- registered state
  logic [NQ-1:0] sq_en;
  logic [15:0] sq_size[NQ];  // entries - 1
  logic [15:0] sq_head[NQ];
  logic [15:0] sq_tail[NQ];
  qid_t sq_cqid[NQ];
  logic [NQ-1:0] sq_prio_is[NR];  // one-hot over NR per SQ: bit s of [p] <=> SQ s has prio p

  logic [NQ-1:0] cq_en;
  logic [NQ-1:0] cq_phase;
  logic [15:0] cq_size[NQ];
  logic [15:0] cq_head[NQ];
  logic [15:0] cq_tail[NQ];
  logic [15:0] cq_res[NQ];  // slots reserved by grants, not yet posted

  logic arb_wrr;
  logic [2:0] arb_ab;
  logic [7:0] arb_w[3];  // 0's based weights of high, medium, low
  logic [8:0] credit[3];  // WRR credits of high, medium, low
  qid_t ring_ptr[NR];  // SQ that holds (or last held) the ring's turn
  logic [6:0] ring_cnt[NR];  // grants in the current turn, saturating; 0: no turn yet

  // ---------------------------------------------------------------- helpers
  function automatic logic [15:0] next_index(logic [15:0] idx, logic [15:0] size);
    return idx == size ? 16'd0 : idx + 16'd1;
  endfunction

  // (tail - head) mod (size + 1); head, tail <= size always hold.
  function automatic logic [16:0] used_entries(logic [15:0] head, logic [15:0] tail,
                                               logic [15:0] size);
    if (tail >= head) return {1'b0, tail - head};
    return {1'b0, tail} + {1'b0, size} + 17'd1 - {1'b0, head};
  endfunction

  // Lowest set bit of m at or after `start`, circularly; index only (caller checks |m).
  // A log2(NQ)-step halving search rather than an NQ-way chain.
  function automatic qid_t first_from(logic [NQ-1:0] m, qid_t start);
    logic [NQ-1:0] r;
    qid_t off;
    r = (m >> start) | (m << (NQ - int'(start)));  // rotate right: bit 0 is `start`
    off = '0;
    for (int b = QW - 1; b >= 0; b--) begin
      if ((r & ({NQ{1'b1}} >> (NQ - (1 << b)))) == '0) begin  // none in the low 2^b bits
        off = off | qid_t'(1 << b);
        r = r >> (1 << b);
      end
    end
    return start + off;  // wraps modulo NQ (a power of two)
  endfunction

  // ---------------------------------------------------------------- arbitration (combinational)
  logic [NQ-1:0] cq_room;  // enabled and used + reserved < entries - 1
  always_comb begin
    for (int c = 0; c < NQ; c++) begin
      cq_room[c] = cq_en[c] &&
          ({1'b0, used_entries(cq_head[c], cq_tail[c], cq_size[c])} + {2'b0, cq_res[c]} <
           {2'b0, cq_size[c]});
    end
  end

  logic [NQ-1:0] elig;  // could be granted at the next edge
  always_comb begin
    for (int s = 0; s < NQ; s++) begin
      elig[s] = sq_en[s] && sq_head[s] != sq_tail[s] && cq_room[sq_cqid[s]];
    end
  end
  assign o_busy = |elig;

  logic [NQ-1:0] ring_mask[NR];
  always_comb begin
    for (int r = 0; r < NR; r++) begin
      if (!arb_wrr) ring_mask[r] = r == 0 ? elig : '0;
      else ring_mask[r] = elig & sq_prio_is[r] & ~NQ'(1);  // SQ 0 is the admin class
    end
  end

  // Per ring: whether it has work, and whether its turn holder may go on (another grant within
  // the burst, and still eligible).
  logic [NR-1:0] ring_any;
  logic [NR-1:0] ring_keep;
  always_comb begin
    for (int r = 0; r < NR; r++) begin
      ring_any[r] = |ring_mask[r];
      ring_keep[r] = ring_cnt[r] != 7'd0 && ring_mask[r][ring_ptr[r]] &&
          (arb_ab == 3'd7 || ring_cnt[r] < (7'd1 << arb_ab));
    end
  end

  // WRR among high/medium/low: credits count commands; reload all when no class with work has
  // credit left; the first of high, medium, low with work and credit wins.
  logic wrr_reload;
  logic [8:0] credit_eff[3];
  logic [1:0] wrr_ring;  // 1..3; 0: no class has work
  always_comb begin
    wrr_reload = 1'b1;
    for (int k = 0; k < 3; k++) if (ring_any[k+1] && credit[k] != 9'd0) wrr_reload = 1'b0;
    for (int k = 0; k < 3; k++) credit_eff[k] = wrr_reload ? {1'b0, arb_w[k]} + 9'd1 : credit[k];
    wrr_ring = 2'd0;
    for (int k = 2; k >= 0; k--) if (ring_any[k+1] && credit_eff[k] != 9'd0) wrr_ring = 2'(k + 1);
  end

  // The winner: pick the ring first, then one circular priority encoder on that ring's mask
  // (the turn holder, or the next eligible SQ after it, which starts a new turn).
  logic sel_valid;  // some SQ would be granted
  logic sel_by_ring;  // false for the admin SQ in WRR mode (no arbitration state)
  logic [1:0] sel_ring;
  qid_t sel_sq;
  always_comb begin
    sel_valid = 1'b1;
    sel_by_ring = 1'b1;
    sel_ring = 2'd0;
    if (!arb_wrr) begin
      sel_valid = ring_any[0];
    end else if (elig[0]) begin
      sel_by_ring = 1'b0;
    end else if (!ring_any[0]) begin
      sel_ring = wrr_ring;
      sel_valid = wrr_ring != 2'd0;
    end
    if (!sel_by_ring) sel_sq = '0;
    else if (ring_keep[sel_ring]) sel_sq = ring_ptr[sel_ring];
    else sel_sq = first_from(ring_mask[sel_ring], ring_ptr[sel_ring] + 1'b1);
  end

  // ---------------------------------------------------------------- input decoding
  wire grant = i_fetch_ready && sel_valid;
  wire qid_t grant_cq = sq_cqid[sel_sq];
  wire qid_t cpl_q = i_cpl_cqid[QW-1:0];
  wire cpl_ok = i_cpl_valid && i_cpl_cqid < NQ8 && cq_en[cpl_q] &&
      (i_cpl_unreserved ? cq_room[cpl_q] && !(grant && grant_cq == cpl_q) : cq_res[cpl_q] != 16'd0);
  wire cpl_takes_res = cpl_ok && !i_cpl_unreserved;
  wire qid_t db_q = i_db_qid[QW-1:0];
  wire db_ok = i_db_valid && i_db_qid < NQ8 &&
      (i_db_cq ? cq_en[db_q] && i_db_value <= cq_size[db_q]
               : sq_en[db_q] && i_db_value <= sq_size[db_q]);
  wire qid_t cfg_q = i_cfg_qid[QW-1:0];
  wire cfg_ok = i_cfg_valid && i_cfg_qid < NQ8 &&
      (!i_cfg_enable || (i_cfg_size != 16'd0 && (i_cfg_cq || i_cfg_cqid < NQ8)));

  // ---------------------------------------------------------------- state update
  // Nonblocking assignments later in this block win: configuration writes come last, so they
  // override a same-edge grant, doorbell or completion on the queue they rewrite.
  always_ff @(posedge clk) begin
    if (i_reset) begin
      sq_en <= '0;
      cq_en <= '0;
      cq_phase <= '0;
      for (int q = 0; q < NQ; q++) begin
        sq_size[q] <= '0;
        sq_head[q] <= '0;
        sq_tail[q] <= '0;
        sq_cqid[q] <= '0;
        cq_size[q] <= '0;
        cq_head[q] <= '0;
        cq_tail[q] <= '0;
        cq_res[q] <= '0;
      end
      for (int r = 0; r < NR; r++) begin
        sq_prio_is[r] <= '0;
        ring_ptr[r] <= qid_t'(NQ - 1);
        ring_cnt[r] <= '0;
      end
      arb_wrr <= 1'b0;
      arb_ab <= '0;
      for (int k = 0; k < 3; k++) begin
        arb_w[k] <= '0;
        credit[k] <= 9'd1;
      end
      o_fetch_valid <= 1'b0;
      o_fetch_sqid <= '0;
      o_fetch_slot <= '0;
      o_cpl_valid <= 1'b0;
      o_cpl_cqid <= '0;
      o_cpl_slot <= '0;
      o_cpl_phase <= 1'b0;
    end else begin
      // Command fetch grant.
      o_fetch_valid <= grant;
      o_fetch_sqid <= grant ? 8'(sel_sq) : 8'd0;
      o_fetch_slot <= grant ? sq_head[sel_sq] : 16'd0;
      if (grant) begin
        sq_head[sel_sq] <= next_index(sq_head[sel_sq], sq_size[sel_sq]);
        if (sel_by_ring) begin
          ring_ptr[sel_ring] <= sel_sq;
          ring_cnt[sel_ring] <= !ring_keep[sel_ring] ? 7'd1 :
              ring_cnt[sel_ring] == 7'd127 ? 7'd127 : ring_cnt[sel_ring] + 7'd1;
          if (arb_wrr && sel_ring != 2'd0) begin
            for (int k = 0; k < 3; k++) begin
              credit[k] <= credit_eff[k] - ((2'(k + 1) == sel_ring) ? 9'd1 : 9'd0);
            end
          end
        end
      end

      // Completion; a grant and a completion on one CQ leave its reservations unchanged.
      o_cpl_valid <= cpl_ok;
      o_cpl_cqid <= cpl_ok ? 8'(cpl_q) : 8'd0;
      o_cpl_slot <= cpl_ok ? cq_tail[cpl_q] : 16'd0;
      o_cpl_phase <= cpl_ok && cq_phase[cpl_q];
      if (cpl_ok) begin
        cq_tail[cpl_q] <= next_index(cq_tail[cpl_q], cq_size[cpl_q]);
        if (cq_tail[cpl_q] == cq_size[cpl_q]) cq_phase[cpl_q] <= !cq_phase[cpl_q];
      end
      if (grant && !(cpl_takes_res && cpl_q == grant_cq)) cq_res[grant_cq] <= cq_res[grant_cq] + 16'd1;
      if (cpl_takes_res && !(grant && cpl_q == grant_cq)) cq_res[cpl_q] <= cq_res[cpl_q] - 16'd1;

      // Doorbell.
      if (db_ok) begin
        if (i_db_cq) cq_head[db_q] <= i_db_value;
        else sq_tail[db_q] <= i_db_value;
      end

      // Queue configuration: a whole queue's state, fresh (enable) or cleared (delete).
      if (cfg_ok) begin
        if (i_cfg_cq) begin
          cq_en[cfg_q] <= i_cfg_enable;
          cq_phase[cfg_q] <= i_cfg_enable;
          cq_size[cfg_q] <= i_cfg_enable ? i_cfg_size : 16'd0;
          cq_head[cfg_q] <= '0;
          cq_tail[cfg_q] <= '0;
          cq_res[cfg_q] <= '0;
        end else begin
          sq_en[cfg_q] <= i_cfg_enable;
          sq_size[cfg_q] <= i_cfg_enable ? i_cfg_size : 16'd0;
          sq_head[cfg_q] <= '0;
          sq_tail[cfg_q] <= '0;
          sq_cqid[cfg_q] <= i_cfg_enable ? i_cfg_cqid[QW-1:0] : '0;
          for (int r = 0; r < NR; r++) begin
            sq_prio_is[r][cfg_q] <= i_cfg_enable && i_cfg_prio == 2'(r);
          end
        end
      end

      // Arbitration configuration: new settings, arbitration state back to its start.
      if (i_arb_valid) begin
        arb_wrr <= i_arb_wrr;
        arb_ab <= i_arb_burst;
        arb_w[0] <= i_arb_hpw;
        arb_w[1] <= i_arb_mpw;
        arb_w[2] <= i_arb_lpw;
        credit[0] <= {1'b0, i_arb_hpw} + 9'd1;
        credit[1] <= {1'b0, i_arb_mpw} + 9'd1;
        credit[2] <= {1'b0, i_arb_lpw} + 9'd1;
        for (int r = 0; r < NR; r++) begin
          ring_ptr[r] <= qid_t'(NQ - 1);
          ring_cnt[r] <= '0;
        end
      end
    end
  end
endmodule
