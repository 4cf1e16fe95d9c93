//! slowstart: new endpoints ramp up over a window (wasm-sdk/examples.md).
//! Parameters: {"windowSec": 60, "weight": 100}.
#![no_std]

use switchyard_policy::{param_uint, Error, Input, Output, MAX_WEIGHT};

fn evaluate(input: &Input, out: &mut Output) -> Result<(), Error> {
    let params = input.params();
    let window_ms = param_uint(params, "windowSec", 60)? as u64 * 1000;
    let full = param_uint(params, "weight", 100)?.min(MAX_WEIGHT) as u64;
    let any_ready = input.endpoints().any(|e| e.ready());
    let mut ramping = false;
    for (i, e) in input.endpoints().enumerate() {
        let usable = if any_ready { e.ready() } else { e.serving() && e.terminating() };
        if !usable {
            continue;
        }
        let mut w = full;
        if let Some(age_ns) = e.age_ns() {
            let age_ms = age_ns / 1_000_000;
            if window_ms > 0 && age_ms < window_ms {
                ramping = true;
                w = full * age_ms / window_ms;
                if w == 0 && full > 0 {
                    w = 1;
                }
            }
        }
        out.set_weight(i, w as u32);
    }
    out.set_scheduler("wrr", &[]);
    if ramping {
        out.set_reevaluate(1_000);
    }
    Ok(())
}

switchyard_policy::export_policy!(evaluate);
