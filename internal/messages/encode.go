package messages

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// Encode is the JSON of an Invocation or a Dispatch as stored in the
// invocation stream. json.Marshal escapes <, > and & (and U+2028/U+2029)
// for HTML, six bytes for one: a payload of '<' would be stored six times
// its size, beyond what its namespace is charged. The readers decode JSON,
// to which an escape and its character are the same.
func Encode(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, fmt.Errorf("encode %T: %w", v, err)
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}
