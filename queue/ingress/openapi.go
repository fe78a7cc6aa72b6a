package ingress

import (
	"context"
	"encoding/json"
	"fmt"

	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3gen"

	v1 "github.com/runplane/runplane/api/serverless/v1"
	"github.com/runplane/runplane/internal/httpjson"
)

// The OpenAPI document is generated, never kept by hand: the paths and
// answers from operations(), the schemas by reflecting the Go types the
// handlers encode (kin-openapi's openapi3gen), with struct tag doc as the
// description. kin-openapi is used because one maintained library gives
// the document model, the reflection and the validator (Spec validates
// what it built); oapi-codegen, which generates the test's client, reads
// the same model.

// dnsLabel is the pattern of a namespace and a pool name.
const dnsLabel = `^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`

// Spec is the ingress's OpenAPI 3.0 document for cfg (its limits appear
// in the schemas), validated.
func Spec(cfg Config) (*openapi3.T, error) {
	cfg = cfg.withDefaults()
	doc := &openapi3.T{
		OpenAPI: "3.0.3",
		Info: &openapi3.Info{Title: "runplane queue ingress", Version: "v1",
			Description: "Invoke serverless pools and follow invocations. Errors are RFC 9457 problem details " +
				"(application/problem+json); a wrong method on a known path is 405 with Allow; durations are in seconds."},
		// Relative: the document is served by the ingress it describes.
		Servers: openapi3.Servers{{URL: "/", Description: "the ingress serving this document"}},
		Paths:   openapi3.NewPaths(),
		Components: &openapi3.Components{Schemas: openapi3.Schemas{}, SecuritySchemes: openapi3.SecuritySchemes{
			"bearer": &openapi3.SecuritySchemeRef{Value: openapi3.NewJWTSecurityScheme().WithBearerFormat("").
				WithDescription("a token the apiserver accepts (TokenReview), of a caller RBAC lets invoke the pool (SubjectAccessReview)")},
		}},
		Security: openapi3.SecurityRequirements{{"bearer": []string{}}},
	}
	gen := openapi3gen.NewGenerator(
		openapi3gen.CreateComponentSchemas(openapi3gen.ExportComponentSchemasOptions{ExportComponentSchemas: true, ExportTopLevelSchema: true}),
		openapi3gen.SchemaCustomizer(customize))
	schema := func(v any) (*openapi3.SchemaRef, error) {
		ref, err := gen.NewSchemaRefForValue(v, doc.Components.Schemas)
		if err != nil {
			return nil, fmt.Errorf("schema of %T: %w", v, err)
		}
		return ref, nil
	}
	for _, op := range operations() {
		o := &openapi3.Operation{OperationID: op.id, Summary: op.summary, Description: op.description, Tags: []string{op.tag},
			Responses: openapi3.NewResponsesWithCapacity(len(op.responses))}
		if op.public {
			o.Security = &openapi3.SecurityRequirements{}
		}
		for _, name := range pathParams(op.path) {
			p, err := pathParam(name)
			if err != nil {
				return nil, err
			}
			o.Parameters = append(o.Parameters, &openapi3.ParameterRef{Value: p})
		}
		if op.body != nil {
			ref, err := schema(op.body)
			if err != nil {
				return nil, err
			}
			o.RequestBody = &openapi3.RequestBodyRef{Value: openapi3.NewRequestBody().WithRequired(true).
				WithDescription("exactly one JSON object: unknown fields and trailing data are refused (400)").WithJSONSchemaRef(ref)}
		}
		for _, r := range op.responses {
			resp := openapi3.NewResponse().WithDescription(r.description)
			if r.body != nil {
				ref, err := schema(r.body)
				if err != nil {
					return nil, err
				}
				resp.Content = openapi3.NewContentWithSchemaRef(ref, []string{contentType(r)})
			}
			for _, h := range r.headers {
				resp.Headers = openapi3.Headers{h: &openapi3.HeaderRef{Value: &openapi3.Header{Parameter: openapi3.Parameter{
					Description: "seconds to wait before retrying", Schema: openapi3.NewIntegerSchema().NewRef()}}}}
			}
			o.Responses.Set(strconv.Itoa(r.status), &openapi3.ResponseRef{Value: resp})
		}
		doc.AddOperation(op.path, op.method, o)
	}
	req := doc.Components.Schemas["InvokeRequest"]
	if req == nil || req.Value == nil {
		return nil, fmt.Errorf("schema InvokeRequest not generated")
	}
	limits(req.Value, "timeoutSeconds", cfg.MaxTimeoutSeconds,
		"execution time allowed, in seconds; a sync caller waits this long (0 or absent: the ingress's default, 300 unless configured)")
	limits(req.Value, "ttlSeconds", cfg.MaxTTLSeconds,
		"time allowed in the queue before dispatch, in seconds (0 or absent: the ingress's default, 600 unless configured)")
	req.Value.AdditionalProperties = openapi3.AdditionalProperties{Has: new(bool)}
	// The generator leaves its $refs unresolved: what is validated (and
	// served) is the document as a client loads it.
	b, err := json.Marshal(doc)
	if err != nil {
		return nil, fmt.Errorf("encode OpenAPI document: %w", err)
	}
	loaded, err := openapi3.NewLoader().LoadFromData(b)
	if err != nil {
		return nil, fmt.Errorf("load generated OpenAPI document: %w", err)
	}
	if err := loaded.Validate(context.Background()); err != nil {
		return nil, fmt.Errorf("generated OpenAPI document is invalid: %w", err)
	}
	return loaded, nil
}

// SpecJSON is Spec encoded, as served at /openapi.json.
func SpecJSON(cfg Config) ([]byte, error) {
	doc, err := Spec(cfg)
	if err != nil {
		return nil, err
	}
	b, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encode OpenAPI document: %w", err)
	}
	return b, nil
}

// limits sets a field's range; the description stays the same for every
// configuration (the generated client's comments come from it).
func limits(s *openapi3.Schema, field string, maxValue int, desc string) {
	p := s.Properties[field]
	if p == nil || p.Value == nil {
		return
	}
	p.Value.Min, p.Value.Max = new(float64), new(float64)
	*p.Value.Max = float64(maxValue)
	p.Value.Description = desc + "; the maximum is this ingress's configured limit"
}

func contentType(r response) string {
	if r.contentType != "" {
		return r.contentType
	}
	t := reflect.TypeOf(r.body)
	if t == reflect.TypeFor[httpjson.Problem]() {
		return httpjson.ProblemContentType
	}
	if t.Kind() == reflect.Struct {
		if f, ok := t.FieldByName("Problem"); ok && f.Anonymous && f.Type == reflect.TypeFor[httpjson.Problem]() {
			return httpjson.ProblemContentType
		}
	}
	return "application/json"
}

var paramRE = regexp.MustCompile(`\{([a-z]+)\}`)

func pathParams(path string) []string {
	var names []string
	for _, m := range paramRE.FindAllStringSubmatch(path, -1) {
		names = append(names, m[1])
	}
	return names
}

func pathParam(name string) (*openapi3.Parameter, error) {
	p := openapi3.NewPathParameter(name)
	switch name {
	case "namespace":
		p.Description = "the pool's namespace: pools and invocation IDs are scoped by it (400 when not a DNS-1123 label)"
		p.Schema = openapi3.NewStringSchema().WithPattern(dnsLabel).WithMaxLength(63).NewRef()
	case "pool":
		p.Description = "the runplane.io/pool label of a Deployment of the namespace (400 when not a DNS-1123 label)"
		p.Schema = openapi3.NewStringSchema().WithPattern(dnsLabel).WithMaxLength(63).NewRef()
	case "id":
		p.Description = "the invocation ID (400 when malformed, 404 when well-formed but unknown)"
		p.Schema = openapi3.NewStringSchema().WithPattern(idPattern.String()).NewRef()
	default:
		return nil, fmt.Errorf("path parameter {%s} has no schema", name)
	}
	return p, nil
}

var (
	durationType = reflect.TypeFor[time.Duration]()
	rawJSONType  = reflect.TypeFor[json.RawMessage]()
)

// customize adds what reflection alone does not know: descriptions (tag
// doc), the enums of the string types, which fields are required (those
// always encoded: no omitempty), and refuses a time.Duration (the API
// speaks seconds: convert it to a *Seconds field).
func customize(name string, t reflect.Type, tag reflect.StructTag, s *openapi3.Schema) error {
	if t == durationType {
		return fmt.Errorf("field %s is a time.Duration: the API's durations are seconds (a number field named *Seconds)", name)
	}
	switch t {
	case reflect.TypeFor[v1.State]():
		s.Enum = enum(v1.States)
	case reflect.TypeFor[v1.AttemptState]():
		s.Enum = enum(v1.AttemptStates)
	case reflect.TypeFor[v1.CallbackState]():
		s.Enum = enum(v1.CallbackStates)
	case reflect.TypeFor[v1.Mode]():
		s.Enum = enum(v1.Modes)
	case reflect.TypeFor[v1.CallbackEvent]():
		s.Enum = enum(v1.CallbackEvents)
	case rawJSONType:
		s.Description = "any JSON value"
	}
	if t.Kind() == reflect.Uint64 {
		s.Max = nil // 2^64-1 is not exact as a JSON number
	}
	if doc := tag.Get("doc"); doc != "" && t.Kind() != reflect.Struct {
		s.Description = doc
	}
	if name == "invocationID" && t.Kind() == reflect.String {
		s.Pattern = idPattern.String()
	}
	if t.Kind() == reflect.Struct && s.Properties != nil {
		s.Required = required(t)
	}
	return nil
}

// enum is values as a schema's enum.
func enum[T ~string](values []T) []any {
	out := make([]any, 0, len(values))
	for _, v := range values {
		out = append(out, string(v))
	}
	return out
}

// required lists the JSON names of t's fields encoding/json always writes.
func required(t reflect.Type) []string {
	var names []string
	for _, f := range reflect.VisibleFields(t) {
		if !f.IsExported() || f.Anonymous {
			continue
		}
		name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" || strings.Contains(opts, "omitempty") || strings.Contains(opts, "omitzero") {
			continue
		}
		if name == "" {
			name = f.Name
		}
		if f.Type.Kind() == reflect.Pointer {
			continue // nil encodes as null
		}
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}
