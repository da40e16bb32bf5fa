package api

import (
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Params are a task's parameters. On the wire they are strings; job files may
// write numbers, booleans and lists, which are read as their string form
// (lists joined with commas), so that every client sends the same thing.
type Params map[string]string

// UnmarshalJSON accepts strings, numbers, booleans and lists of them.
func (p *Params) UnmarshalJSON(b []byte) error {
	// What is on the wire is strings only; that decodes directly (every
	// agent decodes every command's params).
	var plain map[string]string
	if json.Unmarshal(b, &plain) == nil {
		*p = plain
		return nil
	}
	var raw map[string]any
	d := json.NewDecoder(strings.NewReader(string(b)))
	d.UseNumber()
	if err := d.Decode(&raw); err != nil {
		return fmt.Errorf("params: %w", err)
	}
	if raw == nil {
		*p = nil
		return nil
	}
	out := make(Params, len(raw))
	for k, v := range raw {
		s, err := scalarString(v)
		if err != nil {
			return fmt.Errorf("params.%s: %w", k, err)
		}
		out[k] = s
	}
	*p = out
	return nil
}

// UnmarshalYAML accepts scalars and sequences of scalars.
func (p *Params) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.MappingNode {
		return fmt.Errorf("line %d: params must be a mapping of name: value", n.Line)
	}
	out := make(Params, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		switch v.Kind {
		case yaml.ScalarNode:
			out[k.Value] = v.Value
		case yaml.SequenceNode:
			items := make([]string, 0, len(v.Content))
			for _, it := range v.Content {
				if it.Kind != yaml.ScalarNode {
					return fmt.Errorf("line %d: params.%s: list items must be plain values", it.Line, k.Value)
				}
				items = append(items, it.Value)
			}
			out[k.Value] = strings.Join(items, ",")
		default:
			return fmt.Errorf("line %d: params.%s must be a value or a list of values", v.Line, k.Value)
		}
	}
	*p = out
	return nil
}

func scalarString(v any) (string, error) {
	switch x := v.(type) {
	case string:
		return x, nil
	case json.Number:
		return x.String(), nil
	case bool:
		return strconv.FormatBool(x), nil
	case nil:
		return "", nil
	case []any:
		items := make([]string, 0, len(x))
		for _, it := range x {
			s, err := scalarString(it)
			if err != nil {
				return "", err
			}
			if _, nested := it.([]any); nested {
				return "", fmt.Errorf("nested lists are not allowed")
			}
			items = append(items, s)
		}
		return strings.Join(items, ","), nil
	}
	return "", fmt.Errorf("must be a string, number, boolean or list, not %T", v)
}

// Keys returns the parameter names, sorted.
func (p Params) Keys() []string {
	keys := make([]string, 0, len(p))
	for k := range p {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
