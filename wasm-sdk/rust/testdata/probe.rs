//! probe: a test module (not an example) that reads every input field through the SDK and folds
//! them into each endpoint's weight, so wasm-sdk/conformance can check every accessor against the Go
//! SDK. The fold: h = (h ^ x) * 16777619 over u32 words; a u64 is its low then high half; a string
//! is its length then its bytes; endpoint i starts from the service's hash and i.
#![no_std]

use switchyard_policy::{Error, Input, Output};

struct H(u32);

impl H {
    fn w(&mut self, x: u32) {
        self.0 = (self.0 ^ x).wrapping_mul(16_777_619);
    }
    fn d(&mut self, x: u64) {
        self.w(x as u32);
        self.w((x >> 32) as u32);
    }
    fn s(&mut self, b: &[u8]) {
        self.w(b.len() as u32);
        for &c in b {
            self.w(c as u32);
        }
    }
}

fn evaluate(input: &Input, out: &mut Output) -> Result<(), Error> {
    let mut h = H(2_166_136_261);
    h.d(input.now_unix_nano() as u64);
    h.s(input.namespace());
    h.s(input.name());
    h.s(input.port_name());
    h.w(input.port() as u32);
    h.w(input.protocol() as u32);
    h.w(input.service_type() as u32);
    h.w(input.node_port() as u32);
    h.w(input.external_local() as u32);
    h.w(input.internal_local() as u32);
    h.s(input.node_name());
    h.s(input.node_zone());
    h.s(input.params());
    h.s(input.traffic_distribution());
    h.s(input.scheduler_hint());
    h.w(input.session_affinity() as u32);
    h.w(input.len() as u32);
    let service = h.0;
    for (i, e) in input.endpoints().enumerate() {
        let mut h = H(service);
        h.w(i as u32);
        for &c in e.addr() {
            h.w(c as u32);
        }
        h.w(e.port() as u32);
        h.w(e.family() as u32);
        h.w(e.flags());
        h.w(e.ready() as u32 | (e.serving() as u32) << 1 | (e.terminating() as u32) << 2 | (e.local() as u32) << 3);
        h.w(e.same_zone() as u32 | (e.hinted_for_zone() as u32) << 1 | (e.hinted_for_node() as u32) << 2);
        h.d(e.id());
        h.d(e.age_ns().unwrap_or(u64::MAX));
        h.w(e.active_conns());
        h.w(e.inactive_conns());
        h.w(e.conn_rate());
        h.d(e.bytes_in_rate());
        h.d(e.bytes_out_rate());
        h.s(e.node_name());
        h.s(e.zone());
        h.s(e.hint_zones());
        h.s(e.hint_nodes());
        out.set_weight(i, h.0 & 0xffff);
    }
    Ok(())
}

switchyard_policy::export_policy!(evaluate);
