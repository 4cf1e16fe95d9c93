// AssemblyScript guest SDK for Switchyard balancing policies (ABI v1, wasm-sdk/ABI.md).
//
// A policy is a function from an Input (read in place from the host's buffer) to an Output (one
// weight per endpoint, an optional IPVS scheduler and re-evaluation interval). It returns null on
// success, or why it declines:
//
//   import { Input, Output, run } from "../sdk/policy";
//   export { sy_abi_v1, sy_alloc } from "../sdk/policy";
//   function evaluate(input: Input, out: Output): string | null { ... }
//   export function sy_evaluate(ptr: usize, len: u32): u64 { return run(ptr, len, evaluate); }
//
// The hot path allocates nothing: endpoints are read by index, and the input and output buffers are
// reused across evaluations.

export { Params } from "./params";

/** ABI version this SDK implements. */
export const MAJOR: u16 = 1;
export const MINOR: u16 = 0;

const INPUT_HEADER_V10: u32 = 120;
const RECORD_V10: u32 = 104;
const OUTPUT_HEADER_V10: u32 = 40;
/** Room after the weights for the scheduler (16 bytes at most) and its flags. */
const OUTPUT_STRINGS_MAX: u32 = 64;

/** The largest weight the host accepts. */
export const MAX_WEIGHT: u32 = 65535;

// Protocols and Service types, as the input encodes them.
export const TCP: u8 = 1;
export const UDP: u8 = 2;
export const SCTP: u8 = 3;
export const CLUSTER_IP: u8 = 1;
export const NODE_PORT: u8 = 2;
export const LOAD_BALANCER: u8 = 3;
export const EXTERNAL_NAME: u8 = 4;

// Endpoint flags.
export const FLAG_READY: u32 = 1 << 0;
export const FLAG_SERVING: u32 = 1 << 1;
export const FLAG_TERMINATING: u32 = 1 << 2;
export const FLAG_LOCAL: u32 = 1 << 3;
export const FLAG_SAME_ZONE: u32 = 1 << 4;
export const FLAG_HINT_ZONE: u32 = 1 << 5;
export const FLAG_HINT_NODE: u32 = 1 << 6;
export const FLAG_AGE_KNOWN: u32 = 1 << 7;

// Log levels.
export const LEVEL_DEBUG: u32 = 0;
export const LEVEL_INFO: u32 = 1;
export const LEVEL_WARN: u32 = 2;
export const LEVEL_ERROR: u32 = 3;

/** A UTF-8 byte range inside the input (valid during the evaluation). */
export class Bytes {
  constructor(public ptr: usize, public length: u32) {}

  /** Reports whether the bytes equal the ASCII string s. */
  is(s: string): bool {
    return asciiEquals(this.ptr, this.length, s);
  }

  /** Reports whether the bytes start with the ASCII string s. */
  startsWith(s: string): bool {
    return <u32>s.length <= this.length && asciiEquals(this.ptr, <u32>s.length, s);
  }

  /** The bytes from offset `from` on. */
  slice(from: u32): Bytes {
    from = min(from, this.length);
    return new Bytes(this.ptr + from, this.length - from);
  }

  /** Byte i. */
  at(i: u32): u8 {
    return i < this.length ? load<u8>(this.ptr + i) : 0;
  }

  equals(o: Bytes): bool {
    return this.length == o.length && memory.compare(this.ptr, o.ptr, this.length) == 0;
  }

  toString(): string {
    return String.UTF8.decodeUnsafe(this.ptr, this.length);
  }
}

function asciiEquals(ptr: usize, n: u32, s: string): bool {
  if (<u32>s.length != n) return false;
  for (let i: u32 = 0; i < n; i++) {
    if (<u32>load<u8>(ptr + i) != <u32>s.charCodeAt(i)) return false;
  }
  return true;
}

/** One evaluation's input, read in place. Endpoints are addressed by index, 0 <= i < length. */
export class Input {
  ptr: usize = 0;
  size: u32 = 0;
  length: i32 = 0;
  epOff: u32 = 0;
  rec: u32 = 0;

  /** Checks the header of the input at ptr..ptr+size; returns why it is bad, or null. */
  parse(ptr: usize, size: u32): string | null {
    this.ptr = ptr;
    this.size = size;
    this.length = 0;
    if (size >= 2 && load<u16>(ptr) != MAJOR) return "input ABI major version is not 1";
    if (size < INPUT_HEADER_V10) return "input shorter than its header";
    const hs = load<u32>(ptr, 4), total = load<u32>(ptr, 8);
    if (hs < INPUT_HEADER_V10 || total != size || hs > total) return "bad input header";
    const n = load<u32>(ptr, 12), off = load<u32>(ptr, 16), rec = load<u32>(ptr, 20);
    if (rec < RECORD_V10 || off < hs || <u64>off + <u64>n * <u64>rec > <u64>total) return "bad input record table";
    this.length = <i32>n;
    this.epOff = off;
    this.rec = rec;
    return null;
  }

  private str(at: usize): Bytes {
    const off = load<u32>(at), n = load<u32>(at, 4);
    if (n == 0 || <u64>off + <u64>n > <u64>this.size) return new Bytes(this.ptr, 0);
    return new Bytes(this.ptr + off, n);
  }

  private strIs(at: usize, b: Bytes): bool {
    const off = load<u32>(at), n = load<u32>(at, 4);
    if (n == 0 || <u64>off + <u64>n > <u64>this.size) return b.length == 0;
    return n == b.length && memory.compare(this.ptr + off, b.ptr, n) == 0;
  }

  @inline private rp(i: i32): usize {
    assert(<u32>i < <u32>this.length);
    return this.ptr + this.epOff + <usize>i * this.rec;
  }

  /** The evaluation time in Unix nanoseconds. Use it instead of a clock. */
  nowUnixNano(): i64 { return load<i64>(this.ptr, 32); }
  namespace(): Bytes { return this.str(this.ptr + 40); }
  name(): Bytes { return this.str(this.ptr + 48); }
  portName(): Bytes { return this.str(this.ptr + 56); }
  port(): u16 { return load<u16>(this.ptr, 64); }
  /** TCP, UDP or SCTP. */
  protocol(): u8 { return load<u8>(this.ptr, 66); }
  /** CLUSTER_IP, NODE_PORT, LOAD_BALANCER or EXTERNAL_NAME. */
  serviceType(): u8 { return load<u8>(this.ptr, 67); }
  /** 0 when there is none. */
  nodePort(): u16 { return load<u16>(this.ptr, 68); }
  externalLocal(): bool { return load<u8>(this.ptr, 70) == 1; }
  internalLocal(): bool { return load<u8>(this.ptr, 71) == 1; }
  /** This node's name and zone (the zone may be empty). */
  nodeName(): Bytes { return this.str(this.ptr + 72); }
  nodeZone(): Bytes { return this.str(this.ptr + 80); }
  /** The policy's JSON parameters, empty when none; read them with paramUint and paramString. */
  params(): Bytes { return this.str(this.ptr + 88); }
  trafficDistribution(): Bytes { return this.str(this.ptr + 96); }
  schedulerHint(): Bytes { return this.str(this.ptr + 104); }
  sessionAffinity(): bool { return (load<u32>(this.ptr, 112) & 1) != 0; }

  // Endpoint i.

  /** Address byte k (0..15) of endpoint i: IPv6, IPv4 mapped into IPv6 (bytes 12..15). */
  addrByte(i: i32, k: u32): u8 { return load<u8>(this.rp(i) + (k & 15)); }
  targetPort(i: i32): u16 { return load<u16>(this.rp(i), 16); }
  /** 4 or 6. */
  family(i: i32): u8 { return load<u8>(this.rp(i), 18); }
  /** The FLAG_* bits; the methods below test them. */
  flags(i: i32): u32 { return load<u32>(this.rp(i), 20); }
  ready(i: i32): bool { return (this.flags(i) & FLAG_READY) != 0; }
  serving(i: i32): bool { return (this.flags(i) & FLAG_SERVING) != 0; }
  terminating(i: i32): bool { return (this.flags(i) & FLAG_TERMINATING) != 0; }
  local(i: i32): bool { return (this.flags(i) & FLAG_LOCAL) != 0; }
  sameZone(i: i32): bool { return (this.flags(i) & FLAG_SAME_ZONE) != 0; }
  hintedForZone(i: i32): bool { return (this.flags(i) & FLAG_HINT_ZONE) != 0; }
  hintedForNode(i: i32): bool { return (this.flags(i) & FLAG_HINT_NODE) != 0; }
  /** The stable identity, the same on every node and call. */
  id(i: i32): u64 { return load<u64>(this.rp(i), 24); }
  /** Reports whether ageNs(i) is meaningful. */
  ageKnown(i: i32): bool { return (this.flags(i) & FLAG_AGE_KNOWN) != 0; }
  /** How long this node has known endpoint i, in nanoseconds. */
  ageNs(i: i32): u64 { return load<u64>(this.rp(i), 32); }
  /**
   * IPVS statistics of this node only (activeConns counts the connections through this node, not
   * the endpoint's total), read every policies.statisticsInterval (10 s): an evaluation between two
   * reads, one asked for with setReevaluate or caused by a change, sees the last.
   */
  activeConns(i: i32): u32 { return load<u32>(this.rp(i), 40); }
  inactiveConns(i: i32): u32 { return load<u32>(this.rp(i), 44); }
  connRate(i: i32): u32 { return load<u32>(this.rp(i), 48); }
  bytesInRate(i: i32): u64 { return load<u64>(this.rp(i), 56); }
  bytesOutRate(i: i32): u64 { return load<u64>(this.rp(i), 64); }
  /** Where endpoint i runs (empty when unknown), and its topology hints, comma-separated. */
  nodeNameOf(i: i32): Bytes { return this.str(this.rp(i) + 72); }
  zoneOf(i: i32): Bytes { return this.str(this.rp(i) + 80); }
  hintZones(i: i32): Bytes { return this.str(this.rp(i) + 88); }
  hintNodes(i: i32): Bytes { return this.str(this.rp(i) + 96); }
  /** Allocation-free comparisons of endpoint i's node name and zone. */
  nodeNameIs(i: i32, b: Bytes): bool { return this.strIs(this.rp(i) + 72, b); }
  zoneIs(i: i32, b: Bytes): bool { return this.strIs(this.rp(i) + 80, b); }
}

/** One evaluation's result. Every weight starts at 0 (drain). */
export class Output {
  ptr: usize = 0;
  cap: u32 = 0;
  length: i32 = 0;
  scheduler: string = "";
  flags: string[] = [];
  reevaluateMs: u32 = 0;

  /** Sets endpoint i's weight, capped at MAX_WEIGHT; 0 drains it. */
  setWeight(i: i32, w: u32): void {
    assert(<u32>i < <u32>this.length);
    store<u32>(this.ptr + OUTPUT_HEADER_V10 + (<usize>i << 2), min(w, MAX_WEIGHT));
  }

  weight(i: i32): u32 {
    assert(<u32>i < <u32>this.length);
    return load<u32>(this.ptr + OUTPUT_HEADER_V10 + (<usize>i << 2));
  }

  /** Asks for an IPVS scheduler (rr, wrr, lc, wlc, sh, mh, ...) and its flags (sh-port, ...). */
  setScheduler(name: string, flags: string[] = []): void {
    this.scheduler = name;
    this.flags = flags;
  }

  /**
   * Asks to be evaluated again after ms milliseconds (1,000 to 3,600,000); 0: only on change. The
   * statistics are no fresher for it: they are read every policies.statisticsInterval.
   */
  setReevaluate(ms: u32): void {
    this.reevaluateMs = ms;
  }

  reset(n: i32): bool {
    const need = OUTPUT_HEADER_V10 + (<u32>n << 2) + OUTPUT_STRINGS_MAX;
    if (need > this.cap) {
      if (this.ptr != 0) heap.free(this.ptr);
      this.ptr = heap.alloc(need);
      this.cap = need;
    }
    this.length = n;
    memory.fill(this.ptr, 0, OUTPUT_HEADER_V10 + (<u32>n << 2));
    this.scheduler = "";
    this.flags = [];
    this.reevaluateMs = 0;
    return true;
  }

  /** Lays out the header and strings around the weights; returns the size, or 0 when too long. */
  encode(): u32 {
    const n = <u32>this.length;
    let at = OUTPUT_HEADER_V10 + (n << 2);
    const start = at;
    const end = start + OUTPUT_STRINGS_MAX;
    const p = this.ptr;
    store<u16>(p, MAJOR, 0);
    store<u16>(p, MINOR, 2);
    store<u32>(p, OUTPUT_HEADER_V10, 4);
    store<u32>(p, n, 12);
    store<u32>(p, OUTPUT_HEADER_V10, 16);
    store<u32>(p, this.reevaluateMs, 20);
    const s = this.scheduler;
    if (s.length > 0) {
      if (at + <u32>s.length > end) return 0;
      for (let k = 0; k < s.length; k++) store<u8>(p + at + k, <u8>s.charCodeAt(k));
      store<u32>(p, at, 24);
      store<u32>(p, s.length, 28);
      at += s.length;
    }
    if (this.flags.length > 0) {
      const fs = at;
      for (let j = 0; j < this.flags.length; j++) {
        const f = this.flags[j];
        if (at + 1 + <u32>f.length > end) return 0;
        if (j > 0) store<u8>(p + at++, 0x2c);
        for (let k = 0; k < f.length; k++) store<u8>(p + at + k, <u8>f.charCodeAt(k));
        at += f.length;
      }
      store<u32>(p, fs, 32);
      store<u32>(p, at - fs, 36);
    }
    store<u32>(p, at, 8);
    return at;
  }
}

@external("sy_v1", "log")
declare function hostLog(level: u32, ptr: usize, len: u32): void;

let logBuf: usize = 0;
const LOG_MAX: u32 = 256;

/** Sends an ASCII line to the daemon's log (rate limited by the host), truncated to 256 bytes. */
export function log(level: u32, msg: string): void {
  if (logBuf == 0) logBuf = heap.alloc(LOG_MAX);
  const n = min(<u32>msg.length, LOG_MAX);
  for (let k: u32 = 0; k < n; k++) store<u8>(logBuf + k, <u8>msg.charCodeAt(k));
  if (n > 0) hostLog(level, logBuf, n);
}

let inPtr: usize = 0;
let inCap: u32 = 0;
const input = new Input();
const output = new Output();

/** The ABI v1 marker export; never called. */
export function sy_abi_v1(): void {}

/** The sy_alloc export: a buffer of at least size bytes for the input. */
export function sy_alloc(size: u32): usize {
  if (size > inCap || inPtr == 0) {
    if (inPtr != 0) heap.free(inPtr);
    inPtr = heap.alloc(max(size, 1));
    inCap = size;
  }
  return inPtr;
}

/** A policy: reads input, fills out, returns null or why it declines. */
export type Policy = (input: Input, out: Output) => string | null;

/** The body of the sy_evaluate export: runs f over the input at ptr..ptr+len. */
export function run(ptr: usize, len: u32, f: Policy): u64 {
  const bad = input.parse(ptr, len);
  if (bad != null) {
    log(LEVEL_WARN, bad);
    return 0;
  }
  output.reset(input.length);
  const err = f(input, output);
  if (err != null) {
    log(LEVEL_WARN, err);
    return 0;
  }
  const size = output.encode();
  if (size == 0) {
    log(LEVEL_WARN, "scheduler and flags too long");
    return 0;
  }
  return (<u64>output.ptr << 32) | <u64>size;
}
