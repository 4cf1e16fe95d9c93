//go:build wasip1

package main

import (
	"bytes"
	"errors"
)

// paramString returns the string at key in the top level of the JSON
// object params. It reads like policy.ParamUint (the first occurrence of
// key counts; nothing after it is validated) and rejects a missing key and
// escape sequences, which the example does not need.
func paramString(params []byte, key string) ([]byte, error) {
	p := scanner{b: params}
	p.space()
	if p.eof() {
		return nil, errors.New("params: " + key + " is missing")
	}
	if !p.eat('{') {
		return nil, errors.New("params: not a JSON object")
	}
	p.space()
	if p.eat('}') {
		return nil, errors.New("params: " + key + " is missing")
	}
	for {
		p.space()
		k, ok := p.str()
		if !ok {
			return nil, errors.New("params: bad key")
		}
		p.space()
		if !p.eat(':') {
			return nil, errors.New("params: missing ':'")
		}
		p.space()
		if string(k) == key {
			v, ok := p.str()
			if !ok || bytes.IndexByte(v, '\\') >= 0 {
				return nil, errors.New("params: " + key + " is not a string without escapes")
			}
			return v, nil
		}
		if !p.skipValue(0) {
			return nil, errors.New("params: bad value")
		}
		p.space()
		if p.eat('}') {
			return nil, errors.New("params: " + key + " is missing")
		}
		if !p.eat(',') {
			return nil, errors.New("params: missing ','")
		}
	}
}

type scanner struct {
	b []byte
	i int
}

func (p *scanner) eof() bool { return p.i >= len(p.b) }

func (p *scanner) space() {
	for !p.eof() && (p.b[p.i] == ' ' || p.b[p.i] == '\t' || p.b[p.i] == '\n' || p.b[p.i] == '\r') {
		p.i++
	}
}

func (p *scanner) eat(c byte) bool {
	if !p.eof() && p.b[p.i] == c {
		p.i++
		return true
	}
	return false
}

// str reads a string and returns its raw (still escaped) content.
func (p *scanner) str() ([]byte, bool) {
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

// skipValue skips any JSON value, nested at most 64 deep.
func (p *scanner) skipValue(depth int) bool {
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
