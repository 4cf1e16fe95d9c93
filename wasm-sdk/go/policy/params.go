package policy

import (
	"bytes"
	"errors"
)

// ParamUint returns the non-negative integer at key in the top level of
// the JSON object params, or def when params is empty or has no such key.
// It fails when params is not a JSON object or the value is not a
// non-negative integer below 2^32. It does not allocate.
func ParamUint(params []byte, key string, def uint32) (uint32, error) {
	p, found, err := seekParam(params, key)
	if err != nil || !found {
		return def, err
	}
	v, ok := p.uint()
	if !ok {
		return 0, errors.New("params: " + key + " is not an integer from 0 to 4294967295")
	}
	return v, nil
}

// ParamString returns the string at key in the top level of the JSON
// object params, and whether the key is there. It fails when params is not
// a JSON object or the value is not a string; escape sequences are
// refused. The result aliases params: it does not allocate.
func ParamString(params []byte, key string) (v []byte, found bool, err error) {
	p, found, err := seekParam(params, key)
	if err != nil || !found {
		return nil, found, err
	}
	v, ok := p.str()
	if !ok || bytes.IndexByte(v, '\\') >= 0 {
		return nil, true, errors.New("params: " + key + " is not a string without escapes")
	}
	return v, true, nil
}

// seekParam leaves a scanner at the value of the first occurrence of key
// in the top level of the JSON object params; found is false when params
// is empty or has no such key. Nothing after the value is validated.
func seekParam(params []byte, key string) (p jsonScanner, found bool, err error) {
	p = jsonScanner{b: params}
	p.space()
	if p.eof() {
		return p, false, nil
	}
	if !p.eat('{') {
		return p, false, errors.New("params: not a JSON object")
	}
	p.space()
	if p.eat('}') {
		return p, false, nil
	}
	for {
		p.space()
		k, ok := p.str()
		if !ok {
			return p, false, errors.New("params: bad key")
		}
		p.space()
		if !p.eat(':') {
			return p, false, errors.New("params: missing ':'")
		}
		p.space()
		if string(k) == key {
			return p, true, nil
		}
		if !p.skipValue(0) {
			return p, false, errors.New("params: bad value")
		}
		p.space()
		if p.eat('}') {
			return p, false, nil
		}
		if !p.eat(',') {
			return p, false, errors.New("params: missing ','")
		}
	}
}

type jsonScanner struct {
	b []byte
	i int
}

func (p *jsonScanner) eof() bool { return p.i >= len(p.b) }

func (p *jsonScanner) space() {
	for !p.eof() && (p.b[p.i] == ' ' || p.b[p.i] == '\t' || p.b[p.i] == '\n' || p.b[p.i] == '\r') {
		p.i++
	}
}

func (p *jsonScanner) eat(c byte) bool {
	if !p.eof() && p.b[p.i] == c {
		p.i++
		return true
	}
	return false
}

// str reads a string and returns its raw (still escaped) content.
func (p *jsonScanner) str() ([]byte, bool) {
	if !p.eat('"') {
		return nil, false
	}
	start := p.i
	for !p.eof() {
		switch p.b[p.i] {
		case '\\':
			p.i += 2
		case '"':
			p.i++
			return p.b[start : p.i-1], true
		default:
			p.i++
		}
	}
	return nil, false
}

// uint reads a non-negative integer that fits in 32 bits.
func (p *jsonScanner) uint() (uint32, bool) {
	start := p.i
	var v uint64
	for !p.eof() && p.b[p.i] >= '0' && p.b[p.i] <= '9' {
		v = v*10 + uint64(p.b[p.i]-'0')
		if v > 1<<32-1 {
			return 0, false
		}
		p.i++
	}
	if p.i == start || (p.b[start] == '0' && p.i-start > 1) {
		return 0, false
	}
	// A fraction or exponent makes it not an integer.
	if !p.eof() && (p.b[p.i] == '.' || p.b[p.i] == 'e' || p.b[p.i] == 'E') {
		return 0, false
	}
	return uint32(v), true
}

// skipValue skips any JSON value, nested at most 64 deep.
func (p *jsonScanner) skipValue(depth int) bool {
	if depth > 64 || p.eof() {
		return false
	}
	switch c := p.b[p.i]; {
	case c == '"':
		_, ok := p.str()
		return ok
	case c == '{' || c == '[':
		closing := byte('}')
		if c == '[' {
			closing = ']'
		}
		p.i++
		p.space()
		if p.eat(closing) {
			return true
		}
		for {
			p.space()
			if c == '{' {
				if _, ok := p.str(); !ok {
					return false
				}
				p.space()
				if !p.eat(':') {
					return false
				}
				p.space()
			}
			if !p.skipValue(depth + 1) {
				return false
			}
			p.space()
			if p.eat(closing) {
				return true
			}
			if !p.eat(',') {
				return false
			}
		}
	default:
		start := p.i
		for !p.eof() && (p.b[p.i] == '-' || p.b[p.i] == '+' || p.b[p.i] == '.' ||
			(p.b[p.i] >= '0' && p.b[p.i] <= '9') || (p.b[p.i] >= 'a' && p.b[p.i] <= 'z') || p.b[p.i] == 'E') {
			p.i++
		}
		return p.i > start
	}
}
