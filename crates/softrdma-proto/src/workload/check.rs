//! Checking what completed against the model: READ and atomic results, received SENDs,
//! WRITE slots, and the receives still to drain at the end.
//!
//! Owns no state; reads the model's layout and pair state from `workload/mod.rs` and
//! records problems in the caller's list.

use super::*;

/// Checks what a successful READ or atomic brought back.
#[allow(clippy::too_many_arguments)]
pub(super) fn check_requester(
    mem_a: &SimMemory,
    ka: u32,
    l: &Layout,
    i: u32,
    k: usize,
    op: &Op,
    max: u32,
    problems: &mut Vec<String>,
) {
    match op.kind {
        Kind::Read => {
            let got = mem_a.snapshot(ka).unwrap_or_default();
            let at = l.read(i, op.slot) as usize;
            let want = pattern(i, 1 << 40 | (op.slot % SLOTS), max as usize);
            if got[at..at + op.size as usize] != want[..op.size as usize] {
                problems.push(format!("pair {i}: READ {k} returned wrong bytes"));
            }
        }
        Kind::FetchAdd | Kind::CompareSwap => {
            let got = mem_a.snapshot(ka).unwrap_or_default();
            let at = l.atomic(i, op.slot) as usize;
            let v = u64::from_ne_bytes(got[at..at + 8].try_into().unwrap_or([0; 8]));
            if v != op.expect_orig {
                problems.push(format!(
                    "pair {i}: atomic {k} returned {v:#x}, model {:#x}",
                    op.expect_orig
                ));
            }
        }
        _ => {}
    }
}

/// Matches a received SEND against the model.
pub(super) fn match_send(
    t: QpType,
    p: &mut PairState,
    i: u32,
    data: &[u8],
    imm: u32,
    problems: &mut Vec<String>,
) {
    let is = |p: &PairState, j: usize| {
        let k = p.sends[j];
        let op = &p.ops[k];
        op.size as usize == data.len() && pattern(i, k as u64, data.len()) == data
    };
    let found = match t {
        QpType::Rc => (p.matched < p.sends.len() && is(p, p.matched)).then_some(p.matched),
        QpType::Uc => (p.matched..p.sends.len()).find(|&j| is(p, j)),
        QpType::Ud => (0..p.sends.len()).find(|&j| is(p, j)),
    };
    match found {
        Some(j) => {
            let k = p.sends[j];
            if p.ops[k].imm && imm != (i << 24) ^ k as u32 {
                problems.push(format!(
                    "pair {i}: SEND {k} arrived with immediate {imm:#x}"
                ));
            }
            p.delivered.push(k as u32);
            if t != QpType::Ud {
                p.matched = j + 1;
            }
        }
        None => problems.push(format!(
            "pair {i}: a {}-byte SEND arrived that the model did not expect next",
            data.len()
        )),
    }
}

/// WRITE slots: RC holds exactly the data; UC holds the data or nothing, never a part.
pub(super) fn check_writes(
    t: QpType,
    p: &PairState,
    i: u32,
    l: &Layout,
    got: &[u8],
    problems: &mut Vec<String>,
) {
    // The last op to write each slot decides its contents.
    let mut last: BTreeMap<u64, usize> = BTreeMap::new();
    for (k, op) in p.ops.iter().enumerate() {
        if op.kind == Kind::Write && p.succeeded[k] {
            last.insert(op.slot % SLOTS, k);
        }
    }
    for (slot, k) in last {
        let op = &p.ops[k];
        let at = l.data(i, slot) as usize;
        let bytes = &got[at..at + op.size as usize];
        let want = pattern(i, k as u64, op.size as usize);
        let ok = match t {
            QpType::Rc => bytes == want.as_slice(),
            // Some earlier write to the slot may be the last to have landed whole.
            _ => {
                p.ops.iter().enumerate().any(|(j, o)| {
                    o.kind == Kind::Write
                        && o.slot % SLOTS == slot
                        && got[at..at + o.size as usize]
                            == pattern(i, j as u64, o.size as usize)[..]
                }) || bytes.iter().all(|&b| b == 0)
            }
        };
        if !ok {
            problems.push(format!(
                "pair {i}: WRITE slot {slot} does not hold whole data"
            ));
        }
    }
}

#[allow(clippy::too_many_arguments)]
pub(super) fn continue_final(
    sim: &mut Sim,
    pairs: &mut [PairState],
    b: usize,
    mem_b: &SimMemory,
    kb: u32,
    l: &Layout,
    cfg: &WorkloadConfig,
    grh: u64,
    problems: &mut Vec<String>,
    errors: &mut BTreeMap<&'static str, u64>,
) -> Result<(), SimError> {
    for (i, p) in pairs.iter_mut().enumerate() {
        let i = i as u32;
        while let Some(wc) = sim.qp(b, QPN_B + i).poll_completion() {
            if wc.status != WcStatus::Success {
                *errors.entry(wc.status.name()).or_default() += 1;
                continue;
            }
            if wc.opcode == WcOpcode::Recv {
                let got = mem_b.snapshot(kb).unwrap_or_default();
                let at = (l.recv(i, wc.wr_id) + grh) as usize;
                let len = wc.byte_len as usize - grh as usize;
                match_send(
                    cfg.transport,
                    p,
                    i,
                    &got[at..at + len],
                    wc.imm_data,
                    problems,
                );
            }
        }
    }
    Ok(())
}
