// paramprobe: a test module (not an example) that reads the parameters through every helper of the
// SDK and reports what it read as the weights of the first 12 endpoints, so wasm-sdk/conformance can
// compare the SDKs' parameter helpers and their messages (layout: wasm-sdk/conformance/
// params_test.go, paramReference).

import { Input, Output, Params, run } from "../sdk/policy";
export { sy_abi_v1, sy_alloc } from "../sdk/policy";

function evaluate(input: Input, out: Output): string | null {
  const w = new StaticArray<u32>(12);
  const p = new Params(input.params());
  w[0] = p.uint("u", 7);
  w[1] = p.bool("b", false) ? 1 : 0;
  w[2] = p.bool("t", true) ? 1 : 0;
  const s = p.string("s");
  if (s != null) {
    w[3] = 1 + s.length;
    w[4] = s.length > 0 ? <u32>s.at(0) : 0;
  }
  const ss = p.strings("ss");
  if (ss != null) {
    w[5] = 1 + <u32>ss.length;
    for (let k = 0; k < ss.length; k++) {
      w[6] += ss[k].length;
      if (ss[k].is("zone-b")) w[7] = 1;
    }
  }
  const us = p.uints("us");
  if (us != null) {
    w[8] = 1 + <u32>us.length;
    for (let k = 0; k < us.length; k++) {
      w[9] += us[k];
      if (us[k] == 443) w[10] = 1;
    }
  }
  const o = p.object("o");
  if (p.error != null) return p.error;
  if (o != null) {
    const u = o.uint("u", 5);
    if (o.error != null) return o.error;
    w[11] = 1 + (u & 0x7fff);
  }
  const n = min(input.length, 12);
  for (let i = 0; i < n; i++) out.setWeight(i, w[i] & 0xffff);
  return null;
}

export function sy_evaluate(ptr: usize, len: u32): u64 {
  return run(ptr, len, evaluate);
}
