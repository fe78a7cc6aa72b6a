package rawjson

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// adversarial builds a payload of about n bytes of one shape a tenant
// controls.
func adversarial(shape string, n int) []byte {
	var b strings.Builder
	rep := func(open, item, sep, closing string) {
		b.WriteString(open)
		for i := 0; b.Len() < n; i++ {
			if i > 0 {
				b.WriteString(sep)
			}
			b.WriteString(item)
		}
		b.WriteString(closing)
	}
	switch shape {
	case "emptyobjs": // plain: written as it is
		rep("[", "{}", ",", "]")
	case "emptyobjs-spaced":
		rep("[", "{}", ", ", "]")
	case "dupkeys":
		rep("{", `"a":0`, ",", "}")
	case "dupkeys-escaped":
		rep("{", `"\u0061":0`, ",", "}")
	case "escaped-strings":
		rep("[", `"\u0061"`, ",", "]")
	case "html-strings":
		rep("[", `"<"`, ",", "]")
	case "small-unsorted-objs":
		rep("[", `{"b":0,"a":0}`, ",", "]")
	case "distinct-keys-rev":
		b.WriteString("{")
		for i := 0; b.Len() < n; i++ {
			if i > 0 {
				b.WriteString(",")
			}
			fmt.Fprintf(&b, `"%09d":0`, 999999999-i)
		}
		b.WriteString("}")
	case "envelope-members": // an envelope of many small members
		rep(`{"payload":0,`, `"n":0`, ",", "}")
	case "envelope-named": // the payload's name, repeated
		rep("{", `"payload":0`, ",", "}")
	case "envelope-alternating":
		rep("{", `"payload":0,"n":0`, ",", "}")
	case "envelope-named-twice": // a big payload named twice: no cut
		b.WriteString(`{"Payload":0,"payload":"` + strings.Repeat("QUJD", n/4) + `"}`)
	case "deep":
		for b.Len() < n {
			b.WriteString("[" + strings.Repeat("[", 9990) + strings.Repeat("]", 9990) + "]")
		}
		s := b.String()
		b.Reset()
		b.WriteString("[" + strings.ReplaceAll(s, "][", "],[") + "]")
	default:
		panic(shape)
	}
	return []byte(b.String())
}

// TestMeasureShape measures one implementation on one shape in its own
// process, run by hand (RAWJSON_SHAPE, RAWJSON_IMPL=old|new, RAWJSON_MIB)
// under /usr/bin/time -v for the peak RSS:
//
//	RAWJSON_SHAPE=dupkeys RAWJSON_IMPL=new RAWJSON_MIB=20 /usr/bin/time -v go test ./internal/rawjson/ -run TestMeasureShape -count=1 -v
func TestMeasureShape(t *testing.T) {
	shape, impl := os.Getenv("RAWJSON_SHAPE"), os.Getenv("RAWJSON_IMPL")
	if shape == "" {
		t.Skip("RAWJSON_SHAPE not set: a measurement run by hand")
	}
	mib, err := strconv.Atoi(os.Getenv("RAWJSON_MIB"))
	require.NoError(t, err)
	in := adversarial(shape, mib<<20)
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	start := time.Now()
	h := sha256.New()
	switch impl {
	case "old":
		b, err := decodedForm(in)
		require.NoError(t, err)
		h.Write(b)
	case "new":
		require.NoError(t, WriteSorted(h, in))
	}
	el := time.Since(start)
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	fmt.Printf("RESULT shape=%s impl=%s in=%dMiB time=%v alloc=%dMiB sum=%x\n", shape, impl, len(in)>>20, el.Round(time.Millisecond),
		(after.TotalAlloc-before.TotalAlloc)>>20, h.Sum(nil)[:4])
}

// TestWriteSortedAllocatesNoMoreThanTheDecode: a tenant controls the
// payload (up to payloads.maxBytes, 64 MiB by default, in a queue Pod
// limited to 1 GiB), so WriteSorted must not need more memory than the
// decode and encode it replaced, whatever the shape. It did: every
// object was indexed (48 bytes, even one written as it is) and every
// member of an open object held until it closed (56 bytes, even a
// repeated key, which the old map kept once); 4 MiB of {"a":0,"a":0,...}
// allocated 190 MiB against the decode's 26, [{},{},...] 321 against 231.
// Peak RSS over the input's, 20 MiB: {"a":0,...} +800 MB against +16,
// [{},...] +1,227 MB against +635 (TestMeasureShape). A key with escapes
// was decoded by json.Unmarshal, a decoder's state allocated for each:
// {"\u0061":0,...} 65 MiB against 27.
func TestWriteSortedAllocatesNoMoreThanTheDecode(t *testing.T) {
	for _, shape := range []string{"dupkeys", "dupkeys-escaped", "emptyobjs", "emptyobjs-spaced", "small-unsorted-objs", "escaped-strings", "html-strings"} {
		t.Run(shape, func(t *testing.T) {
			in := adversarial(shape, 4<<20)
			old := allocated(t, func() error { _, err := decodedForm(in); return err })
			now := allocated(t, func() error { return WriteSorted(io.Discard, in) })
			assert.LessOrEqual(t, now, old, "%s: WriteSorted allocated %d MiB, the decode and encode %d MiB, for %d MiB of input",
				shape, now>>20, old>>20, len(in)>>20)
		})
	}
}

// TestUnmarshalAllocatesNoMoreThanTheDecode: the ingress decodes a
// tenant's body with UnmarshalStrict, which must not need more memory
// than the json.Decoder it replaced, whatever the shape. A first version
// held 48 bytes per member and decoded a copy of the rest: a 32 MiB body
// of {"payload":0,"":0,…} peaked at 1,353 MB RSS against the Decoder's
// 237 (4 MiB of envelope-members: 20 MiB allocated against 16); a second
// gave a payload named twice to a json.Decoder, a copy of a body already
// read whole (64 MiB: 334 MB against 268).
func TestUnmarshalAllocatesNoMoreThanTheDecode(t *testing.T) {
	for _, shape := range []string{"envelope-members", "envelope-named", "envelope-alternating", "envelope-named-twice"} {
		t.Run(shape, func(t *testing.T) {
			in := adversarial(shape, 4<<20)
			for _, c := range []struct {
				name      string
				reference func([]byte, any) error
				unmarshal func([]byte, any, string, *json.RawMessage) error
			}{
				{"strict", decodeStrict, UnmarshalStrict},
				{"lenient", json.Unmarshal, Unmarshal},
			} {
				old := allocated(t, func() error { var e envelope; return c.reference(in, &e) })
				now := allocated(t, func() error { var e envelope; return c.unmarshal(in, &e, "payload", &e.Payload) })
				// 1 KiB for the pass's own few small allocations.
				assert.LessOrEqual(t, now, old+1<<10, "%s %s: %d KiB allocated, encoding/json %d KiB, for %d KiB of input",
					shape, c.name, now>>10, old>>10, len(in)>>10)
			}
		})
	}
}

// allocated is the bytes f allocates (it must succeed).
func allocated(t *testing.T, f func() error) uint64 {
	t.Helper()
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	require.NoError(t, f())
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}
