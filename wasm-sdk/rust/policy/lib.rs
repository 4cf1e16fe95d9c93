//! Rust guest SDK for Switchyard balancing policies (ABI v1, wasm-sdk/ABI.md).
//!
//! `no_std`, no dependencies, built with plain `rustc --target wasm32-unknown-unknown`. A policy is a
//! function from an [`Input`] (read in place, without copying) to an [`Output`] (one weight per endpoint,
//! an optional IPVS scheduler and re-evaluation interval):
//!
//! ```ignore
//! #![no_std]
//! use switchyard_policy::{Input, Output, Error};
//! fn evaluate(input: &Input, out: &mut Output) -> Result<(), Error> { ... }
//! switchyard_policy::export_policy!(evaluate);
//! ```
//!
//! Evaluations allocate nothing: the input and output buffers are taken from fresh linear memory pages
//! and reused, and grow only when an input outgrows them.
#![no_std]

use core::arch::wasm32;

/// ABI version this SDK implements.
pub const MAJOR: u16 = 1;
pub const MINOR: u16 = 0;

const INPUT_HEADER_V10: usize = 120;
const RECORD_V10: usize = 104;
const OUTPUT_HEADER_V10: usize = 40;
/// Room after the weights for the scheduler (≤ 16 bytes) and its flags (≤ 4 names and 3 commas).
const OUTPUT_STRINGS_MAX: usize = 64;

/// The largest weight the host accepts.
pub const MAX_WEIGHT: u32 = 65535;

/// Protocols and Service types, as the input encodes them.
pub const TCP: u8 = 1;
pub const UDP: u8 = 2;
pub const SCTP: u8 = 3;
pub const CLUSTER_IP: u8 = 1;
pub const NODE_PORT: u8 = 2;
pub const LOAD_BALANCER: u8 = 3;
pub const EXTERNAL_NAME: u8 = 4;

/// Endpoint flags.
pub const FLAG_READY: u32 = 1 << 0;
pub const FLAG_SERVING: u32 = 1 << 1;
pub const FLAG_TERMINATING: u32 = 1 << 2;
pub const FLAG_LOCAL: u32 = 1 << 3;
pub const FLAG_SAME_ZONE: u32 = 1 << 4;
pub const FLAG_HINT_ZONE: u32 = 1 << 5;
pub const FLAG_HINT_NODE: u32 = 1 << 6;
pub const FLAG_AGE_KNOWN: u32 = 1 << 7;

/// Log levels.
pub const LEVEL_DEBUG: u32 = 0;
pub const LEVEL_INFO: u32 = 1;
pub const LEVEL_WARN: u32 = 2;
pub const LEVEL_ERROR: u32 = 3;

/// Why an evaluation failed: up to three static pieces, joined when logged (no allocation).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Error(pub &'static str, pub &'static str, pub &'static str);

impl Error {
    /// An error with a single message.
    pub const fn msg(m: &'static str) -> Error {
        Error(m, "", "")
    }
}

fn u16at(b: &[u8], i: usize) -> u16 {
    u16::from_le_bytes([b[i], b[i + 1]])
}

fn u32at(b: &[u8], i: usize) -> u32 {
    let mut v = [0u8; 4];
    v.copy_from_slice(&b[i..i + 4]);
    u32::from_le_bytes(v)
}

fn u64at(b: &[u8], i: usize) -> u64 {
    let mut v = [0u8; 8];
    v.copy_from_slice(&b[i..i + 8]);
    u64::from_le_bytes(v)
}

/// The string referenced at `at` (offset and length from the start of `b`), empty when out of range.
fn str_at(b: &[u8], at: usize) -> &[u8] {
    let (off, n) = (u32at(b, at) as usize, u32at(b, at + 4) as usize);
    match off.checked_add(n) {
        Some(end) if n > 0 && end <= b.len() => &b[off..end],
        _ => &[],
    }
}

/// One evaluation's input, read in place.
pub struct Input<'a> {
    b: &'a [u8],
    n: usize,
    ep_off: usize,
    rec: usize,
}

impl<'a> Input<'a> {
    /// Checks the input's header and returns a view of it.
    pub fn parse(b: &'a [u8]) -> Result<Input<'a>, Error> {
        if b.len() >= 2 && u16at(b, 0) != MAJOR {
            return Err(Error::msg("input ABI major version is not 1"));
        }
        if b.len() < INPUT_HEADER_V10 {
            return Err(Error::msg("input shorter than its header"));
        }
        let (hs, total) = (u32at(b, 4) as u64, u32at(b, 8) as u64);
        if hs < INPUT_HEADER_V10 as u64 || total != b.len() as u64 || hs > total {
            return Err(Error::msg("bad input header"));
        }
        let (n, off, rec) = (u32at(b, 12) as u64, u32at(b, 16) as u64, u32at(b, 20) as u64);
        if rec < RECORD_V10 as u64 || off < hs || off + n * rec > total {
            return Err(Error::msg("bad input record table"));
        }
        Ok(Input { b, n: n as usize, ep_off: off as usize, rec: rec as usize })
    }

    /// The evaluation time in Unix nanoseconds. Use it instead of a clock.
    pub fn now_unix_nano(&self) -> i64 {
        u64at(self.b, 32) as i64
    }
    pub fn namespace(&self) -> &'a [u8] {
        str_at(self.b, 40)
    }
    pub fn name(&self) -> &'a [u8] {
        str_at(self.b, 48)
    }
    pub fn port_name(&self) -> &'a [u8] {
        str_at(self.b, 56)
    }
    pub fn port(&self) -> u16 {
        u16at(self.b, 64)
    }
    /// TCP, UDP or SCTP.
    pub fn protocol(&self) -> u8 {
        self.b[66]
    }
    /// CLUSTER_IP, NODE_PORT, LOAD_BALANCER or EXTERNAL_NAME.
    pub fn service_type(&self) -> u8 {
        self.b[67]
    }
    /// 0 when there is none.
    pub fn node_port(&self) -> u16 {
        u16at(self.b, 68)
    }
    pub fn external_local(&self) -> bool {
        self.b[70] == 1
    }
    pub fn internal_local(&self) -> bool {
        self.b[71] == 1
    }
    /// This node's name and zone (the zone may be empty).
    pub fn node_name(&self) -> &'a [u8] {
        str_at(self.b, 72)
    }
    pub fn node_zone(&self) -> &'a [u8] {
        str_at(self.b, 80)
    }
    /// The policy's JSON parameters, empty when none; read them with [`param_uint`] and [`param_str`].
    pub fn params(&self) -> &'a [u8] {
        str_at(self.b, 88)
    }
    pub fn traffic_distribution(&self) -> &'a [u8] {
        str_at(self.b, 96)
    }
    pub fn scheduler_hint(&self) -> &'a [u8] {
        str_at(self.b, 104)
    }
    pub fn session_affinity(&self) -> bool {
        u32at(self.b, 112) & 1 != 0
    }
    /// The number of endpoints.
    pub fn len(&self) -> usize {
        self.n
    }
    pub fn is_empty(&self) -> bool {
        self.n == 0
    }
    /// Endpoint `i`, `i < len()`; it panics (traps) otherwise.
    pub fn endpoint(&self, i: usize) -> Endpoint<'a> {
        assert!(i < self.n);
        Endpoint { b: self.b, off: self.ep_off + i * self.rec }
    }
    /// The endpoints in order; index `i` of the iteration is weight `i` of the output.
    pub fn endpoints(&self) -> impl Iterator<Item = Endpoint<'a>> + 'a {
        let (b, off, rec) = (self.b, self.ep_off, self.rec);
        (0..self.n).map(move |i| Endpoint { b, off: off + i * rec })
    }
}

/// One candidate endpoint, read in place.
#[derive(Clone, Copy)]
pub struct Endpoint<'a> {
    b: &'a [u8],
    off: usize,
}

impl<'a> Endpoint<'a> {
    /// The address as 16 bytes (IPv4 mapped into IPv6).
    pub fn addr(&self) -> &'a [u8] {
        &self.b[self.off..self.off + 16]
    }
    pub fn port(&self) -> u16 {
        u16at(self.b, self.off + 16)
    }
    /// 4 or 6.
    pub fn family(&self) -> u8 {
        self.b[self.off + 18]
    }
    /// The FLAG_* bits; the methods below test them.
    pub fn flags(&self) -> u32 {
        u32at(self.b, self.off + 20)
    }
    pub fn ready(&self) -> bool {
        self.flags() & FLAG_READY != 0
    }
    pub fn serving(&self) -> bool {
        self.flags() & FLAG_SERVING != 0
    }
    pub fn terminating(&self) -> bool {
        self.flags() & FLAG_TERMINATING != 0
    }
    pub fn local(&self) -> bool {
        self.flags() & FLAG_LOCAL != 0
    }
    pub fn same_zone(&self) -> bool {
        self.flags() & FLAG_SAME_ZONE != 0
    }
    pub fn hinted_for_zone(&self) -> bool {
        self.flags() & FLAG_HINT_ZONE != 0
    }
    pub fn hinted_for_node(&self) -> bool {
        self.flags() & FLAG_HINT_NODE != 0
    }
    /// The stable identity, the same on every node and call.
    pub fn id(&self) -> u64 {
        u64at(self.b, self.off + 24)
    }
    /// How long this node has known the endpoint, in nanoseconds; None when unknown.
    pub fn age_ns(&self) -> Option<u64> {
        if self.flags() & FLAG_AGE_KNOWN != 0 {
            Some(u64at(self.b, self.off + 32))
        } else {
            None
        }
    }
    /// IPVS statistics of this node only (`active_conns` counts the connections through this node,
    /// not the endpoint's total), read every `policies.statisticsInterval` (10 s): an evaluation
    /// between two reads, one asked for with `set_reevaluate` or caused by a change, sees the last.
    pub fn active_conns(&self) -> u32 {
        u32at(self.b, self.off + 40)
    }
    pub fn inactive_conns(&self) -> u32 {
        u32at(self.b, self.off + 44)
    }
    pub fn conn_rate(&self) -> u32 {
        u32at(self.b, self.off + 48)
    }
    pub fn bytes_in_rate(&self) -> u64 {
        u64at(self.b, self.off + 56)
    }
    pub fn bytes_out_rate(&self) -> u64 {
        u64at(self.b, self.off + 64)
    }
    /// Where the endpoint runs (empty when unknown), and its topology hints, comma-separated.
    pub fn node_name(&self) -> &'a [u8] {
        str_at(self.b, self.off + 72)
    }
    pub fn zone(&self) -> &'a [u8] {
        str_at(self.b, self.off + 80)
    }
    pub fn hint_zones(&self) -> &'a [u8] {
        str_at(self.b, self.off + 88)
    }
    pub fn hint_nodes(&self) -> &'a [u8] {
        str_at(self.b, self.off + 96)
    }
}

/// One evaluation's result. Every weight starts at 0 (drain).
pub struct Output {
    weights: &'static mut [u32],
    scheduler: &'static str,
    flags: [&'static str; 4],
    nflags: usize,
    reevaluate_ms: u32,
}

impl Output {
    /// The number of weights, the input's number of endpoints.
    pub fn len(&self) -> usize {
        self.weights.len()
    }
    pub fn is_empty(&self) -> bool {
        self.weights.is_empty()
    }
    /// Sets endpoint `i`'s weight, capped at MAX_WEIGHT; 0 drains it.
    pub fn set_weight(&mut self, i: usize, w: u32) {
        self.weights[i] = if w > MAX_WEIGHT { MAX_WEIGHT } else { w };
    }
    pub fn weight(&self, i: usize) -> u32 {
        self.weights[i]
    }
    /// Asks for an IPVS scheduler (rr, wrr, lc, wlc, sh, mh, ...) and up to 4 flags (sh-port,
    /// sh-fallback, mh-port, mh-fallback).
    pub fn set_scheduler(&mut self, name: &'static str, flags: &[&'static str]) {
        self.scheduler = name;
        self.nflags = 0;
        for f in flags.iter().take(4) {
            self.flags[self.nflags] = f;
            self.nflags += 1;
        }
    }
    /// Asks to be evaluated again after `ms` milliseconds (1,000 to 3,600,000); 0: only on change.
    /// The statistics are no fresher for it: they are read every `policies.statisticsInterval`.
    pub fn set_reevaluate(&mut self, ms: u32) {
        self.reevaluate_ms = ms;
    }
}

/// A buffer carved from fresh linear memory pages.
struct Buf {
    ptr: usize,
    cap: usize,
}

static mut INPUT: Buf = Buf { ptr: 0, cap: 0 };
static mut OUTPUT: Buf = Buf { ptr: 0, cap: 0 };

/// Makes `b` at least `size` bytes, growing memory when needed; false when memory is exhausted. The
/// old region is abandoned (buffers only grow, and rarely).
fn reserve(b: &mut Buf, size: usize) -> bool {
    if b.cap >= size && b.ptr != 0 {
        return true;
    }
    let pages = (size.max(1) + 65535) / 65536;
    let old = wasm32::memory_grow(0, pages);
    if old == usize::MAX {
        return false;
    }
    b.ptr = old * 65536;
    b.cap = pages * 65536;
    true
}

/// The `sy_alloc` export: a buffer of at least `size` bytes for the input, 0 on failure.
pub fn alloc(size: u32) -> u32 {
    // SAFETY: wasm32 guests are single-threaded and the host never reenters an instance.
    let b = unsafe { &mut *core::ptr::addr_of_mut!(INPUT) };
    if reserve(b, size as usize) {
        b.ptr as u32
    } else {
        0
    }
}

#[link(wasm_import_module = "sy_v1")]
extern "C" {
    #[link_name = "log"]
    fn host_log(level: u32, ptr: *const u8, len: u32);
}

/// Sends a line to the daemon's log (rate limited by the host).
pub fn log(level: u32, msg: &[u8]) {
    if !msg.is_empty() {
        // SAFETY: the host only reads ptr..ptr+len of our memory.
        unsafe { host_log(level, msg.as_ptr(), msg.len() as u32) }
    }
}

static mut LOG_BUF: [u8; 256] = [0; 256];

/// Logs an Error's pieces joined, truncated to 256 bytes.
pub fn log_error(level: u32, e: &Error) {
    // SAFETY: single-threaded, not reentered.
    let buf = unsafe { &mut *core::ptr::addr_of_mut!(LOG_BUF) };
    let mut n = 0;
    for part in [e.0, e.1, e.2] {
        for &c in part.as_bytes() {
            if n < buf.len() {
                buf[n] = c;
                n += 1;
            }
        }
    }
    log(level, &buf[..n]);
}

/// The `sy_evaluate` export: runs `f` over the input at ptr..ptr+len and returns `out_ptr << 32 | len`,
/// or 0 (logging why) when the input is bad or `f` fails.
pub fn evaluate(ptr: u32, len: u32, f: fn(&Input, &mut Output) -> Result<(), Error>) -> u64 {
    match run(ptr, len, f) {
        Ok(v) => v,
        Err(e) => {
            log_error(LEVEL_WARN, &e);
            0
        }
    }
}

fn run(ptr: u32, len: u32, f: fn(&Input, &mut Output) -> Result<(), Error>) -> Result<u64, Error> {
    // SAFETY: the host wrote the input into our sy_alloc buffer, which nothing else touches during
    // the call; the output buffer is ours alone and outlives the call.
    let bytes = unsafe { core::slice::from_raw_parts(ptr as usize as *const u8, len as usize) };
    let input = Input::parse(bytes)?;
    let n = input.len();
    let out = unsafe { &mut *core::ptr::addr_of_mut!(OUTPUT) };
    if !reserve(out, OUTPUT_HEADER_V10 + 4 * n + OUTPUT_STRINGS_MAX) {
        return Err(Error::msg("out of memory for the output"));
    }
    let base = out.ptr as *mut u8;
    let weights = unsafe { core::slice::from_raw_parts_mut(base.add(OUTPUT_HEADER_V10) as *mut u32, n) };
    for w in weights.iter_mut() {
        *w = 0;
    }
    let mut o = Output { weights, scheduler: "", flags: [""; 4], nflags: 0, reevaluate_ms: 0 };
    f(&input, &mut o)?;
    let buf = unsafe { core::slice::from_raw_parts_mut(base, out.cap) };
    encode(&o, buf).map(|size| (out.ptr as u64) << 32 | size as u64)
}

fn put16(b: &mut [u8], i: usize, v: u16) {
    b[i..i + 2].copy_from_slice(&v.to_le_bytes());
}

fn put32(b: &mut [u8], i: usize, v: u32) {
    b[i..i + 4].copy_from_slice(&v.to_le_bytes());
}

/// Lays out the header and strings around the weights already in place; returns the output's size.
fn encode(o: &Output, b: &mut [u8]) -> Result<usize, Error> {
    let n = o.weights.len();
    let mut strings = o.scheduler.len();
    for (i, f) in o.flags[..o.nflags].iter().enumerate() {
        strings += f.len() + if i > 0 { 1 } else { 0 };
    }
    if strings > OUTPUT_STRINGS_MAX {
        return Err(Error::msg("scheduler and flags too long"));
    }
    let size = OUTPUT_HEADER_V10 + 4 * n + strings;
    for x in b[..OUTPUT_HEADER_V10].iter_mut() {
        *x = 0;
    }
    put16(b, 0, MAJOR);
    put16(b, 2, MINOR);
    put32(b, 4, OUTPUT_HEADER_V10 as u32);
    put32(b, 8, size as u32);
    put32(b, 12, n as u32);
    put32(b, 16, OUTPUT_HEADER_V10 as u32);
    put32(b, 20, o.reevaluate_ms);
    let mut at = OUTPUT_HEADER_V10 + 4 * n;
    if !o.scheduler.is_empty() {
        put32(b, 24, at as u32);
        put32(b, 28, o.scheduler.len() as u32);
        b[at..at + o.scheduler.len()].copy_from_slice(o.scheduler.as_bytes());
        at += o.scheduler.len();
    }
    if o.nflags > 0 {
        let start = at;
        for (i, f) in o.flags[..o.nflags].iter().enumerate() {
            if i > 0 {
                b[at] = b',';
                at += 1;
            }
            b[at..at + f.len()].copy_from_slice(f.as_bytes());
            at += f.len();
        }
        put32(b, 32, start as u32);
        put32(b, 36, (at - start) as u32);
    }
    Ok(size)
}

/// Defines the module's exports (`sy_abi_v1`, `sy_alloc`, `sy_evaluate`) for a policy function.
#[macro_export]
macro_rules! export_policy {
    ($f:path) => {
        #[no_mangle]
        pub extern "C" fn sy_abi_v1() {}

        #[no_mangle]
        pub extern "C" fn sy_alloc(size: u32) -> u32 {
            $crate::alloc(size)
        }

        #[no_mangle]
        pub extern "C" fn sy_evaluate(ptr: u32, len: u32) -> u64 {
            $crate::evaluate(ptr, len, $f)
        }
    };
}

#[panic_handler]
fn panic(_: &core::panic::PanicInfo) -> ! {
    wasm32::unreachable()
}

mod params;
pub use params::{
    param_bool, param_object, param_str, param_strings, param_uint, param_uints, StrIter, StrList, UintIter, UintList,
};
