//! zoneaware: keep traffic in this node's zone, spill to other zones when it is busy
//! (wasm-sdk/examples.md). Parameters: {"spillAt": 100, "localWeight": 100, "spillWeight": 10}.
#![no_std]

use switchyard_policy::{param_uint, Endpoint, Error, Input, Output};

fn evaluate(input: &Input, out: &mut Output) -> Result<(), Error> {
    let params = input.params();
    let spill_at = param_uint(params, "spillAt", 100)? as u64;
    let local_weight = param_uint(params, "localWeight", 100)?;
    let spill_weight = param_uint(params, "spillWeight", 10)?;

    let any_ready = input.endpoints().any(|e| e.ready());
    let usable = |e: &Endpoint| if any_ready { e.ready() } else { e.serving() && e.terminating() };
    let (mut in_zone, mut conns) = (0u64, 0u64);
    for e in input.endpoints() {
        if usable(&e) && e.same_zone() {
            in_zone += 1;
            conns += e.active_conns() as u64;
        }
    }
    let busy = in_zone > 0 && conns >= spill_at * in_zone;
    for (i, e) in input.endpoints().enumerate() {
        if !usable(&e) {
            continue;
        }
        if in_zone == 0 || e.same_zone() {
            out.set_weight(i, local_weight);
        } else if busy {
            out.set_weight(i, spill_weight);
        }
    }
    out.set_scheduler("wrr", &[]);
    out.set_reevaluate(10_000);
    Ok(())
}

switchyard_policy::export_policy!(evaluate);
