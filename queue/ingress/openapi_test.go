package ingress

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"slices"
	"sort"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var update = flag.Bool("update", false, "rewrite testdata/openapi-v1.json from the generated document (additions only: the test still fails on a removal)")

const committedSpec = "testdata/openapi-v1.json"

// TestOpenAPICompatible: /v1 changes only additively. The committed
// document (testdata/openapi-v1.json) must be contained in the generated
// one: every path, operation, status, parameter, schema and property it
// names is still there with the same type; enums and response fields keep
// their values; a request body requires nothing more. Descriptions may
// change. -update commits the generated document once it passes.
func TestOpenAPICompatible(t *testing.T) {
	b, err := SpecJSON(Config{})
	require.NoError(t, err)
	var gen, old map[string]any
	require.NoError(t, json.Unmarshal(b, &gen))
	committed, err := os.ReadFile(committedSpec)
	require.NoError(t, err, "go test ./queue/ingress/ -run TestOpenAPICompatible -update")
	require.NoError(t, json.Unmarshal(committed, &old))

	problems := incompatible("", old, gen, requestSchemas(old))
	require.Empty(t, problems, "the /v1 API changed incompatibly with %s (only additions are allowed; a breaking change needs a /v2)", committedSpec)
	if *update {
		require.NoError(t, os.WriteFile(committedSpec, append(b, '\n'), 0o644))
		return
	}
	assert.JSONEq(t, string(committed), string(b), "the document has additions: go test ./queue/ingress/ -run TestOpenAPICompatible -update")
}

// TestOpenAPICompatibleCatches: the check finds a removed property, a
// changed type, a removed enum value and a newly required request field.
func TestOpenAPICompatibleCatches(t *testing.T) {
	schema := func(props map[string]any, required ...any) map[string]any {
		return map[string]any{"components": map[string]any{"schemas": map[string]any{"InvokeRequest": map[string]any{
			"type": "object", "properties": props, "required": required}}}}
	}
	old := schema(map[string]any{"mode": map[string]any{"type": "string", "enum": []any{"sync", "async"}}, "n": map[string]any{"type": "integer"}}, "mode")
	req := map[string]bool{"InvokeRequest": true}
	for name, gen := range map[string]map[string]any{
		"property removed": schema(map[string]any{"mode": map[string]any{"type": "string", "enum": []any{"sync", "async"}}}, "mode"),
		"type changed":     schema(map[string]any{"mode": map[string]any{"type": "string", "enum": []any{"sync", "async"}}, "n": map[string]any{"type": "string"}}, "mode"),
		"enum value gone":  schema(map[string]any{"mode": map[string]any{"type": "string", "enum": []any{"sync"}}, "n": map[string]any{"type": "integer"}}, "mode"),
		"required added":   schema(map[string]any{"mode": map[string]any{"type": "string", "enum": []any{"sync", "async"}}, "n": map[string]any{"type": "integer"}}, "mode", "n"),
	} {
		assert.NotEmpty(t, incompatible("", old, gen, req), name)
	}
	added := schema(map[string]any{"mode": map[string]any{"type": "string", "enum": []any{"sync", "async", "later"}, "description": "new"},
		"n": map[string]any{"type": "integer"}, "m": map[string]any{"type": "string"}}, "mode")
	assert.Empty(t, incompatible("", old, added, req), "additions")
}

// requestSchemas are the component schemas request bodies refer to.
func requestSchemas(doc map[string]any) map[string]bool {
	out := map[string]bool{}
	paths, _ := doc["paths"].(map[string]any)
	for _, item := range paths {
		ops, _ := item.(map[string]any)
		for _, op := range ops {
			body, _ := op.(map[string]any)["requestBody"].(map[string]any)
			content, _ := body["content"].(map[string]any)
			for _, mt := range content {
				ref, _ := mt.(map[string]any)["schema"].(map[string]any)["$ref"].(string)
				if ref != "" {
					out[ref[len("#/components/schemas/"):]] = true
				}
			}
		}
	}
	return out
}

// incompatible lists where gen does not contain old (at JSON path at).
// Objects: every key of old is in gen (descriptions and summaries may
// differ); "enum" and a response schema's "required": old's values are in
// gen's; a request schema's "required": gen's are in old's; other values
// are equal.
func incompatible(at string, old, gen any, requests map[string]bool) []string {
	switch o := old.(type) {
	case map[string]any:
		g, ok := gen.(map[string]any)
		if !ok {
			return []string{fmt.Sprintf("%s: was an object, is %T", at, gen)}
		}
		var out []string
		keys := make([]string, 0, len(o))
		for k := range o {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			if k == "description" || k == "summary" {
				continue
			}
			gv, ok := g[k]
			if !ok {
				out = append(out, fmt.Sprintf("%s/%s: removed", at, k))
				continue
			}
			switch {
			case k == "enum":
				out = append(out, subset(at+"/enum", o[k], gv)...)
			case k == "required" && requests[schemaName(at)]:
				out = append(out, subset(at+"/required (a request requires more)", gv, o[k])...)
			case k == "required":
				out = append(out, subset(at+"/required", o[k], gv)...)
			default:
				out = append(out, incompatible(at+"/"+k, o[k], gv, requests)...)
			}
		}
		return out
	case []any:
		g, ok := gen.([]any)
		if !ok || len(g) < len(o) {
			return []string{fmt.Sprintf("%s: was %v, is %v", at, old, gen)}
		}
		var out []string
		for i := range o {
			out = append(out, incompatible(fmt.Sprintf("%s/%d", at, i), o[i], g[i], requests)...)
		}
		return out
	default:
		if old != gen {
			return []string{fmt.Sprintf("%s: was %v, is %v", at, old, gen)}
		}
		return nil
	}
}

// schemaName is the component schema at names ("" when at is not one).
func schemaName(at string) string {
	const prefix = "/components/schemas/"
	if len(at) <= len(prefix) || at[:len(prefix)] != prefix {
		return ""
	}
	return at[len(prefix):]
}

// subset lists the values of sub missing from super (JSON arrays).
func subset(at string, sub, super any) []string {
	s, _ := sub.([]any)
	p, _ := super.([]any)
	var out []string
	for _, v := range s {
		if !slices.Contains(p, v) {
			out = append(out, fmt.Sprintf("%s: %v", at, v))
		}
	}
	return out
}
