// zoneaware: keep traffic in this node's zone, spill to other zones when it is busy
// (wasm-sdk/examples.md). Parameters: {"spillAt": 100, "localWeight": 100, "spillWeight": 10}.

import { Input, Output, Params, run } from "../sdk/policy";
export { sy_abi_v1, sy_alloc } from "../sdk/policy";

function evaluate(input: Input, out: Output): string | null {
  const p = new Params(input.params());
  const spillAt = <u64>p.uint("spillAt", 100);
  const localWeight = p.uint("localWeight", 100);
  const spillWeight = p.uint("spillWeight", 10);
  if (p.error != null) return p.error;

  const n = input.length;
  let anyReady = false;
  for (let i = 0; i < n; i++) {
    if (input.ready(i)) {
      anyReady = true;
      break;
    }
  }
  let inZone: u64 = 0, conns: u64 = 0;
  for (let i = 0; i < n; i++) {
    if (usable(input, i, anyReady) && input.sameZone(i)) {
      inZone++;
      conns += <u64>input.activeConns(i);
    }
  }
  const busy = inZone > 0 && conns >= spillAt * inZone;
  for (let i = 0; i < n; i++) {
    if (!usable(input, i, anyReady)) continue;
    if (inZone == 0 || input.sameZone(i)) out.setWeight(i, localWeight);
    else if (busy) out.setWeight(i, spillWeight);
  }
  out.setScheduler("wrr");
  out.setReevaluate(10000);
  return null;
}

// usable: the ready endpoints, or when none is ready, the serving terminating ones.
function usable(input: Input, i: i32, anyReady: bool): bool {
  return anyReady ? input.ready(i) : input.serving(i) && input.terminating(i);
}

export function sy_evaluate(ptr: usize, len: u32): u64 {
  return run(ptr, len, evaluate);
}
