// canary: a weighted canary split (wasm-sdk/examples.md).
// Parameters: {"canary": "zone=b" | "node=n2" | "cidr=10.0.1.0/24", "percent": 10}.

import { Bytes, Input, Output, Params, run } from "../sdk/policy";
export { sy_abi_v1, sy_alloc } from "../sdk/policy";

const ZONE = 1, NODE = 2, CIDR = 3;

/** The parsed canary selector. */
class Selector {
  kind: i32 = 0;
  value: Bytes = new Bytes(0, 0);
  prefix: u32 = 0;
  mask: u32 = 0;

  matches(input: Input, i: i32): bool {
    if (this.kind == ZONE) return input.zoneIs(i, this.value);
    if (this.kind == NODE) return input.nodeNameIs(i, this.value);
    if (input.family(i) != 4) return false;
    const v = (<u32>input.addrByte(i, 12) << 24) | (<u32>input.addrByte(i, 13) << 16) |
      (<u32>input.addrByte(i, 14) << 8) | <u32>input.addrByte(i, 15);
    return (v & this.mask) == (this.prefix & this.mask);
  }
}

// cidr parse state: the position in the text.
let at: u32 = 0;

/** Reads up to three decimal digits at s[at..], without a leading zero, at most max; -1 if none. */
function num(s: Bytes, maxV: u32): i64 {
  const start = at;
  let v: u32 = 0;
  while (at < s.length && s.at(at) >= 0x30 && s.at(at) <= 0x39 && at - start < 3) {
    v = v * 10 + <u32>(s.at(at) - 0x30);
    at++;
  }
  if (at == start || (s.at(start) == 0x30 && at - start > 1) || v > maxV) return -1;
  return <i64>v;
}

/** Parses a.b.c.d/len into sel; false when it is not one. */
function parseCidr4(s: Bytes, sel: Selector): bool {
  at = 0;
  let addr: u32 = 0;
  for (let k = 0; k < 4; k++) {
    const v = num(s, 255);
    if (v < 0) return false;
    addr = (addr << 8) | <u32>v;
    const sep: u8 = k == 3 ? 0x2f : 0x2e;
    if (at >= s.length || s.at(at) != sep) return false;
    at++;
  }
  const bits = num(s, 32);
  if (bits < 0 || at != s.length) return false;
  sel.prefix = addr;
  sel.mask = bits == 0 ? 0 : 0xffffffff << (32 - <u32>bits);
  return true;
}

function share(percent: u32, n: u32): u32 {
  return percent == 0 ? 0 : max(1, (percent * 10000) / (100 * n));
}

function evaluate(input: Input, out: Output): string | null {
  const p = new Params(input.params());
  const s = p.string("canary");
  if (p.error != null) return p.error;
  if (s == null) return "params: canary is missing";
  const sel = new Selector();
  if (s.startsWith("zone=")) {
    sel.kind = ZONE;
    sel.value = s.slice(5);
  } else if (s.startsWith("node=")) {
    sel.kind = NODE;
    sel.value = s.slice(5);
  } else if (s.startsWith("cidr=")) {
    sel.kind = CIDR;
    if (!parseCidr4(s.slice(5), sel)) return "params: canary cidr is not an IPv4 prefix a.b.c.d/len";
  } else {
    return "params: canary must be zone=<zone>, node=<node> or cidr=<a.b.c.d/len>";
  }
  const percent = p.uint("percent", 10);
  if (p.error != null) return p.error;
  if (percent > 100) return "params: percent is above 100";

  const n = input.length;
  let anyReady = false;
  for (let i = 0; i < n; i++) {
    if (input.ready(i)) {
      anyReady = true;
      break;
    }
  }
  let nc: u32 = 0, ns: u32 = 0;
  for (let i = 0; i < n; i++) {
    if (!usable(input, i, anyReady)) continue;
    if (sel.matches(input, i)) nc++;
    else ns++;
  }
  let cw: u32 = 100, sw: u32 = 100;
  if (nc > 0 && ns > 0) {
    cw = share(percent, nc);
    sw = share(100 - percent, ns);
  }
  for (let i = 0; i < n; i++) {
    if (!usable(input, i, anyReady)) continue;
    out.setWeight(i, sel.matches(input, i) ? cw : sw);
  }
  out.setScheduler("wrr");
  return null;
}

// usable: the ready endpoints, or when none is ready, the serving terminating ones.
function usable(input: Input, i: i32, anyReady: bool): bool {
  return anyReady ? input.ready(i) : input.serving(i) && input.terminating(i);
}

export function sy_evaluate(ptr: usize, len: u32): u64 {
  return run(ptr, len, evaluate);
}
