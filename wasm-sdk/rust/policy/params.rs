//! Allocation-free reading of top-level keys of the JSON parameters. The rules (shared by every SDK,
//! wasm-sdk/examples.md): the first occurrence of a key counts and nothing after it is validated.

use crate::Error;

struct Scanner<'a> {
    b: &'a [u8],
    i: usize,
}

impl<'a> Scanner<'a> {
    fn eof(&self) -> bool {
        self.i >= self.b.len()
    }

    fn space(&mut self) {
        while !self.eof() && matches!(self.b[self.i], b' ' | b'\t' | b'\n' | b'\r') {
            self.i += 1;
        }
    }

    fn eat(&mut self, c: u8) -> bool {
        if !self.eof() && self.b[self.i] == c {
            self.i += 1;
            return true;
        }
        false
    }

    /// Reads a string and returns its raw (still escaped) content.
    fn str(&mut self) -> Option<&'a [u8]> {
        if !self.eat(b'"') {
            return None;
        }
        let start = self.i;
        while !self.eof() {
            match self.b[self.i] {
                b'\\' => self.i += 2,
                b'"' => {
                    self.i += 1;
                    return Some(&self.b[start..self.i - 1]);
                }
                _ => self.i += 1,
            }
        }
        None
    }

    /// Reads a non-negative integer that fits in 32 bits.
    fn uint(&mut self) -> Option<u32> {
        let start = self.i;
        let mut v: u64 = 0;
        while !self.eof() && self.b[self.i].is_ascii_digit() {
            v = v * 10 + (self.b[self.i] - b'0') as u64;
            if v > u32::MAX as u64 {
                return None;
            }
            self.i += 1;
        }
        if self.i == start || (self.b[start] == b'0' && self.i - start > 1) {
            return None;
        }
        if !self.eof() && matches!(self.b[self.i], b'.' | b'e' | b'E') {
            return None;
        }
        Some(v as u32)
    }

    /// Skips any JSON value, nested at most 64 deep.
    fn skip_value(&mut self, depth: u32) -> bool {
        if depth > 64 || self.eof() {
            return false;
        }
        let c = self.b[self.i];
        if c == b'"' {
            return self.str().is_some();
        }
        if c == b'{' || c == b'[' {
            let closing = if c == b'[' { b']' } else { b'}' };
            self.i += 1;
            self.space();
            if self.eat(closing) {
                return true;
            }
            loop {
                self.space();
                if c == b'{' {
                    if self.str().is_none() {
                        return false;
                    }
                    self.space();
                    if !self.eat(b':') {
                        return false;
                    }
                    self.space();
                }
                if !self.skip_value(depth + 1) {
                    return false;
                }
                self.space();
                if self.eat(closing) {
                    return true;
                }
                if !self.eat(b',') {
                    return false;
                }
            }
        }
        let start = self.i;
        while !self.eof() {
            let c = self.b[self.i];
            if !(c == b'-' || c == b'+' || c == b'.' || c.is_ascii_digit() || c.is_ascii_lowercase() || c == b'E') {
                break;
            }
            self.i += 1;
        }
        self.i > start
    }
}

/// Finds `key` in the top level of the JSON object `params` and returns a scanner at its value, or
/// None when params is empty or has no such key.
fn find<'a>(params: &'a [u8], key: &str) -> Result<Option<Scanner<'a>>, Error> {
    let mut p = Scanner { b: params, i: 0 };
    p.space();
    if p.eof() {
        return Ok(None);
    }
    if !p.eat(b'{') {
        return Err(Error::msg("params: not a JSON object"));
    }
    p.space();
    if p.eat(b'}') {
        return Ok(None);
    }
    loop {
        p.space();
        let k = p.str().ok_or(Error::msg("params: bad key"))?;
        p.space();
        if !p.eat(b':') {
            return Err(Error::msg("params: missing ':'"));
        }
        p.space();
        if k == key.as_bytes() {
            return Ok(Some(p));
        }
        if !p.skip_value(0) {
            return Err(Error::msg("params: bad value"));
        }
        p.space();
        if p.eat(b'}') {
            return Ok(None);
        }
        if !p.eat(b',') {
            return Err(Error::msg("params: missing ','"));
        }
    }
}

/// The non-negative integer at `key` in the JSON object `params`, or `def` when params is empty or has
/// no such key. Fails when params is not an object or the value is not an integer from 0 to 2^32-1.
pub fn param_uint(params: &[u8], key: &'static str, def: u32) -> Result<u32, Error> {
    match find(params, key)? {
        None => Ok(def),
        Some(mut p) => p.uint().ok_or(Error("params: ", key, " is not an integer from 0 to 4294967295")),
    }
}

/// The string at `key` in the JSON object `params` (raw bytes), None when params is empty or has no
/// such key. Fails when params is not an object or the value is not a string without escapes.
pub fn param_str<'a>(params: &'a [u8], key: &'static str) -> Result<Option<&'a [u8]>, Error> {
    match find(params, key)? {
        None => Ok(None),
        Some(mut p) => match p.str() {
            Some(s) if !s.contains(&b'\\') => Ok(Some(s)),
            _ => Err(Error("params: ", key, " is not a string without escapes")),
        },
    }
}
