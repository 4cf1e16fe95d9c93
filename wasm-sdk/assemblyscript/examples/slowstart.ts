// slowstart: new endpoints ramp up over a window (wasm-sdk/examples.md).
// Parameters: {"windowSec": 60, "weight": 100}.

import { Input, Output, Params, MAX_WEIGHT, run } from "../sdk/policy";
export { sy_abi_v1, sy_alloc } from "../sdk/policy";

function evaluate(input: Input, out: Output): string | null {
  const p = new Params(input.params());
  const windowMs = <u64>p.uint("windowSec", 60) * 1000;
  const full = <u64>min(p.uint("weight", 100), MAX_WEIGHT);
  if (p.error != null) return p.error;

  const n = input.length;
  let anyReady = false;
  for (let i = 0; i < n; i++) {
    if (input.ready(i)) {
      anyReady = true;
      break;
    }
  }
  let ramping = false;
  for (let i = 0; i < n; i++) {
    if (!usable(input, i, anyReady)) continue;
    let w = full;
    const ageMs = input.ageNs(i) / 1000000;
    if (windowMs > 0 && input.ageKnown(i) && ageMs < windowMs) {
      ramping = true;
      w = (full * ageMs) / windowMs;
      if (w == 0 && full > 0) w = 1;
    }
    out.setWeight(i, <u32>w);
  }
  out.setScheduler("wrr");
  if (ramping) out.setReevaluate(1000);
  return null;
}

// usable: the ready endpoints, or when none is ready, the serving terminating ones.
function usable(input: Input, i: i32, anyReady: bool): bool {
  return anyReady ? input.ready(i) : input.serving(i) && input.terminating(i);
}

export function sy_evaluate(ptr: usize, len: u32): u64 {
  return run(ptr, len, evaluate);
}
