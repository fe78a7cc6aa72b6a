package rawjson

import (
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// genValue writes a random JSON value whose keys come from a small pool
// of spellings of few decoded keys (escapes, duplicates, bad UTF-8, HTML,
// U+2028) with random white space: shapes a byte-mutating fuzzer rarely
// builds (nested unsorted objects inside arrays inside objects).
func genValue(r *rand.Rand, b *strings.Builder, depth int) {
	ws := func() {
		if r.IntN(4) == 0 {
			b.WriteString([]string{" ", "\n", "\t", "\r\n ", "  "}[r.IntN(5)])
		}
	}
	strs := []string{`"a"`, `"\u0061"`, `"b"`, `"\u0062"`, `""`, `"a\u0000"`, `"ab"`, "\"\xff\"", `"\ufffd"`, "\"\xef\xbf\xbd\"",
		`"<"`, `"\u003c"`, `"\u2028"`, "\"\u2028\"", `"\ud800"`, `"\udc00\ud800"`, `"\ud83d\ude00"`, "\"\xf0\x9f\x98\x80\"", `"\/"`, `"/"`,
		`"é"`, `"\u00e9"`, `"e\u0301"`, `"\""`, `"\\"`, `"A"`, `"\u0041"`, "\"\x7f\"", `"\u007f"`, "\"\xed\xa0\x80\""}
	nums := []string{"0", "-0", "1E5", "1e+05", "1e400", "-1.0e-400", "12345678901234567890123456789", "0.10", "-0.0", "1E-0"}
	lits := []string{"true", "false", "null"}
	k := r.IntN(10)
	if depth > 6 {
		k = r.IntN(6)
	}
	switch {
	case k < 2:
		b.WriteString(strs[r.IntN(len(strs))])
	case k < 4:
		b.WriteString(nums[r.IntN(len(nums))])
	case k < 5:
		b.WriteString(lits[r.IntN(len(lits))])
	case k < 6:
		b.WriteString(strs[r.IntN(len(strs))])
	case k < 8:
		b.WriteString("{")
		n := r.IntN(6)
		for i := range n {
			if i > 0 {
				ws()
				b.WriteString(",")
			}
			ws()
			b.WriteString(strs[r.IntN(len(strs))])
			ws()
			b.WriteString(":")
			ws()
			genValue(r, b, depth+1)
			ws()
		}
		if n == 0 {
			ws()
		}
		b.WriteString("}")
	default:
		b.WriteString("[")
		n := r.IntN(5)
		for i := range n {
			if i > 0 {
				ws()
				b.WriteString(",")
			}
			ws()
			genValue(r, b, depth+1)
			ws()
		}
		if n == 0 {
			ws()
		}
		b.WriteString("]")
	}
}

// TestWriteSortedIsDecodeAndMarshalOnGeneratedValues compares WriteSorted
// with the decode and encode on RAWJSON_N (default 20000) generated values.
func TestWriteSortedIsDecodeAndMarshalOnGeneratedValues(t *testing.T) {
	n := 20000
	if s := os.Getenv("RAWJSON_N"); s != "" {
		var err error
		n, err = strconv.Atoi(s)
		require.NoError(t, err)
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range n {
		var b strings.Builder
		genValue(r, &b, 0)
		in := []byte(b.String())
		want, err := decodedForm(in)
		require.NoError(t, err, "%q", in)
		got, err := sorted(in)
		require.NoError(t, err, "%q", in)
		require.Equal(t, string(want), string(got), "%q", in)
	}
}

// TestWriteSortedBigObjects: objects of thousands of unsorted, repeated
// keys among small ones (deduplicated before they close, past dedupeAt
// members).
func TestWriteSortedBigObjects(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for range 200 {
		var b strings.Builder
		b.WriteString("[")
		for o := range 1 + r.IntN(6) {
			if o > 0 {
				b.WriteString(",")
			}
			n := r.IntN(6000)
			b.WriteString("{")
			for i := range n {
				if i > 0 {
					b.WriteString(",")
				}
				b.WriteString(`"k` + strconv.Itoa(r.IntN(n+1)) + `":`)
				if r.IntN(50) == 0 {
					genValue(r, &b, 3)
				} else {
					b.WriteString(strconv.Itoa(i))
				}
			}
			b.WriteString("}")
		}
		b.WriteString("]")
		in := []byte(b.String())
		want, err := decodedForm(in)
		require.NoError(t, err)
		got, err := sorted(in)
		require.NoError(t, err)
		require.Equal(t, string(want), string(got))
	}
}
