//! leastconn: fewer active connections, more weight (wasm-sdk/examples.md).
//! Parameters: {"scale": 10000}.
#![no_std]

use switchyard_policy::{param_uint, Error, Input, Output, MAX_WEIGHT};

fn evaluate(input: &Input, out: &mut Output) -> Result<(), Error> {
    let scale = param_uint(input.params(), "scale", 10_000)?.min(MAX_WEIGHT);
    let any_ready = input.endpoints().any(|e| e.ready());
    for (i, e) in input.endpoints().enumerate() {
        let usable = if any_ready { e.ready() } else { e.serving() && e.terminating() };
        if !usable {
            continue;
        }
        let mut w = (scale as u64 / (1 + e.active_conns() as u64)) as u32;
        if w == 0 && scale > 0 {
            w = 1;
        }
        out.set_weight(i, w);
    }
    out.set_scheduler("wrr", &[]);
    out.set_reevaluate(5_000);
    Ok(())
}

switchyard_policy::export_policy!(evaluate);
