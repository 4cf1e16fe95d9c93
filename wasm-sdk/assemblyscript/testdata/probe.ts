// probe: a test module (not an example) that reads every input field through the SDK and folds them
// into each endpoint's weight, so wasm-sdk/conformance can check every accessor against the Go SDK.
// The fold: h = (h ^ x) * 16777619 over u32 words; a u64 is its low then high half; a string is its
// length then its bytes; endpoint i starts from the service's hash and i.

import { Bytes, Input, Output, run } from "../sdk/policy";
export { sy_abi_v1, sy_alloc } from "../sdk/policy";

let h: u32 = 0;

function w(x: u32): void {
  h = (h ^ x) * 16777619;
}

function d(x: u64): void {
  w(<u32>x);
  w(<u32>(x >> 32));
}

function s(b: Bytes): void {
  w(b.length);
  for (let k: u32 = 0; k < b.length; k++) w(<u32>b.at(k));
}

function evaluate(input: Input, out: Output): string | null {
  h = 2166136261;
  d(<u64>input.nowUnixNano());
  s(input.namespace());
  s(input.name());
  s(input.portName());
  w(<u32>input.port());
  w(<u32>input.protocol());
  w(<u32>input.serviceType());
  w(<u32>input.nodePort());
  w(<u32>input.externalLocal());
  w(<u32>input.internalLocal());
  s(input.nodeName());
  s(input.nodeZone());
  s(input.params());
  s(input.trafficDistribution());
  s(input.schedulerHint());
  w(<u32>input.sessionAffinity());
  w(<u32>input.length);
  const service = h;
  for (let i = 0; i < input.length; i++) {
    h = service;
    w(<u32>i);
    for (let k: u32 = 0; k < 16; k++) w(<u32>input.addrByte(i, k));
    w(<u32>input.targetPort(i));
    w(<u32>input.family(i));
    w(input.flags(i));
    w(<u32>input.ready(i) | (<u32>input.serving(i) << 1) | (<u32>input.terminating(i) << 2) | (<u32>input.local(i) << 3));
    w(<u32>input.sameZone(i) | (<u32>input.hintedForZone(i) << 1) | (<u32>input.hintedForNode(i) << 2));
    d(input.id(i));
    d(input.ageKnown(i) ? input.ageNs(i) : 0xffffffffffffffff);
    w(input.activeConns(i));
    w(input.inactiveConns(i));
    w(input.connRate(i));
    d(input.bytesInRate(i));
    d(input.bytesOutRate(i));
    s(input.nodeNameOf(i));
    s(input.zoneOf(i));
    s(input.hintZones(i));
    s(input.hintNodes(i));
    out.setWeight(i, h & 0xffff);
  }
  return null;
}

export function sy_evaluate(ptr: usize, len: u32): u64 {
  return run(ptr, len, evaluate);
}
