package rawjson

import (
	"bytes"
	"encoding/json"
)

// Unmarshal is json.Unmarshal(data, v) but for *field, the json.RawMessage
// of v that takes data's member name: when that member is most of data
// (an envelope's payload), *field is set to its value as a slice of data
// (it aliases data), which encoding/json would scan twice more and copy;
// a json.Decoder also grows a buffer by copies to the body's size
// (BenchmarkUnmarshal, a 10 MiB payload's envelope: the Decoder 64–170 ms
// and 44 MB, this 5 ms and 1 KB). data is validated in one pass
// (findMember) and the rest of the object, a few hundred bytes, goes to
// encoding/json. Any other data (the member small, absent or repeated)
// goes to encoding/json whole after that pass, at its cost as before: a
// copy of the rest of a body of many small members would cost more than
// the payload's does (TestUnmarshalAllocatesNoMoreThanTheDecode).
func Unmarshal(data []byte, v any, name string, field *json.RawMessage) error {
	return unmarshal(data, v, name, field, false)
}

// UnmarshalStrict is Unmarshal with json.Decoder's DisallowUnknownFields:
// a member no field of v takes is refused, named in the error.
func UnmarshalStrict(data []byte, v any, name string, field *json.RawMessage) error {
	return unmarshal(data, v, name, field, true)
}

func unmarshal(data []byte, v any, name string, field *json.RawMessage, strict bool) error {
	f, err := findMember(data, name)
	if err != nil {
		return err
	}
	if f.matches != 1 || len(f.value) < len(data)/2 {
		return decode(data, v, strict)
	}
	if err := decode(f.without(data), v, strict); err != nil {
		return err
	}
	*field = f.value
	return nil
}

// decode is encoding/json's decode of data, a valid JSON object, into v.
func decode(data []byte, v any, strict bool) error {
	if !strict {
		return json.Unmarshal(data, v)
	}
	// A json.Decoder, the one way to refuse unknown fields (it copies data
	// into its buffer, which json.Unmarshal does not).
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}
