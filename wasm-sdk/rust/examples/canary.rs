//! canary: a weighted canary split (wasm-sdk/examples.md).
//! Parameters: {"canary": "zone=b" | "node=n2" | "cidr=10.0.1.0/24", "percent": 10}.
#![no_std]

use switchyard_policy::{param_str, param_uint, Endpoint, Error, Input, Output};

enum Selector<'a> {
    Zone(&'a [u8]),
    Node(&'a [u8]),
    Cidr { prefix: u32, mask: u32 },
}

impl<'a> Selector<'a> {
    fn parse(s: &'a [u8]) -> Result<Selector<'a>, Error> {
        if let Some(z) = s.strip_prefix(b"zone=") {
            return Ok(Selector::Zone(z));
        }
        if let Some(n) = s.strip_prefix(b"node=") {
            return Ok(Selector::Node(n));
        }
        if let Some(c) = s.strip_prefix(b"cidr=") {
            let (prefix, bits) = parse_cidr4(c).ok_or(Error::msg("params: canary cidr is not an IPv4 prefix a.b.c.d/len"))?;
            let mask = if bits == 0 { 0 } else { u32::MAX << (32 - bits) };
            return Ok(Selector::Cidr { prefix, mask });
        }
        Err(Error::msg("params: canary must be zone=<zone>, node=<node> or cidr=<a.b.c.d/len>"))
    }

    fn matches(&self, e: &Endpoint) -> bool {
        match *self {
            Selector::Zone(z) => e.zone() == z,
            Selector::Node(n) => e.node_name() == n,
            Selector::Cidr { prefix, mask } => {
                let a = e.addr();
                e.family() == 4 && u32::from_be_bytes([a[12], a[13], a[14], a[15]]) & mask == prefix & mask
            }
        }
    }
}

/// Parses a.b.c.d/len: decimal numbers without leading zeros.
fn parse_cidr4(s: &[u8]) -> Option<(u32, u32)> {
    let mut i = 0;
    let mut addr = 0u32;
    for k in 0..4 {
        addr = addr << 8 | number(s, &mut i, 255)?;
        let sep = if k == 3 { b'/' } else { b'.' };
        if i >= s.len() || s[i] != sep {
            return None;
        }
        i += 1;
    }
    let bits = number(s, &mut i, 32)?;
    if i != s.len() {
        return None;
    }
    Some((addr, bits))
}

/// Reads up to three decimal digits at s[*i..], without a leading zero, at most max.
fn number(s: &[u8], i: &mut usize, max: u32) -> Option<u32> {
    let start = *i;
    let mut v = 0u32;
    while *i < s.len() && s[*i].is_ascii_digit() && *i - start < 3 {
        v = v * 10 + (s[*i] - b'0') as u32;
        *i += 1;
    }
    if *i == start || (s[start] == b'0' && *i - start > 1) || v > max {
        return None;
    }
    Some(v)
}

fn share(percent: u32, n: u32) -> u32 {
    if percent == 0 {
        0
    } else {
        (percent * 10_000 / (100 * n)).max(1)
    }
}

fn evaluate(input: &Input, out: &mut Output) -> Result<(), Error> {
    let params = input.params();
    let sel = param_str(params, "canary")?.ok_or(Error::msg("params: canary is missing"))?;
    let sel = Selector::parse(sel)?;
    let percent = param_uint(params, "percent", 10)?;
    if percent > 100 {
        return Err(Error::msg("params: percent is above 100"));
    }
    let any_ready = input.endpoints().any(|e| e.ready());
    let usable = |e: &Endpoint| if any_ready { e.ready() } else { e.serving() && e.terminating() };
    let (mut nc, mut ns) = (0u32, 0u32);
    for e in input.endpoints() {
        if usable(&e) {
            if sel.matches(&e) {
                nc += 1;
            } else {
                ns += 1;
            }
        }
    }
    let (mut cw, mut sw) = (100, 100);
    if nc > 0 && ns > 0 {
        cw = share(percent, nc);
        sw = share(100 - percent, ns);
    }
    for (i, e) in input.endpoints().enumerate() {
        if usable(&e) {
            out.set_weight(i, if sel.matches(&e) { cw } else { sw });
        }
    }
    out.set_scheduler("wrr", &[]);
    Ok(())
}

switchyard_policy::export_policy!(evaluate);
