// leastconn: fewer active connections, more weight (wasm-sdk/examples.md).
// Parameters: {"scale": 10000}.

import { Input, Output, Params, MAX_WEIGHT, run } from "../sdk/policy";
export { sy_abi_v1, sy_alloc } from "../sdk/policy";

function evaluate(input: Input, out: Output): string | null {
  const p = new Params(input.params());
  const scale = min(p.uint("scale", 10000), MAX_WEIGHT);
  if (p.error != null) return p.error;

  const n = input.length;
  let anyReady = false;
  for (let i = 0; i < n; i++) {
    if (input.ready(i)) {
      anyReady = true;
      break;
    }
  }
  for (let i = 0; i < n; i++) {
    if (!usable(input, i, anyReady)) continue;
    let w = <u32>(<u64>scale / (1 + <u64>input.activeConns(i)));
    if (w == 0 && scale > 0) w = 1;
    out.setWeight(i, w);
  }
  out.setScheduler("wrr");
  out.setReevaluate(5000);
  return null;
}

// usable: the ready endpoints, or when none is ready, the serving terminating ones.
function usable(input: Input, i: i32, anyReady: bool): bool {
  return anyReady ? input.ready(i) : input.serving(i) && input.terminating(i);
}

export function sy_evaluate(ptr: usize, len: u32): u64 {
  return run(ptr, len, evaluate);
}
