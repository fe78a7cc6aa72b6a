package admgen

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
)

// raws are template text written into the YAML after it is encoded: while
// the encoder runs, a plain token stands for each (the encoder would quote
// template actions, and a block cannot be one scalar).
type raws struct {
	inlines map[string]string
	blocks  map[string]func(indent int) string
}

func (r *raws) token() string {
	return fmt.Sprintf("ADMGEN_RAW%dX", len(r.inlines)+len(r.blocks))
}

// inline is text in place of a scalar.
func (r *raws) inline(text string) string {
	t := r.token()
	r.inlines[t] = text
	return t
}

// block is lines in place of a whole "key: value" line, at its indent.
func (r *raws) block(lines func(indent int) string) string {
	t := r.token()
	r.blocks[t] = lines
	return t
}

// document is obj as one YAML document of the template: its metadata
// replaced by meta, patch's changes made, and every string that holds a
// placeholder rendered by the template.
func document(obj any, kind string, meta func(indent int) string, patch func(map[string]any, *raws)) (string, error) {
	var tree map[string]any
	b, err := json.Marshal(obj)
	if err == nil {
		err = json.Unmarshal(b, &tree)
	}
	raw := &raws{inlines: map[string]string{}, blocks: map[string]func(int) string{}}
	if err == nil {
		delete(tree, "status")
		tree["apiVersion"], tree["kind"] = admissionregistrationv1.SchemeGroupVersion.String(), kind
		tree["metadata"] = raw.block(meta)
		if patch != nil {
			patch(tree, raw)
		}
		err = substitute(tree, raw)
	}
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err == nil {
		err = errors.Join(enc.Encode(tree), enc.Close())
	}
	if err != nil {
		return "", fmt.Errorf("%s: %w", kind, err)
	}
	lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
	for i, line := range lines {
		for tok, block := range raw.blocks {
			if key, ok := strings.CutSuffix(strings.TrimLeft(line, " "), ": "+tok); ok && !strings.ContainsAny(key, " -") {
				lines[i] = block(len(line) - len(strings.TrimLeft(line, " ")))
			}
		}
	}
	out := strings.Join(lines, "\n") + "\n"
	for tok, text := range raw.inlines {
		out = strings.ReplaceAll(out, tok, text)
	}
	if strings.Contains(out, "ADMGEN_") {
		return "", fmt.Errorf("%s: a placeholder is left in the output, the Go definitions changed it (update hack/admgen):\n%s", kind, out)
	}
	return "---\n" + out, nil
}

// substitute replaces every string of the tree that holds a placeholder by
// the template action that renders it, quoted: the chart's values may hold
// any character. A string with "{{" would be read as a template action.
func substitute(node any, raw *raws) error {
	var err error
	each := func(v any, set func(string)) {
		if s, ok := v.(string); ok && err == nil {
			s, err = render(s, raw)
			set(s)
		} else if err == nil {
			err = substitute(v, raw)
		}
	}
	switch n := node.(type) {
	case map[string]any:
		for k, v := range n {
			each(v, func(s string) { n[k] = s })
		}
	case []any:
		for i, v := range n {
			each(v, func(s string) { n[i] = s })
		}
	}
	return err
}

// render is s, or the template that prints it with its placeholders'
// values: {{ print `literal` (action) `literal` | quote }}.
func render(s string, raw *raws) (string, error) {
	if strings.Contains(s, "{{") {
		return "", fmt.Errorf("%q holds {{, which the chart would read as a template action", s)
	}
	var parts []string
	rest := s
	phs := placeholders()
	for {
		at, which := -1, -1
		for i, p := range phs {
			if j := strings.Index(rest, p.text); j >= 0 && (at < 0 || j < at) {
				at, which = j, i
			}
		}
		if at < 0 {
			break
		}
		parts = append(parts, literal(rest[:at]), "("+phs[which].action+")")
		rest = rest[at+len(phs[which].text):]
	}
	if len(parts) == 0 {
		return s, nil
	}
	parts = slices.DeleteFunc(append(parts, literal(rest)), func(p string) bool { return p == "``" })
	if slices.ContainsFunc(parts, func(p string) bool { return strings.Count(p, "`") > 2 }) {
		return "", fmt.Errorf("%q holds a backquote, which ends a template's raw string", s)
	}
	if len(parts) == 1 { // the placeholder alone
		return raw.inline("{{ " + parts[0] + " | quote }}"), nil
	}
	return raw.inline("{{ print " + strings.Join(parts, " ") + " | quote }}"), nil
}

// literal is s as a template's raw string.
func literal(s string) string { return "`" + s + "`" }
