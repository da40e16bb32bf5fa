package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"regexp"
	"strings"
	"sync"

	toml "github.com/pelletier/go-toml/v2"
	"go.yaml.in/yaml/v3"
	"gopkg.in/ini.v1"
)

// --- INI ----------------------------------------------------------------

// iniMu guards ini.v1's package-level layout switches, which render sets
// for each file.
var iniMu sync.Mutex

type iniDoc struct {
	f *ini.File
	// spaced: the file writes "key = value" (else "key=value").
	spaced bool
}

var spacedKey = regexp.MustCompile(`(?m)^[ \t]*[^#;\[\s=][^=\n]*[ \t]=`)
var tightKey = regexp.MustCompile(`(?m)^[ \t]*[^#;\[\s=][^=\n]*[^ \t=]=`)

func parseINI(data string) (doc, error) {
	// Inline comments are left in values: ini.v1 would otherwise cut
	// "a = x # y" to "x" and the rewrite would lose " # y"; a trailing
	// backslash is a character, not a continuation, so a value read back
	// is the value written.
	f, err := ini.LoadSources(ini.LoadOptions{IgnoreInlineComment: true, IgnoreContinuation: true}, []byte(data))
	if err != nil {
		return nil, err
	}
	return &iniDoc{f: f, spaced: spacedKey.MatchString(data) || !tightKey.MatchString(data)}, nil
}

func iniPath(path []string) (section, key string) {
	if len(path) == 1 {
		return ini.DefaultSection, path[0]
	}
	return strings.Join(path[:len(path)-1], "."), path[len(path)-1]
}

func (d *iniDoc) get(path []string) (string, bool, error) {
	s, k := iniPath(path)
	sec, err := d.f.GetSection(s)
	if err != nil || !sec.HasKey(k) {
		return "", false, nil
	}
	return sec.Key(k).String(), true, nil
}

func (d *iniDoc) set(path []string, v value) (bool, error) {
	s, k := iniPath(path)
	if sec, err := d.f.GetSection(s); err == nil && sec.HasKey(k) && sec.Key(k).String() == v.text {
		return false, nil
	}
	sec := d.f.Section(s)
	if sec.HasKey(k) {
		sec.Key(k).SetValue(v.text)
		return true, nil
	}
	if _, err := sec.NewKey(k, v.text); err != nil {
		return false, fmt.Errorf("add %s: %w", k, err)
	}
	return true, nil
}

func (d *iniDoc) del(path []string) (bool, error) {
	s, k := iniPath(path)
	sec, err := d.f.GetSection(s)
	if err != nil || !sec.HasKey(k) {
		return false, nil
	}
	sec.DeleteKey(k)
	return true, nil
}

func (d *iniDoc) render() (string, error) {
	iniMu.Lock()
	defer iniMu.Unlock()
	// Aligning every "=" in a section (PrettyFormat) would rewrite lines
	// the edit did not touch.
	ini.PrettyFormat = false
	ini.PrettyEqual = d.spaced
	var buf bytes.Buffer
	if _, err := d.f.WriteTo(&buf); err != nil {
		return "", fmt.Errorf("render ini: %w", err)
	}
	return buf.String(), nil
}

// --- YAML ---------------------------------------------------------------

type yamlDoc struct {
	root   yaml.Node
	indent int
}

var yamlIndent = regexp.MustCompile(`(?m)^[^\s#-][^\n]*:[ \t]*\n([ ]+)\S`)

func parseYAML(data string) (doc, error) {
	d := &yamlDoc{indent: 2}
	if m := yamlIndent.FindStringSubmatch(data); m != nil {
		d.indent = len(m[1])
	}
	if err := yaml.Unmarshal([]byte(data), &d.root); err != nil {
		return nil, err
	}
	if d.root.Kind == 0 {
		d.root = yaml.Node{Kind: yaml.DocumentNode, Content: []*yaml.Node{{Kind: yaml.MappingNode, Tag: "!!map"}}}
	}
	if len(d.root.Content) != 1 || d.root.Content[0].Kind != yaml.MappingNode {
		return nil, errors.New("the document is not a mapping")
	}
	return d, nil
}

// mapping walks to the mapping holding path's last key, creating missing
// mappings when create is set; nil when it does not exist.
func (d *yamlDoc) mapping(path []string, create bool) (*yaml.Node, error) {
	m := d.root.Content[0]
	for i, k := range path[:len(path)-1] {
		_, v := yamlFind(m, k)
		switch {
		case v == nil && !create:
			return nil, nil
		case v == nil:
			v = &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
			m.Content = append(m.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: k}, v)
		case v.Kind != yaml.MappingNode:
			return nil, fmt.Errorf("%s is not a mapping", strings.Join(path[:i+1], "."))
		}
		m = v
	}
	return m, nil
}

func yamlFind(m *yaml.Node, key string) (int, *yaml.Node) {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return i, m.Content[i+1]
		}
	}
	return -1, nil
}

func (d *yamlDoc) get(path []string) (string, bool, error) {
	m, err := d.mapping(path, false)
	if err != nil || m == nil {
		return "", false, err
	}
	_, v := yamlFind(m, path[len(path)-1])
	if v == nil {
		return "", false, nil
	}
	if v.Kind == yaml.ScalarNode {
		return v.Value, true, nil
	}
	out, err := yaml.Marshal(v)
	return strings.TrimSpace(string(out)), true, err
}

var yamlTags = map[string]string{"string": "!!str", "int": "!!int", "float": "!!float", "bool": "!!bool"}

func (d *yamlDoc) set(path []string, v value) (bool, error) {
	m, err := d.mapping(path, true)
	if err != nil {
		return false, err
	}
	tag := yamlTags[v.typ]
	_, old := yamlFind(m, path[len(path)-1])
	if old == nil {
		m.Content = append(m.Content,
			&yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: path[len(path)-1]},
			&yaml.Node{Kind: yaml.ScalarNode, Tag: tag, Value: v.text})
		return true, nil
	}
	if old.Kind != yaml.ScalarNode {
		return false, fmt.Errorf("%s holds a %s, not a single value", strings.Join(path, "."), kindName(old.Kind))
	}
	if old.ShortTag() == tag && old.Value == v.text {
		return false, nil
	}
	// Keep the value's own style (quotes), unless it stops being a
	// string, and its comments, which live on the node.
	if tag != "!!str" {
		old.Style &^= yaml.DoubleQuotedStyle | yaml.SingleQuotedStyle
	}
	old.Tag, old.Value = tag, v.text
	return true, nil
}

func kindName(k yaml.Kind) string {
	switch k {
	case yaml.MappingNode:
		return "mapping"
	case yaml.SequenceNode:
		return "sequence"
	case yaml.AliasNode:
		return "alias"
	}
	return "node"
}

func (d *yamlDoc) del(path []string) (bool, error) {
	m, err := d.mapping(path, false)
	if err != nil || m == nil {
		return false, err
	}
	i, _ := yamlFind(m, path[len(path)-1])
	if i < 0 {
		return false, nil
	}
	m.Content = append(m.Content[:i], m.Content[i+2:]...)
	return true, nil
}

func (d *yamlDoc) render() (string, error) {
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(d.indent)
	if err := enc.Encode(&d.root); err != nil {
		return "", fmt.Errorf("render yaml: %w", err)
	}
	if err := enc.Close(); err != nil {
		return "", fmt.Errorf("render yaml: %w", err)
	}
	return buf.String(), nil
}

// --- JSON ---------------------------------------------------------------

// jnode is a JSON value with object keys in file order.
type jnode struct {
	keys  []string // object
	vals  []*jnode // object values or array items
	isObj bool
	isArr bool
	raw   json.RawMessage // scalar
}

type jsonDoc struct {
	root    *jnode
	indent  string
	newline bool
}

var jsonIndent = regexp.MustCompile(`^[\[{]\s*?\n([ \t]+)\S`)

func parseJSON(data string) (doc, error) {
	d := &jsonDoc{indent: "  ", newline: true}
	if strings.TrimSpace(data) == "" {
		d.root = &jnode{isObj: true}
		return d, nil
	}
	trimmed := strings.TrimLeft(data, " \t\r\n")
	if m := jsonIndent.FindStringSubmatch(trimmed); m != nil {
		d.indent = m[1]
	} else if !strings.Contains(strings.TrimSpace(data), "\n") {
		d.indent = "" // a one-line file stays one line
	}
	d.newline = strings.HasSuffix(data, "\n")
	dec := json.NewDecoder(strings.NewReader(data))
	dec.UseNumber()
	root, err := jsonRead(dec, 0)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("more than one JSON value in the file")
	}
	if !root.isObj {
		return nil, errors.New("the document is not an object")
	}
	d.root = root
	return d, nil
}

// maxJSONDepth is the deepest nesting parseJSON takes. The decoder's Token
// API has no limit of its own and jsonRead recurses once per level: a file
// of nothing but '[' would otherwise overflow the goroutine stack, a fatal
// error that takes the whole agent down.
const maxJSONDepth = 1000

func jsonRead(dec *json.Decoder, depth int) (*jnode, error) {
	if depth > maxJSONDepth {
		return nil, fmt.Errorf("nested more than %d levels deep", maxJSONDepth)
	}
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch t := tok.(type) {
	case json.Delim:
		n := &jnode{isObj: t == '{', isArr: t == '['}
		for dec.More() {
			if n.isObj {
				kt, err := dec.Token()
				if err != nil {
					return nil, err
				}
				k, _ := kt.(string)
				n.keys = append(n.keys, k)
			}
			v, err := jsonRead(dec, depth+1)
			if err != nil {
				return nil, err
			}
			n.vals = append(n.vals, v)
		}
		if _, err := dec.Token(); err != nil { // the closing delimiter
			return nil, err
		}
		return n, nil
	default:
		raw, err := json.Marshal(t)
		if err != nil {
			return nil, err
		}
		return &jnode{raw: raw}, nil
	}
}

func (n *jnode) find(k string) int {
	for i, key := range n.keys {
		if key == k {
			return i
		}
	}
	return -1
}

func (n *jnode) write(buf *bytes.Buffer) {
	switch {
	case n.isObj:
		buf.WriteByte('{')
		for i, k := range n.keys {
			if i > 0 {
				buf.WriteByte(',')
			}
			kb, _ := json.Marshal(k)
			buf.Write(kb)
			buf.WriteByte(':')
			n.vals[i].write(buf)
		}
		buf.WriteByte('}')
	case n.isArr:
		buf.WriteByte('[')
		for i, v := range n.vals {
			if i > 0 {
				buf.WriteByte(',')
			}
			v.write(buf)
		}
		buf.WriteByte(']')
	default:
		buf.Write(n.raw)
	}
}

func (d *jsonDoc) object(path []string, create bool) (*jnode, error) {
	n := d.root
	for i, k := range path[:len(path)-1] {
		j := n.find(k)
		switch {
		case j < 0 && !create:
			return nil, nil
		case j < 0:
			c := &jnode{isObj: true}
			n.keys, n.vals = append(n.keys, k), append(n.vals, c)
			n = c
		case !n.vals[j].isObj:
			return nil, fmt.Errorf("%s is not an object", strings.Join(path[:i+1], "."))
		default:
			n = n.vals[j]
		}
	}
	return n, nil
}

func (d *jsonDoc) get(path []string) (string, bool, error) {
	o, err := d.object(path, false)
	if err != nil || o == nil {
		return "", false, err
	}
	j := o.find(path[len(path)-1])
	if j < 0 {
		return "", false, nil
	}
	v := o.vals[j]
	var s string
	if !v.isObj && !v.isArr && json.Unmarshal(v.raw, &s) == nil {
		return s, true, nil
	}
	var buf bytes.Buffer
	v.write(&buf)
	return buf.String(), true, nil
}

func (d *jsonDoc) set(path []string, v value) (bool, error) {
	o, err := d.object(path, true)
	if err != nil {
		return false, err
	}
	raw, err := json.Marshal(v.native)
	if err != nil {
		return false, err
	}
	k := path[len(path)-1]
	j := o.find(k)
	if j < 0 {
		o.keys, o.vals = append(o.keys, k), append(o.vals, &jnode{raw: raw})
		return true, nil
	}
	old := o.vals[j]
	if old.isObj || old.isArr {
		return false, fmt.Errorf("%s holds an object or array, not a single value", strings.Join(path, "."))
	}
	if jsonEqual(old.raw, raw) {
		return false, nil
	}
	old.raw = raw
	return true, nil
}

// jsonEqual compares scalars by value, so "1.0" and "1" or "\u0041" and
// "A" in the file are not a change.
func jsonEqual(a, b json.RawMessage) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return bytes.Equal(a, b)
	}
	return reflect.DeepEqual(x, y)
}

func (d *jsonDoc) del(path []string) (bool, error) {
	o, err := d.object(path, false)
	if err != nil || o == nil {
		return false, err
	}
	j := o.find(path[len(path)-1])
	if j < 0 {
		return false, nil
	}
	o.keys = append(o.keys[:j], o.keys[j+1:]...)
	o.vals = append(o.vals[:j], o.vals[j+1:]...)
	return true, nil
}

func (d *jsonDoc) render() (string, error) {
	var compact bytes.Buffer
	d.root.write(&compact)
	out := compact
	if d.indent != "" {
		out = bytes.Buffer{}
		if err := json.Indent(&out, compact.Bytes(), "", d.indent); err != nil {
			return "", fmt.Errorf("render json: %w", err)
		}
	}
	if d.newline {
		out.WriteByte('\n')
	}
	return out.String(), nil
}

// --- TOML ---------------------------------------------------------------

type tomlDoc struct {
	m map[string]any
}

func parseTOML(data string) (doc, error) {
	d := &tomlDoc{m: map[string]any{}}
	if err := toml.Unmarshal([]byte(data), &d.m); err != nil {
		return nil, err
	}
	return d, nil
}

func (d *tomlDoc) table(path []string, create bool) (map[string]any, error) {
	m := d.m
	for i, k := range path[:len(path)-1] {
		v, ok := m[k]
		switch {
		case !ok && !create:
			return nil, nil
		case !ok:
			c := map[string]any{}
			m[k] = c
			m = c
		default:
			c, isMap := v.(map[string]any)
			if !isMap {
				return nil, fmt.Errorf("%s is not a table", strings.Join(path[:i+1], "."))
			}
			m = c
		}
	}
	return m, nil
}

func (d *tomlDoc) get(path []string) (string, bool, error) {
	t, err := d.table(path, false)
	if err != nil || t == nil {
		return "", false, err
	}
	v, ok := t[path[len(path)-1]]
	if !ok {
		return "", false, nil
	}
	switch v.(type) {
	case map[string]any, []any:
		out, err := json.Marshal(v)
		return string(out), true, err
	}
	return fmt.Sprint(v), true, nil
}

func (d *tomlDoc) set(path []string, v value) (bool, error) {
	t, err := d.table(path, true)
	if err != nil {
		return false, err
	}
	k := path[len(path)-1]
	if old, ok := t[k]; ok {
		switch old.(type) {
		case map[string]any, []any:
			return false, fmt.Errorf("%s holds a table or array, not a single value", strings.Join(path, "."))
		}
		if reflect.DeepEqual(old, v.native) {
			return false, nil
		}
	}
	t[k] = v.native
	return true, nil
}

func (d *tomlDoc) del(path []string) (bool, error) {
	t, err := d.table(path, false)
	if err != nil || t == nil {
		return false, err
	}
	if _, ok := t[path[len(path)-1]]; !ok {
		return false, nil
	}
	delete(t, path[len(path)-1])
	return true, nil
}

func (d *tomlDoc) render() (string, error) {
	out, err := toml.Marshal(d.m)
	if err != nil {
		return "", fmt.Errorf("render toml: %w", err)
	}
	return string(out), nil
}
