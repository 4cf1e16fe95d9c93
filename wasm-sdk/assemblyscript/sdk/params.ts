// Allocation-light reading of top-level keys of the JSON parameters. The rules are shared by every
// SDK (wasm-sdk/examples.md): the first occurrence of a key counts and nothing after it is validated.

import { Bytes } from "./policy";

/**
 * Params reads the policy's JSON parameters. A failed read returns 0 or null and records the first
 * error in `error` ("params: ..."), so a policy can read everything and check once:
 *
 *   const p = new Params(input.params());
 *   const a = p.uint("a", 1), b = p.string("b");
 *   if (p.error != null) return p.error;
 */
export class Params {
  error: string | null = null;
  private i: u32 = 0;

  constructor(public b: Bytes) {}

  /** The non-negative integer at key, def when params is empty or has no such key. */
  uint(key: string, def: u32): u32 {
    const found = this.find(key);
    if (this.error != null) return 0;
    if (!found) return def;
    const v = this.scanUint();
    if (v < 0) {
      this.fail("params: " + key + " is not an integer from 0 to 4294967295");
      return 0;
    }
    return <u32>v;
  }

  /** The string at key (raw bytes, no escapes allowed), null when absent or on error. */
  string(key: string): Bytes | null {
    const found = this.find(key);
    if (this.error != null || !found) return null;
    const start = this.i + 1;
    if (!this.scanStr()) {
      this.fail("params: " + key + " is not a string without escapes");
      return null;
    }
    const n = this.i - 1 - start;
    for (let k: u32 = 0; k < n; k++) {
      if (this.b.at(start + k) == 0x5c) {
        this.fail("params: " + key + " is not a string without escapes");
        return null;
      }
    }
    return new Bytes(this.b.ptr + start, n);
  }

  /** The boolean at key (true or false), def when params is empty or has no such key. */
  bool(key: string, def: bool): bool {
    const found = this.find(key);
    if (this.error != null) return false;
    if (!found) return def;
    const rest = this.b.slice(this.i);
    if (rest.startsWith("true") && !this.continues(this.i + 4)) return true;
    if (rest.startsWith("false") && !this.continues(this.i + 5)) return false;
    this.fail("params: " + key + " is not true or false");
    return false;
  }

  /**
   * The object at key, as Params to read nested keys from (its errors are its own: check both),
   * null when absent or on error.
   */
  object(key: string): Params | null {
    const found = this.find(key);
    if (this.error != null || !found) return null;
    const start = this.i;
    if (this.eof() || this.c() != 0x7b || !this.skipValue(0)) {
      this.fail("params: " + key + " is not an object");
      return null;
    }
    return new Params(new Bytes(this.b.ptr + start, this.i - start));
  }

  /** The list of strings at key (raw bytes, no escapes allowed), null when absent or on error. */
  strings(key: string): Array<Bytes> | null {
    const found = this.find(key);
    if (this.error != null || !found) return null;
    const out = new Array<Bytes>();
    if (!this.eat(0x5b)) return this.listFail<Bytes>(key, " is not a list of strings without escapes");
    this.space();
    if (this.eat(0x5d)) return out;
    while (true) {
      this.space();
      const start = this.i + 1;
      if (!this.scanStr()) return this.listFail<Bytes>(key, " is not a list of strings without escapes");
      const n = this.i - 1 - start;
      for (let k: u32 = 0; k < n; k++) {
        if (this.b.at(start + k) == 0x5c) return this.listFail<Bytes>(key, " is not a list of strings without escapes");
      }
      out.push(new Bytes(this.b.ptr + start, n));
      this.space();
      if (this.eat(0x5d)) return out;
      if (!this.eat(0x2c)) return this.listFail<Bytes>(key, " is not a list of strings without escapes");
    }
    return null;
  }

  /** The list of non-negative integers below 2^32 at key, null when absent or on error. */
  uints(key: string): Array<u32> | null {
    const found = this.find(key);
    if (this.error != null || !found) return null;
    const out = new Array<u32>();
    if (!this.eat(0x5b)) return this.listFail<u32>(key, " is not a list of integers from 0 to 4294967295");
    this.space();
    if (this.eat(0x5d)) return out;
    while (true) {
      this.space();
      const v = this.scanUint();
      if (v < 0) return this.listFail<u32>(key, " is not a list of integers from 0 to 4294967295");
      out.push(<u32>v);
      this.space();
      if (this.eat(0x5d)) return out;
      if (!this.eat(0x2c)) return this.listFail<u32>(key, " is not a list of integers from 0 to 4294967295");
    }
    return null;
  }

  private listFail<T>(key: string, what: string): Array<T> | null {
    this.fail("params: " + key + what);
    return null;
  }

  /** Whether the byte at i would continue a literal ending before it. */
  private continues(i: u32): bool {
    if (i >= this.b.length) return false;
    const c = this.b.at(i);
    return (c >= 0x30 && c <= 0x39) || (c >= 0x41 && c <= 0x5a) || (c >= 0x61 && c <= 0x7a) || c == 0x5f;
  }

  fail(msg: string): void {
    if (this.error == null) this.error = msg;
  }

  @inline private eof(): bool { return this.i >= this.b.length; }
  @inline private c(): u8 { return this.b.at(this.i); }

  private space(): void {
    while (!this.eof()) {
      const c = this.c();
      if (c != 0x20 && c != 0x09 && c != 0x0a && c != 0x0d) break;
      this.i++;
    }
  }

  private eat(c: u8): bool {
    if (!this.eof() && this.c() == c) {
      this.i++;
      return true;
    }
    return false;
  }

  /** Scans a string; the raw content is b[start+1 .. i-1]. */
  private scanStr(): bool {
    if (!this.eat(0x22)) return false;
    while (!this.eof()) {
      const c = this.c();
      if (c == 0x5c) this.i += 2;
      else if (c == 0x22) {
        this.i++;
        return true;
      } else this.i++;
    }
    return false;
  }

  /** Scans a non-negative integer below 2^32; -1 when it is not one. */
  private scanUint(): i64 {
    const start = this.i;
    let v: u64 = 0;
    while (!this.eof() && this.c() >= 0x30 && this.c() <= 0x39) {
      v = v * 10 + <u64>(this.c() - 0x30);
      if (v > 0xffffffff) return -1;
      this.i++;
    }
    if (this.i == start || (this.b.at(start) == 0x30 && this.i - start > 1)) return -1;
    if (!this.eof()) {
      const c = this.c();
      if (c == 0x2e || c == 0x65 || c == 0x45) return -1;
    }
    return <i64>v;
  }

  private skipValue(depth: i32): bool {
    if (depth > 64 || this.eof()) return false;
    const c = this.c();
    if (c == 0x22) return this.scanStr();
    if (c == 0x7b || c == 0x5b) {
      const closing: u8 = c == 0x5b ? 0x5d : 0x7d;
      this.i++;
      this.space();
      if (this.eat(closing)) return true;
      while (true) {
        this.space();
        if (c == 0x7b) {
          if (!this.scanStr()) return false;
          this.space();
          if (!this.eat(0x3a)) return false;
          this.space();
        }
        if (!this.skipValue(depth + 1)) return false;
        this.space();
        if (this.eat(closing)) return true;
        if (!this.eat(0x2c)) return false;
      }
    }
    const start = this.i;
    while (!this.eof()) {
      const d = this.c();
      if (!(d == 0x2d || d == 0x2b || d == 0x2e || (d >= 0x30 && d <= 0x39) || (d >= 0x61 && d <= 0x7a) || d == 0x45)) break;
      this.i++;
    }
    return this.i > start;
  }

  /** Positions i at key's value; false when params is empty, has no such key, or is bad (error set). */
  private find(key: string): bool {
    if (this.error != null) return false;
    this.i = 0;
    this.space();
    if (this.eof()) return false;
    if (!this.eat(0x7b)) {
      this.fail("params: not a JSON object");
      return false;
    }
    this.space();
    if (this.eat(0x7d)) return false;
    while (true) {
      this.space();
      const ks = this.i + 1;
      if (!this.scanStr()) {
        this.fail("params: bad key");
        return false;
      }
      const kn = this.i - 1 - ks;
      this.space();
      if (!this.eat(0x3a)) {
        this.fail("params: missing ':'");
        return false;
      }
      this.space();
      if (new Bytes(this.b.ptr + ks, kn).is(key)) return true;
      if (!this.skipValue(0)) {
        this.fail("params: bad value");
        return false;
      }
      this.space();
      if (this.eat(0x7d)) return false;
      if (!this.eat(0x2c)) {
        this.fail("params: missing ','");
        return false;
      }
    }
    return false;
  }
}
