//! paramprobe: a test module (not an example) that reads the parameters through every helper of the
//! SDK and reports what it read as the weights of the first 12 endpoints, so wasm-sdk/conformance
//! can compare the SDKs' parameter helpers and their messages (layout: wasm-sdk/conformance/
//! params_test.go, paramReference).
#![no_std]

use switchyard_policy::{
    param_bool, param_object, param_str, param_strings, param_uint, param_uints, Error, Input, Output,
};

fn evaluate(input: &Input, out: &mut Output) -> Result<(), Error> {
    let mut w = [0u32; 12];
    let p = input.params();
    w[0] = param_uint(p, "u", 7)?;
    w[1] = param_bool(p, "b", false)? as u32;
    w[2] = param_bool(p, "t", true)? as u32;
    if let Some(s) = param_str(p, "s")? {
        w[3] = 1 + s.len() as u32;
        w[4] = s.first().copied().unwrap_or(0) as u32;
    }
    if let Some(ss) = param_strings(p, "ss")? {
        w[5] = 1 + ss.len() as u32;
        w[6] = ss.iter().map(|v| v.len() as u32).sum();
        w[7] = ss.contains(b"zone-b") as u32;
    }
    if let Some(us) = param_uints(p, "us")? {
        w[8] = 1 + us.len() as u32;
        w[9] = us.iter().fold(0u32, |a, v| a.wrapping_add(v));
        w[10] = us.contains(443) as u32;
    }
    if let Some(o) = param_object(p, "o")? {
        w[11] = 1 + (param_uint(o, "u", 5)? & 0x7fff);
    }
    for i in 0..core::cmp::min(input.len(), w.len()) {
        out.set_weight(i, w[i] & 0xffff);
    }
    Ok(())
}

switchyard_policy::export_policy!(evaluate);
