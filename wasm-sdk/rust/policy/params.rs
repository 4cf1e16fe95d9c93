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

/// Whether the byte at `i` of `b` would continue a literal ending before it.
fn continues(b: &[u8], i: usize) -> bool {
    i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_')
}

/// The boolean at `key` in the JSON object `params`, or `def` when params is empty or has no such
/// key. Fails when params is not an object or the value is not `true` or `false`.
pub fn param_bool(params: &[u8], key: &'static str, def: bool) -> Result<bool, Error> {
    match find(params, key)? {
        None => Ok(def),
        Some(p) => {
            let rest = &p.b[p.i..];
            if rest.starts_with(b"true") && !continues(p.b, p.i + 4) {
                Ok(true)
            } else if rest.starts_with(b"false") && !continues(p.b, p.i + 5) {
                Ok(false)
            } else {
                Err(Error("params: ", key, " is not true or false"))
            }
        }
    }
}

/// The JSON object at `key` in the JSON object `params` (raw bytes, to read nested keys from with
/// the other `param_` functions), None when params is empty or has no such key. Fails when params is
/// not an object or the value is not an object.
pub fn param_object<'a>(params: &'a [u8], key: &'static str) -> Result<Option<&'a [u8]>, Error> {
    match find(params, key)? {
        None => Ok(None),
        Some(mut p) => {
            let start = p.i;
            if p.eof() || p.b[p.i] != b'{' || !p.skip_value(0) {
                return Err(Error("params: ", key, " is not an object"));
            }
            Ok(Some(&p.b[start..p.i]))
        }
    }
}

const STRINGS: u8 = 0;
const UINTS: u8 = 1;

/// Finds the list at `key` and checks its elements, returning the list's bytes and length.
fn list<'a>(params: &'a [u8], key: &str, kind: u8) -> Result<Option<(&'a [u8], usize)>, Option<Error>> {
    let mut p = match find(params, key) {
        Err(e) => return Err(Some(e)),
        Ok(None) => return Ok(None),
        Ok(Some(p)) => p,
    };
    let start = p.i;
    if !p.eat(b'[') {
        return Err(None);
    }
    p.space();
    if p.eat(b']') {
        return Ok(Some((&p.b[start..p.i], 0)));
    }
    let mut n = 0;
    loop {
        p.space();
        let ok = if kind == STRINGS {
            matches!(p.str(), Some(s) if !s.contains(&b'\\'))
        } else {
            p.uint().is_some()
        };
        if !ok {
            return Err(None);
        }
        n += 1;
        p.space();
        if p.eat(b']') {
            return Ok(Some((&p.b[start..p.i], n)));
        }
        if !p.eat(b',') {
            return Err(None);
        }
    }
}

/// A JSON list of strings read in place from the parameters (each a view without escapes).
#[derive(Clone, Copy)]
pub struct StrList<'a> {
    raw: &'a [u8],
    n: usize,
}

/// Iterates over a [`StrList`].
pub struct StrIter<'a> {
    p: Scanner<'a>,
    left: usize,
}

impl<'a> Iterator for StrIter<'a> {
    type Item = &'a [u8];
    fn next(&mut self) -> Option<&'a [u8]> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        let s = self.p.str();
        self.p.space();
        self.p.eat(b',');
        self.p.space();
        s
    }
}

impl<'a> StrList<'a> {
    /// The number of strings.
    pub fn len(&self) -> usize {
        self.n
    }
    /// Whether the list is empty.
    pub fn is_empty(&self) -> bool {
        self.n == 0
    }
    /// The strings, in order.
    pub fn iter(&self) -> StrIter<'a> {
        let mut p = Scanner { b: self.raw, i: 1 };
        p.space();
        StrIter { p, left: self.n }
    }
    /// Whether one of the strings is `s`.
    pub fn contains(&self, s: &[u8]) -> bool {
        self.iter().any(|v| v == s)
    }
}

/// The list of strings at `key` in the JSON object `params` ({"excludeZones": ["a", "b"]}), None
/// when params is empty or has no such key. Fails when params is not an object or the value is not a
/// list of strings without escapes; every element is checked here.
pub fn param_strings<'a>(params: &'a [u8], key: &'static str) -> Result<Option<StrList<'a>>, Error> {
    match list(params, key, STRINGS) {
        Ok(v) => Ok(v.map(|(raw, n)| StrList { raw, n })),
        Err(Some(e)) => Err(e),
        Err(None) => Err(Error("params: ", key, " is not a list of strings without escapes")),
    }
}

/// A JSON list of non-negative integers below 2^32 read in place from the parameters.
#[derive(Clone, Copy)]
pub struct UintList<'a> {
    raw: &'a [u8],
    n: usize,
}

/// Iterates over a [`UintList`].
pub struct UintIter<'a> {
    p: Scanner<'a>,
    left: usize,
}

impl<'a> Iterator for UintIter<'a> {
    type Item = u32;
    fn next(&mut self) -> Option<u32> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        let v = self.p.uint();
        self.p.space();
        self.p.eat(b',');
        self.p.space();
        v
    }
}

impl<'a> UintList<'a> {
    /// The number of integers.
    pub fn len(&self) -> usize {
        self.n
    }
    /// Whether the list is empty.
    pub fn is_empty(&self) -> bool {
        self.n == 0
    }
    /// The integers, in order.
    pub fn iter(&self) -> UintIter<'a> {
        let mut p = Scanner { b: self.raw, i: 1 };
        p.space();
        UintIter { p, left: self.n }
    }
    /// Whether one of the integers is `v`.
    pub fn contains(&self, v: u32) -> bool {
        self.iter().any(|x| x == v)
    }
}

/// The list of integers at `key` in the JSON object `params` ({"ports": [80, 443]}), None when params
/// is empty or has no such key. Fails when params is not an object or the value is not a list of
/// integers from 0 to 4294967295; every element is checked here.
pub fn param_uints<'a>(params: &'a [u8], key: &'static str) -> Result<Option<UintList<'a>>, Error> {
    match list(params, key, UINTS) {
        Ok(v) => Ok(v.map(|(raw, n)| UintList { raw, n })),
        Err(Some(e)) => Err(e),
        Err(None) => Err(Error("params: ", key, " is not a list of integers from 0 to 4294967295")),
    }
}
