package rawjson

import (
	"unicode/utf16"
	"unicode/utf8"
)

// appendUnquoted appends to dst the value of raw, a valid JSON string
// (quotes included), as encoding/json decodes it: an invalid UTF-8 byte
// and an escaped surrogate that is not half of a pair become U+FFFD.
// encoding/json decodes a string only inside Unmarshal, whose state is
// allocated and whose input is validated again at each call: one call a
// key took 3.3 times the old decode's CPU and 2.7 times its allocations
// on 10 MiB of {"\u0061":0,...}. No maintained library decodes escapes as
// encoding/json does (encoding/json/v2's jsontext.AppendUnquote refuses
// invalid UTF-8, and is behind GOEXPERIMENT=jsonv2 in Go 1.26); the
// fuzzer holds the two equal.
func appendUnquoted(dst, raw []byte) []byte {
	s := raw[1 : len(raw)-1]
	for i := 0; i < len(s); {
		switch c := s[i]; {
		case c == '\\' && s[i+1] == 'u':
			r := hex4(s[i+2:])
			i += 6
			if utf16.IsSurrogate(r) {
				r2 := rune(-1)
				if i+6 <= len(s) && s[i] == '\\' && s[i+1] == 'u' {
					r2 = hex4(s[i+2:])
				}
				if r = utf16.DecodeRune(r, r2); r != utf8.RuneError {
					i += 6
				}
			}
			dst = utf8.AppendRune(dst, r)
		case c == '\\':
			dst = append(dst, unescape(s[i+1]))
			i += 2
		case c < utf8.RuneSelf:
			dst = append(dst, c)
			i++
		default:
			r, size := utf8.DecodeRune(s[i:])
			dst = utf8.AppendRune(dst, r)
			i += size
		}
	}
	return dst
}

// unescape is the byte of the escape \c (not \u): " \ / b f n r t.
func unescape(c byte) byte {
	switch c {
	case 'b':
		return '\b'
	case 'f':
		return '\f'
	case 'n':
		return '\n'
	case 'r':
		return '\r'
	case 't':
		return '\t'
	}
	return c // " \ /
}

// hex4 is the value of the 4 hex digits at h[0:4] (validated).
func hex4(h []byte) rune {
	var r rune
	for _, c := range h[:4] {
		switch {
		case c <= '9':
			c -= '0'
		case c >= 'a':
			c -= 'a' - 10
		default:
			c -= 'A' - 10
		}
		r = r<<4 | rune(c)
	}
	return r
}
