//! hostile: a misbehaving balancing policy for the kernel lab, written with
//! the Rust SDK (wasm-sdk/rust) and built by lab.mk's test-lab recipe into
//! testdata/hostile.wasm. Parameters: {"mode": "loop"} never returns (the
//! host's deadline must stop it), {"mode": "trap"} panics, which traps
//! (panic=abort: `unreachable`); any other mode declines.
#![no_std]

use switchyard_policy::{param_str, Error, Input, Output};

static mut SPINS: u32 = 0;

fn evaluate(input: &Input, _: &mut Output) -> Result<(), Error> {
    match param_str(input.params(), "mode")? {
        Some(b"loop") => loop {
            // A volatile store: the loop has a side effect, so the
            // optimiser cannot remove it.
            unsafe {
                let n = core::ptr::read_volatile(core::ptr::addr_of!(SPINS));
                core::ptr::write_volatile(core::ptr::addr_of_mut!(SPINS), n.wrapping_add(1));
            }
        },
        Some(b"trap") => panic!("hostile policy"),
        _ => Err(Error::msg("params: mode must be loop or trap")),
    }
}

switchyard_policy::export_policy!(evaluate);
