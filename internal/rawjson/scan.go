package rawjson

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"unicode/utf8"
)

// scanned is what scanString learns of a string.
type scanned struct {
	end     int  // offset after its closing quote
	decoded bool // its bytes between the quotes are its decoded value: no escape, valid UTF-8
	plain   bool // and json.Marshal writes it as it is: none of < > & U+2028 U+2029 either
}

// scanString reads the string at v[i] ('"'), as encoding/json's scanner
// does: no control character, only its escapes.
func scanString(v []byte, i int) (scanned, error) {
	s := scanned{decoded: true, plain: true}
	for j := i + 1; j < len(v); {
		j = asIsRun(v, j)
		if j >= len(v) {
			break
		}
		c := v[j]
		if c < utf8.RuneSelf {
			if asIs[c] {
				j++
				continue
			}
			switch {
			case c == '"':
				s.end = j + 1
				return s, nil
			case c == '\\':
				s.decoded, s.plain = false, false
				n, err := escape(v, j)
				if err != nil {
					return s, err
				}
				j += n
			case c < ' ':
				return s, invalid(v, j, "in string literal")
			default: // < > &
				s.plain = false
				j++
			}
			continue
		}
		r, size := utf8.DecodeRune(v[j:])
		switch {
		case r == utf8.RuneError && size == 1:
			s.decoded, s.plain = false, false
		case r == '\u2028' || r == '\u2029':
			s.plain = false
		}
		j += size
	}
	return s, errEnd
}

// asIsRun skips from v[j] the 8-byte words that are all asIs ASCII,
// testing a word at once (the usual bit tricks for "has a byte less than
// n" and "has a zero byte"): a base64 body is most of a payload, and
// byte by byte its scan cost twice its SHA-256 (10 MiB: 17 ms against
// 8–9; a word at a time 8 ms, BenchmarkRequestHash in queue/ingress).
func asIsRun(v []byte, j int) int {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	hasZero := func(x uint64) uint64 { return (x - ones) & ^x & highs }
	for ; j+8 <= len(v); j += 8 {
		x := binary.LittleEndian.Uint64(v[j:])
		if x&highs|(x-ones*' ')&^x&highs|
			hasZero(x^(ones*'"'))|hasZero(x^(ones*'\\'))|
			hasZero(x^(ones*'<'))|hasZero(x^(ones*'>'))|hasZero(x^(ones*'&')) != 0 {
			break
		}
	}
	return j
}

// escape is the length of the escape at v[j] ('\\').
func escape(v []byte, j int) (int, error) {
	if j+1 >= len(v) {
		return 0, errEnd
	}
	switch v[j+1] {
	case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
		return 2, nil
	case 'u':
		for k := j + 2; k < j+6; k++ {
			if k >= len(v) {
				return 0, errEnd
			}
			if !isHex(v[k]) {
				return 0, invalid(v, k, "in \\u hexadecimal character escape")
			}
		}
		return 6, nil
	default:
		return 0, invalid(v, j+1, "in string escape code")
	}
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// scanNumber reads the number at v[i] by JSON's grammar, which is
// encoding/json's: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func scanNumber(v []byte, i int) (int, error) {
	if v[i] == '-' {
		i++
	}
	switch {
	case i < len(v) && v[i] == '0':
		i++
	case i < len(v) && '1' <= v[i] && v[i] <= '9':
		i = digits(v, i)
	case i >= len(v):
		return 0, errEnd
	default:
		return 0, invalid(v, i, "in numeric literal")
	}
	if i < len(v) && v[i] == '.' {
		if j := digits(v, i+1); j > i+1 {
			i = j
		} else if j >= len(v) {
			return 0, errEnd
		} else {
			return 0, invalid(v, j, "after decimal point in numeric literal")
		}
	}
	if i < len(v) && (v[i] == 'e' || v[i] == 'E') {
		i++
		if i < len(v) && (v[i] == '+' || v[i] == '-') {
			i++
		}
		if j := digits(v, i); j > i {
			i = j
		} else if j >= len(v) {
			return 0, errEnd
		} else {
			return 0, invalid(v, j, "in exponent of numeric literal")
		}
	}
	return i, nil
}

func digits(v []byte, i int) int {
	for i < len(v) && '0' <= v[i] && v[i] <= '9' {
		i++
	}
	return i
}

func skipSpace(v []byte, i int) int {
	for i < len(v) && (v[i] == ' ' || v[i] == '\t' || v[i] == '\n' || v[i] == '\r') {
		i++
	}
	return i
}

// The grammar's errors reach callers (an ingress's 400 quotes them), so
// they say what is wrong in encoding/json's words, without the package's
// name.
var errEnd = errors.New("unexpected end of JSON input")

var errDepth = fmt.Errorf("nesting deeper than %d", maxDepth)

func invalid(v []byte, i int, where string) error {
	return fmt.Errorf("invalid character %q %s at offset %d", v[i], where, i)
}

// asIs is the ASCII json.Marshal writes in a string as it is: not a
// control character, ", \, <, > or &.
var asIs = func() (t [utf8.RuneSelf]bool) {
	for c := ' '; c < utf8.RuneSelf; c++ {
		t[c] = !bytes.ContainsRune([]byte(`"\<>&`), c)
	}
	return t
}()
