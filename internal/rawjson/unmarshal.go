package rawjson

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"unicode"
)

// Unmarshal is json.Unmarshal(data, v) but for *field, the json.RawMessage
// of v that takes data's member name: when that member is most of data
// (an envelope's payload), *field is set to its value as a slice of data
// (it aliases data), which encoding/json would scan twice more and copy;
// a json.Decoder also grows a buffer by copies to the body's size
// (BenchmarkUnmarshal, a 10 MiB payload's envelope: the Decoder 64–170 ms
// and 44 MB, this 5 ms and 1 KB). data is validated in one pass
// (findMember) and the rest of the object goes to json.Unmarshal. Any
// other data (the member small, absent or repeated) goes to json.Unmarshal
// whole after that pass: it copies no more of it than encoding/json did
// (TestUnmarshalAllocatesNoMoreThanTheDecode).
func Unmarshal(data []byte, v any, name string, field *json.RawMessage) error {
	return unmarshal(data, v, name, field, false)
}

// UnmarshalStrict is Unmarshal with json.Decoder's DisallowUnknownFields:
// a member no field of v takes is refused, named in the error. The pass
// that validates data checks the members' names against v's fields, so no
// json.Decoder copies data into its buffer (a second copy of a body read
// whole: a review's 64 MiB body naming its payload twice peaked at 334 MB
// against the streamed decoder's 268); a v with a struct inside, whose
// members DisallowUnknownFields checks too, goes to a json.Decoder.
func UnmarshalStrict(data []byte, v any, name string, field *json.RawMessage) error {
	return unmarshal(data, v, name, field, true)
}

func unmarshal(data []byte, v any, name string, field *json.RawMessage, strict bool) error {
	var known []string
	if strict {
		var flat bool
		if known, flat = fieldNames(v); !flat {
			if _, err := findMember(data, name, nil); err != nil {
				return err
			}
			dec := json.NewDecoder(bytes.NewReader(data))
			dec.DisallowUnknownFields()
			return dec.Decode(v)
		}
	}
	f, err := findMember(data, name, known)
	if err != nil {
		return err
	}
	if f.unknown != nil {
		return fmt.Errorf("json: unknown field %q", *f.unknown)
	}
	if f.matches != 1 || len(f.value) < len(data)/2 {
		return json.Unmarshal(data, v)
	}
	if err := json.Unmarshal(f.without(data), v); err != nil {
		return err
	}
	*field = f.value
	return nil
}

// fieldNames is the names encoding/json decodes into the struct *v's
// fields (a tag's name, else the field's), or false when v is not a
// pointer to a struct, or one of its fields is embedded, holds a struct
// (whose members DisallowUnknownFields checks too) or has a name
// encoding/json would not take from its tag.
func fieldNames(v any) ([]string, bool) {
	t := reflect.TypeOf(v)
	if t == nil || t.Kind() != reflect.Pointer || t.Elem().Kind() != reflect.Struct {
		return nil, false
	}
	t = t.Elem()
	names := []string{}
	for i := range t.NumField() {
		sf := t.Field(i)
		if sf.Anonymous || holdsStruct(sf.Type) {
			return nil, false
		}
		tag := sf.Tag.Get("json")
		if !sf.IsExported() || tag == "-" {
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		if name == "" {
			name = sf.Name
		}
		if strings.ContainsFunc(name, func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) && r != '_' && r != '-' }) {
			return nil, false
		}
		names = append(names, name)
	}
	return names, true
}

var unmarshalerType = reflect.TypeFor[json.Unmarshaler]()

// holdsStruct reports whether a value of t holds a struct that
// encoding/json decodes member by member (not one with its own
// UnmarshalJSON, such as time.Time).
func holdsStruct(t reflect.Type) bool {
	for {
		if reflect.PointerTo(t).Implements(unmarshalerType) {
			return false
		}
		switch t.Kind() {
		case reflect.Pointer, reflect.Slice, reflect.Array, reflect.Map:
			t = t.Elem()
		case reflect.Struct:
			return true
		default:
			return false
		}
	}
}
